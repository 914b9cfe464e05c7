// No Docker engine here, so the image is checked by doing what its Dockerfile does: the same
// COPY set into a fresh directory, the same RUN commands, then ENTRYPOINT with the image's ENV,
// and the HEALTHCHECK command against it. A Dockerfile step that breaks makes this fail.
// The ENTRYPOINT listens on the embedded default 127.0.0.1:8765, so it runs (and the HEALTHCHECK
// with it) in a network namespace of its own, as in a container: a daemon already on this host's
// port 8765 neither fails the test nor answers its health check.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync, spawn } from 'node:child_process'
import { tempDir, printed } from './helpers/sidecar.js'
import { privateNetwork } from './helpers/netns.js'

const repo = new URL('..', import.meta.url).pathname
const text = await fs.readFile(path.join(repo, 'Dockerfile'), 'utf8')
const lines = text.replace(/\\\n\s*/g, ' ').split('\n').filter((l) => l.trim() && !l.startsWith('#'))
const instr = (name) => lines.filter((l) => l.startsWith(name + ' ')).map((l) => l.slice(name.length + 1).trim())

function parseEnv () {
  const env = {}
  for (const e of instr('ENV')) for (const m of e.matchAll(/(\w+)=(\S+)/g)) env[m[1]] = m[2]
  return env
}

describe('Dockerfile', () => {
  let app, child, state, net
  const env = parseEnv()

  beforeAll(async () => {
    app = await tempDir('docker-app-')
    for (const copy of instr('COPY')) {
      const parts = copy.split(/\s+/)
      const dest = parts.pop()
      for (const src of parts) {
        const to = dest.endsWith('/') && dest !== './' ? path.join(app, dest, path.basename(src)) : dest === './' ? path.join(app, src) : path.join(app, dest)
        await fs.cp(path.join(repo, src), to, { recursive: true })
      }
    }
    for (const run of instr('RUN')) {
      if (run.startsWith('mkdir -p /var/lib/transfer-sidecar')) continue // image filesystem layout, checked below
      execFileSync('sh', ['-c', run], { cwd: app, stdio: 'pipe', timeout: 300000 })
    }
  }, 600000)

  afterAll(async () => {
    child?.kill('SIGTERM')
    net?.stop()
  })

  it('is based on node:26-slim, runs as a non-root user, keeps state in a volume, checks health', () => {
    expect(instr('FROM')).toEqual(['node:26-slim'])
    expect(instr('USER')).toEqual(['node'])
    expect(instr('VOLUME')[0]).toContain(env.STATE_DIRECTORY)
    expect(instr('HEALTHCHECK')).toHaveLength(1)
    expect(text).toMatch(/chown node:node \/var\/lib\/transfer-sidecar/)
  })

  it('starts from its ENTRYPOINT on the embedded default and passes its HEALTHCHECK', async () => {
    state = await tempDir('docker-state-')
    net = await privateNetwork()
    const node = (argv) => argv[0] === 'node' ? [process.execPath, ...argv.slice(1)] : argv
    const entry = JSON.parse(instr('ENTRYPOINT')[0])
    child = spawn(...net.argv(node(entry)), { // nsenter execs node: child is the daemon
      cwd: app,
      env: { PATH: process.env.PATH, ...env, STATE_DIRECTORY: state, HOME: state }
    })
    await printed(child, 'transfer-sidecar listening', 'entrypoint')
    const health = JSON.parse(instr('HEALTHCHECK')[0].replace(/^.*CMD\s+/, ''))
    const run = () => execFileSync(...net.argv(node(health)), { env: { ...env }, stdio: 'pipe' })
    expect(run).not.toThrow()
    child.kill('SIGTERM')
    await new Promise((resolve) => child.once('exit', resolve))
    expect(run).toThrow()
    await expect(fs.stat(path.join(state, 'jobs', 'jobs.journal'))).resolves.toBeTruthy()
  })
})
