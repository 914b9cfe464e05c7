// The unix socket listener:
// - it never allows more than its configured mode, from its creation on: a daemon started with
//   umask 000 must not leave it open to everyone until the chmod. Read from the system calls of the
//   real daemon (strace, which scripts/test-all.sh installs): the umask in force at the bind() that
//   creates the socket file, and the order of chown and chmod;
// - a socket file left by a dead process is replaced; one somebody listens on is left alone, even
//   when that listener is too busy to accept (EAGAIN), and the start fails.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { spawn, spawnSync, execFileSync } from 'node:child_process'
import { tempDir, waitFor } from './helpers/sidecar.js'
import { startSidecar, validateConfig } from '../src/index.js'
import { createLogger } from '../src/logger.js'
import { listenAll, closeAll } from '../src/listeners.js'
import { lineProtocol } from '../src/http/lines.js'

const BIN = new URL('../bin/transfer-sidecar.js', import.meta.url).pathname

function hasStrace () {
  try {
    execFileSync('strace', ['-V'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

describe('unix socket permissions', () => {
  it('is created owner-only under umask 000, given its group, then its mode', async () => {
    expect(hasStrace(), 'this test needs strace (scripts/test-all.sh installs it)').toBe(true)
    const dir = await tempDir('sidecar-sockmode-')
    const socket = path.join(dir, 'state', 'sidecar.sock')
    const trace = path.join(dir, 'trace.txt')
    const config = path.join(dir, 'config.json')
    const gid = process.getgid()
    await fs.writeFile(config, JSON.stringify({
      listen: [`unix:${socket}`],
      stateDir: path.join(dir, 'state'),
      roots: [dir],
      socketMode: '0660',
      socketGroup: gid,
      targets: { local: { type: 'file', dir: path.join(dir, 'store') } }
    }))
    const child = spawn('sh', ['-c', 'umask 000; exec strace -f -qq -e trace=umask,mkdir,mkdirat,bind,chmod,fchmodat,chown,fchownat,link,linkat -o "$0" "$1" "$2"', trace, process.execPath, BIN], {
      env: { ...process.env, SIDECAR_CONFIG: config },
      stdio: ['ignore', 'pipe', 'pipe']
    })
    let output = ''
    child.stdout.on('data', (d) => { output += d })
    child.stderr.on('data', (d) => { output += d })
    const exited = new Promise((resolve) => child.once('exit', resolve))
    try {
      await waitFor(async () => ((await fs.stat(socket).catch(() => null))?.mode & 0o777) === 0o660, { timeoutMs: 30000 })
        .catch((err) => { throw new Error(`${err.message}; daemon output:\n${output}`) })
    } finally {
      // strace, started with the program, blocks fatal signals (its -I3): stop the daemon itself.
      const daemon = (await fs.readFile(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').catch(() => '')).trim()
      if (daemon) process.kill(Number(daemon), 'SIGTERM')
      else child.kill('SIGKILL')
      await exited
    }

    const lines = (await fs.readFile(trace, 'utf8')).split('\n')
    const quoted = JSON.stringify(socket)
    // Bound in a directory of its own, made owner-only (whatever the umask: mkdtemp's 0700 under
    // umask 000), then given its group, then its mode, and only then linked under its path.
    const bindAt = lines.findIndex((l) => /\bbind\(/.test(l) && / = 0$/.test(l) && l.includes(`sun_path="${path.dirname(socket)}/.`))
    expect(bindAt, `no bind in a private directory beside ${socket} in the trace`).toBeGreaterThan(-1)
    const bound = /sun_path="([^"]+)"/.exec(lines[bindAt])[1]
    const mkdirLine = lines.slice(0, bindAt).find((l) => /\bmkdir(at)?\(/.test(l) && l.includes(JSON.stringify(path.dirname(bound))))
    expect(mkdirLine, 'the private directory is created').toBeTruthy()
    expect(/, 0700\) = 0$/.test(mkdirLine), mkdirLine).toBe(true)
    const b = JSON.stringify(bound)
    const chownAt = lines.findIndex((l, i) => i > bindAt && /\b(f?chown(at)?)\(/.test(l) && l.includes(b))
    const chmodAt = lines.findIndex((l, i) => i > bindAt && /\b(f?chmod(at)?)\(/.test(l) && l.includes(b))
    const linkAt = lines.findIndex((l, i) => i > bindAt && /\blink(at)?\(/.test(l) && l.includes(b) && l.includes(quoted))
    expect(chownAt, 'chown of the socket').toBeGreaterThan(bindAt)
    expect(chmodAt, 'chmod of the socket after its chown').toBeGreaterThan(chownAt)
    expect(linkAt, 'linked under its path after its chmod').toBeGreaterThan(chmodAt)
    // The process's umask is never changed: its other threads create files under it meanwhile.
    expect(lines.filter((l) => /\bumask\(/.test(l)), 'umask() calls').toEqual([])
  })
})

// The umask is the process's: every thread of it (libuv's pool: the spool's mkdir of rejected/,
// the journal's compaction, a job submitted over TCP meanwhile) creates its files under it. Binding
// the socket must not change the mode of what the rest of the daemon creates at the same moment.
describe('binding the unix socket', () => {
  it('leaves the mode of files and directories created meanwhile by other threads alone', async () => {
    const dir = await tempDir('sidecar-sockumask-')
    const config = { listen: [{ type: 'unix', path: path.join(dir, 'run', 's.sock') }], socketGid: null, socketMode: 0o660 }
    const old = process.umask(0o022)
    const run = { stop: false }
    let n = 0
    const wrong = []
    // What the spool does (mkdir rejected/ 0750) while the listeners come up.
    const loop = async () => {
      while (!run.stop) {
        const d = path.join(dir, `d${n++}`)
        await fs.mkdir(d, { mode: 0o750 })
        const mode = (await fs.stat(d)).mode & 0o777
        if (mode !== 0o750) wrong.push(mode.toString(8))
        await fs.rmdir(d)
      }
    }
    try {
      const loops = [loop(), loop(), loop(), loop()]
      for (let i = 0; i < 200 && !wrong.length; i++) {
        const servers = await listenAll({ app: (req, res) => res.end(), lines: lineProtocol({ config, scheduler: null, logger: null }) }, config)
        expect((await fs.stat(config.listen[0].path)).mode & 0o777).toBe(0o660)
        await closeAll(servers, 0)
      }
      run.stop = true
      await Promise.all(loops)
    } finally {
      run.stop = true
      process.umask(old)
    }
    expect(n).toBeGreaterThan(0)
    expect(wrong, 'directories created (mode 0750, umask 022) while the socket was bound').toEqual([])
  })
})

describe('a socket file already at the path', () => {
  const cleanup = []
  afterEach(async () => {
    for (const fn of cleanup.splice(0)) await fn()
  })

  async function start (dir, socket) {
    const config = validateConfig({
      listen: [`unix:${socket}`],
      stateDir: path.join(dir, 'state'),
      roots: [dir],
      logLevel: 'silent',
      targets: { local: { type: 'file', dir: path.join(dir, 'store') } }
    })
    const sc = await startSidecar(config, { logger: createLogger({ level: 'silent' }) })
    cleanup.push(() => sc.stop({ graceMs: 0 }))
    return sc
  }

  it('left by a process killed -9 is replaced', async () => {
    const dir = await tempDir('sidecar-sock-')
    const socket = path.join(dir, 's.sock')
    spawnSync(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(socket)}, () => process.kill(process.pid, 'SIGKILL'))`])
    expect((await fs.lstat(socket)).isSocket()).toBe(true)
    await start(dir, socket)
    const res = await fetchOver(socket, '/healthz')
    expect(res).toMatch(/^HTTP\/1\.1 200 /)
  })

  it('of a listener too busy to accept is left alone, and the start fails', async () => {
    const dir = await tempDir('sidecar-sock-')
    const socket = path.join(dir, 's.sock')
    // A listener that never accepts: its event loop is blocked once it listens (backlog 1).
    const busy = spawn(process.execPath, ['-e', `require('net').createServer().listen({ path: ${JSON.stringify(socket)}, backlog: 1 }, () => { console.log('ready'); for (;;); })`], { stdio: ['ignore', 'pipe', 'inherit'] })
    cleanup.push(async () => { busy.kill('SIGKILL'); await fs.rm(socket, { force: true }) })
    await new Promise((resolve) => busy.stdout.once('data', resolve))
    // Fill its accept queue until a connect answers EAGAIN.
    const clients = []
    cleanup.push(() => { for (const c of clients) c.destroy() })
    let full = null
    for (let i = 0; i < 64 && !full; i++) {
      full = await new Promise((resolve) => {
        const c = net.connect(socket)
        clients.push(c)
        c.once('connect', () => resolve(null))
        c.once('error', (err) => resolve(err.code))
      })
    }
    expect(full).toBe('EAGAIN')
    await expect(start(dir, socket)).rejects.toThrow(/is in use by another process \(connecting to it: EAGAIN\)/)
    const st = await fs.lstat(socket)
    expect(st.isSocket()).toBe(true)
  })

  it('of a live listener is left alone, and the start fails', async () => {
    const dir = await tempDir('sidecar-sock-')
    const socket = path.join(dir, 's.sock')
    const other = net.createServer((c) => c.destroy())
    await new Promise((resolve) => other.listen(socket, resolve))
    cleanup.push(() => new Promise((resolve) => other.close(resolve)))
    await expect(start(dir, socket)).rejects.toThrow(/is in use by another process$/)
    expect((await fs.lstat(socket)).isSocket()).toBe(true)
  })
})

// One HTTP/1.1 request over a unix socket; the raw answer.
function fetchOver (socket, target) {
  return new Promise((resolve, reject) => {
    const c = net.connect(socket, () => c.end(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`))
    let out = ''
    c.on('data', (d) => { out += d })
    c.once('end', () => resolve(out))
    c.once('error', reject)
  })
}
