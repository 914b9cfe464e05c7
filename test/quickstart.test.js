// The README's Quick start, as a newcomer runs it: `npm start` on the embedded default (in a
// network namespace of its own, so port 8765 is free whatever runs on this host), then the Quick
// start's shell lines and the PHP usage snippet, taken from the README itself, against it. Only
// the README's placeholder job id is replaced, by the id the POST answered; the PHP snippet's
// `vendor/autoload.php` is what Composer would give, the library's examples/bootstrap.php.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync, spawn } from 'node:child_process'
import { tempDir, printed } from './helpers/sidecar.js'
import { privateNetwork } from './helpers/netns.js'

const repo = new URL('..', import.meta.url).pathname
const readme = await fs.readFile(path.join(repo, 'README.md'), 'utf8')
const blockAfter = (marker, lang) => {
  const at = readme.indexOf(marker)
  expect(at, marker).toBeGreaterThan(-1)
  const start = readme.indexOf('```' + lang + '\n', at) + lang.length + 4
  return readme.slice(start, readme.indexOf('\n```', start))
}

let net, daemon, home
const env = () => {
  const e = { ...process.env, HOME: home }
  for (const k of ['STATE_DIRECTORY', 'XDG_STATE_HOME', 'SIDECAR_CONFIG', 'npm_config_nodedir']) delete e[k]
  return e
}
const inNetns = (cmd, opts = {}) => execFileSync(...net.argv(cmd), { env: env(), encoding: 'utf8', timeout: 60000, ...opts })

beforeAll(async () => {
  home = await tempDir('quickstart-home-')
  net = await privateNetwork()
  // The first Quick start line's `npm start`, in its own process group (npm → sh → node).
  daemon = spawn(...net.argv(['npm', 'start']), { cwd: repo, env: env(), detached: true })
  await printed(daemon, 'transfer-sidecar listening', 'npm start')
}, 60000)

afterAll(async () => {
  if (daemon?.exitCode === null) {
    const exited = new Promise((resolve) => daemon.once('exit', resolve))
    process.kill(-daemon.pid, 'SIGTERM')
    await exited
  }
  net?.stop()
})

describe('README Quick start on a fresh state directory', () => {
  const state = () => path.join(home, '.local', 'state', 'transfer-sidecar')

  it('the shell lines: an upload to the `local` target, long-polled until it succeeded', async () => {
    const lines = blockAfter('The embedded default listens on', 'sh').split('\n')
    const cut = lines.findIndex((l) => l.startsWith('# {"id"'))
    expect(cut).toBeGreaterThan(0)
    const posted = inNetns(['bash', '-euo', 'pipefail', '-c', lines.slice(0, cut).join('\n')])
    const { id, state: first } = JSON.parse(posted)
    expect(first).toBe('queued')
    const rest = lines.slice(cut + 1).join('\n')
    expect(rest).toContain('k3Jm…')
    const job = JSON.parse(inNetns(['bash', '-euo', 'pipefail', '-c', rest.replaceAll('k3Jm…', id)]))
    expect(job).toMatchObject({ id, state: 'succeeded', bytes: 6, direction: 'upload', target: 'local' })
    expect(await fs.readFile(path.join(state(), 'store', 'greetings', 'hello.txt'), 'utf8')).toBe('hello\n')
  })

  it('the PHP usage snippet, run as written with the library autoloaded', async () => {
    const app = await tempDir('quickstart-php-')
    await fs.mkdir(path.join(app, 'vendor'))
    await fs.writeFile(path.join(app, 'vendor', 'autoload.php'), `<?php require ${JSON.stringify(path.join(repo, 'php-client', 'examples', 'bootstrap.php'))};\n`)
    await fs.writeFile(path.join(app, 'snippet.php'), `<?php\n${blockAfter('## PHP usage', 'php')}\necho json_encode($job);\n`)
    await fs.writeFile(path.join(state(), 'files', 'hello.txt'), 'hello from php\n')
    // Found through XDG_STATE_HOME as the daemon finds it (a snippet that assumed $HOME would fail).
    const out = inNetns(['php', 'snippet.php'], { cwd: app, env: { ...env(), HOME: '/nonexistent', XDG_STATE_HOME: path.join(home, '.local', 'state') } }).trim().split('\n')
    const job = JSON.parse(out.at(-1))
    expect(job).toMatchObject({ state: 'succeeded', direction: 'upload', target: 'local', remote: '/greetings/hello.txt' })
    expect(out[0]).toBe(`job ${job.id}: succeeded`) // what the snippet prints
    expect(await fs.readFile(path.join(state(), 'store', 'greetings', 'hello.txt'), 'utf8')).toBe('hello from php\n')
  })
})
