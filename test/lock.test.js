// One daemon per state directory (src/lock.js). A second one started on the same directory must
// stop before it touches the journal: before the lock, its start-up compaction replaced the
// journal file the running daemon kept appending to, and jobs acknowledged after that were lost.
import { describe, it, expect, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { spawn } from 'node:child_process'
import net from 'node:net'
import { fileURLToPath } from 'node:url'
import { spawnSidecar, client, tempDir } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'

const BIN = fileURLToPath(new URL('../bin/transfer-sidecar.js', import.meta.url))
const procs = []
afterAll(() => Promise.all(procs.map((p) => p.kill('SIGKILL'))))

// Runs the daemon to its end (it is expected to fail at start): { code, stderr }.
async function runToExit (configFile) {
  const child = spawn(process.execPath, [BIN], { env: { ...process.env, SIDECAR_CONFIG: configFile }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d) => { stderr += d })
  const timer = setTimeout(() => child.kill('SIGKILL'), 20000) // a second daemon that starts would run on
  const code = await new Promise((resolve) => child.once('exit', (c) => resolve(c)))
  clearTimeout(timer)
  return { code, stderr }
}

describe('state directory lock', () => {
  it('a second daemon on the same state dir exits before touching the journal; the first keeps every job', async () => {
    const stateDir = await tempDir('lock-state-')
    const root = await tempDir('lock-root-')
    const store = await tempDir('lock-store-')
    const port = await freePort()
    const config = { listen: [`127.0.0.1:${port}`], stateDir, roots: [root], targets: { local: { type: 'file', dir: store } } }
    const first = await spawnSidecar(config, { dir: stateDir })
    procs.push(first)
    const api = client(`http://127.0.0.1:${port}`)
    await fs.writeFile(path.join(root, 'a.txt'), 'a')
    expect((await api.run({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/a.txt', id: 'LOCK-A-0001' })).state).toBe('succeeded')
    const journal = path.join(stateDir, 'jobs', 'jobs.journal')
    const before = await fs.stat(journal)

    // Another port, so that only the lock can stop it (a busy port would stop it too, but late).
    const second = path.join(await tempDir('lock-second-'), 'config.json')
    await fs.writeFile(second, JSON.stringify({ ...config, listen: [`127.0.0.1:${await freePort()}`] }))
    const { code, stderr } = await runToExit(second)
    expect(code).toBe(1)
    expect(stderr).toContain(`cannot start: another transfer-sidecar is running on the state directory ${await fs.realpath(stateDir)}`)
    expect(stderr).not.toMatch(/\n\s+at /) // one line, no stack trace
    expect((await fs.stat(journal)).ino).toBe(before.ino) // not replaced

    // A job the first daemon acknowledges now is in the journal and survives its kill -9.
    await fs.writeFile(path.join(root, 'b.txt'), 'b')
    expect((await api.run({ direction: 'upload', target: 'local', local: path.join(root, 'b.txt'), remote: '/b.txt', id: 'LOCK-B-0001' })).state).toBe('succeeded')
    await first.kill('SIGKILL')
    const again = await spawnSidecar(config, { dir: stateDir }) // the kernel released the lock
    procs.push(again)
    for (const id of ['LOCK-A-0001', 'LOCK-B-0001']) expect((await api.job(id)).json?.state).toBe('succeeded')
    await again.kill('SIGTERM')
    await api.close()
  })

  it('is released by a clean stop: the same process can start on the directory again', async () => {
    const { startSidecar, validateConfig, StateDirLockedError } = await import('../src/index.js')
    const { createLogger } = await import('../src/logger.js')
    const stateDir = await tempDir('lock-state-')
    const config = validateConfig({ listen: ['127.0.0.1:0'], stateDir, roots: [], logLevel: 'error', targets: { local: { type: 'file', dir: await tempDir('lock-store-') } } })
    const logger = createLogger({ level: 'error' })
    const a = await startSidecar(config, { logger })
    const locked = await startSidecar(config, { logger }).then(() => null, (err) => err)
    expect(locked).toBeInstanceOf(StateDirLockedError)
    await a.stop({ graceMs: 0 })
    const b = await startSidecar(config, { logger })
    await b.stop({ graceMs: 0 })
  })

  it('a port in use: one line saying so, and how to choose another listener', async () => {
    const busy = net.createServer()
    await new Promise((resolve) => busy.listen(0, '127.0.0.1', resolve))
    try {
      const dir = await tempDir('busy-')
      const file = path.join(dir, 'config.json')
      await fs.writeFile(file, JSON.stringify({ listen: [`127.0.0.1:${busy.address().port}`], stateDir: dir, roots: [], targets: { local: { type: 'file', dir: path.join(dir, 'store') } } }))
      const { code, stderr } = await runToExit(file)
      expect(code).toBe(1)
      expect(stderr).toMatch(/cannot start: .*EADDRINUSE/)
      expect(stderr).toContain('SIDECAR_CONFIG')
      expect(stderr).toContain('"listen"')
      expect(stderr).not.toMatch(/\n\s+at /)
    } finally {
      busy.close()
    }
  })
})
