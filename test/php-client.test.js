// The PHP client (php-client/) against the real daemon, Apache httpd mod_dav and a MiniDFSCluster:
// starts them, then runs PHPUnit (unit + integration suites) as a child process with the
// environment its integration tests require. Needs php-cli, php-curl and phpunit (Debian
// packages); without them this suite fails, it does not skip.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'

const PHP_DIR = new URL('../php-client/', import.meta.url).pathname
const CALLBACK_SECRET = 'php-callback-secret-0123456789'
let httpd, hdfs, sc, env
const dirs = []

function requireCommand (cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' })
  if (r.error || r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? r.stderr}): install php-cli php-curl phpunit (Debian 12)`)
  }
  return r.stdout
}

// Runs a command, echoing its output as it comes; resolves to its exit code and whole output.
function run (cmd, args, options) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (d) => { output += d; process.stdout.write(d) })
    child.stderr.on('data', (d) => { output += d; process.stderr.write(d) })
    child.once('error', reject)
    child.once('close', (code, signal) => resolve({ code, signal, output }))
  })
}

async function phpFiles (dir) {
  const out = []
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name)
    if (entry.isDirectory() && entry.name !== 'vendor') out.push(...await phpFiles(p))
    else if (entry.isFile() && entry.name.endsWith('.php')) out.push(p)
  }
  return out
}

beforeAll(async () => {
  requireCommand('php', ['-r', 'if (!extension_loaded("curl")) { fwrite(STDERR, "ext-curl missing\\n"); exit(1); }'])
  requireCommand('phpunit', ['--version'])
  ;[httpd, hdfs] = await Promise.all([startHttpd(), startHdfs()])
  await hdfs.command('mkdir /data www-data 755')
  await hdfs.command('mkdir /php-direct www-data 755')
  const root = await tempDir('php-client-root-')
  const store = await tempDir('php-client-store-')
  dirs.push(root, store)
  const callbackUrl = `http://127.0.0.1:${await freePort()}/hooks/`
  const handoffSocket = path.join(await tempDir('php-client-handoff-'), 'handoff.sock')
  dirs.push(path.dirname(handoffSocket))
  sc = await startTestSidecar({
    roots: [root],
    targets: {
      local: { type: 'file', dir: store },
      files: { type: 'http', url: httpd.uploadUrl },
      hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' }
    },
    extra: {
      spool: { intervalMs: 200 },
      handoff: { listen: [`unix:${handoffSocket}`] },
      callbacks: { allow: [callbackUrl], secret: CALLBACK_SECRET, attempts: 3, baseDelayMs: 200, maxDelayMs: 1000 }
    }
  })
  dirs.push(sc.stateDir)
  env = {
    ...process.env,
    SIDECAR_SOCKET: sc.socket,
    SIDECAR_PORT: String(new URL(sc.url).port),
    SIDECAR_HANDOFF_SOCKET: handoffSocket,
    SIDECAR_ROOT: root,
    SIDECAR_SPOOL: sc.config.spool.dir,
    SIDECAR_CALLBACK_URL: callbackUrl,
    SIDECAR_CALLBACK_SECRET: CALLBACK_SECRET,
    HTTPD_UPLOAD_URL: httpd.uploadUrl,
    WEBHDFS_NAMENODE: hdfs.namenodes[0],
    WEBHDFS_USER: 'www-data',
    WEBHDFS_BASE: '/php-direct'
  }
})

afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await Promise.all([httpd?.stop(), hdfs?.stop()])
  await Promise.all(dirs.map((d) => fs.rm(d, { recursive: true, force: true })))
})

describe('php-client', () => {
  it('every PHP file passes php -l', async () => {
    const files = await phpFiles(PHP_DIR)
    expect(files.length).toBeGreaterThan(20)
    const failures = []
    for (const file of files) {
      const r = spawnSync('php', ['-l', file], { encoding: 'utf8' })
      if (r.status !== 0) failures.push(`${file}:\n${r.stdout}${r.stderr}`)
    }
    expect(failures, failures.join('\n')).toEqual([])
  })

  it('PHPUnit unit and integration suites pass against the real servers', async () => {
    const { code, signal, output } = await run('phpunit', ['-c', path.join(PHP_DIR, 'phpunit.xml.dist'), '--colors=never'], { env, cwd: PHP_DIR })
    expect({ code, signal }, `phpunit failed:\n${output}`).toEqual({ code: 0, signal: null })
    expect(output).toMatch(/OK \(\d+ tests/)
  }, 900_000)
})
