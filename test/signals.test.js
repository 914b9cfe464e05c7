// SIGTERM while the daemon is still starting (jobs recovered, the spool's first scan under way,
// nothing listening yet) is a graceful stop like any other, once the start is done: jobs are left
// queued, not cut as by a crash (which would count the attempt and, on the last one, fail the job
// INTERRUPTED at the next start). Recovered jobs start only once the daemon listens.
import { describe, it, expect } from 'vitest'
import { spawn } from 'node:child_process'
import fs from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { tempDir } from './helpers/sidecar.js'

const BIN = new URL('../bin/transfer-sidecar.js', import.meta.url).pathname

function run (cfg) {
  const child = spawn(process.execPath, [BIN], { env: { ...process.env, SIDECAR_CONFIG: cfg }, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  child.stderr.on('data', (d) => { out += d })
  return { child, out: () => out, exited: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal }))) }
}

async function until (fn, ms = 60000) {
  const end = Date.now() + ms
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out: ${fn}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

// Jobs start only once the daemon listens (Scheduler.start), if at all.
function startedAfterListening (out) {
  const running = out.search(/"job":"startup-job-1","state":"running"/)
  if (running !== -1) expect(out.indexOf('transfer-sidecar listening')).toBeGreaterThan(-1)
  if (running !== -1) expect(out.indexOf('transfer-sidecar listening')).toBeLessThan(running)
}

describe('signals', () => {
  it('SIGTERM during the start stops gracefully once started: the recovered job stays queued, unstarted, not INTERRUPTED', async () => {
    const dir = await tempDir('signals-')
    const [root, store, state] = ['root', 'store', 'state'].map((d) => path.join(dir, d))
    const spool = path.join(state, 'spool')
    for (const d of [root, store, path.join(state, 'jobs'), spool]) await fs.mkdir(d, { recursive: true })
    await fs.writeFile(path.join(root, 'big.bin'), Buffer.alloc(64 << 20, 1))
    const now = new Date().toISOString()
    const job = {
      ...{ id: 'startup-job-1', direction: 'upload', target: 'l', local: path.join(root, 'big.bin'), remote: '/big.bin', overwrite: false, expectedSha256: null },
      ...{ callback: null, callbackState: null, state: 'queued', attempts: 0, bytes: 0, size: null, sha256: null, rate: null, error: null },
      ...{ createdAt: now, updatedAt: now, startedAt: null, finishedAt: null, nextAttemptAt: null }
    }
    await fs.writeFile(path.join(state, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
    // A spool backlog keeps the start busy (its first scan is part of it) after the job is recovered.
    for (let i = 0; i < 2000; i++) {
      const id = `spooled-${String(i).padStart(6, '0')}`
      await fs.writeFile(path.join(spool, `${id}.json`), JSON.stringify({ id, direction: 'download', target: 'l', local: path.join(root, `d${i}.txt`), remote: '/absent' }))
    }
    const cfg = path.join(dir, 'cfg.json')
    await fs.writeFile(cfg, JSON.stringify({
      listen: ['127.0.0.1:0'],
      stateDir: state,
      roots: [root],
      retry: { attempts: 1 },
      shutdownGraceMs: 0,
      logLevel: 'info',
      targets: { l: { type: 'file', dir: store, concurrency: 1 } }
    }))

    const first = run(cfg)
    await until(() => first.out().includes('recovered jobs from the journal'))
    first.child.kill('SIGTERM')
    expect(await first.exited).toEqual({ code: 0, signal: null })
    expect(first.out()).toContain('"msg":"stopped"') // once the start was done
    // No job started for the stop: the recovered one keeps its attempts.
    expect(first.out()).toContain('a stop was asked for during the start: jobs stay queued')
    expect(first.out()).not.toMatch(/"job":"startup-job-1","state":"running"/)

    // Left queued, not cut as by a crash: it runs now.
    const second = run(cfg)
    const both = () => first.out() + second.out()
    try {
      await until(() => /"job":"startup-job-1","state":"(failed|succeeded)"/.test(both()))
      expect(both()).toMatch(/"job":"startup-job-1","state":"succeeded"/)
      expect(both()).not.toContain('INTERRUPTED')
      startedAfterListening(second.out())
    } finally {
      // Stopped however the test went: gracefully once started, else killed.
      const started = await until(() => second.out().includes('transfer-sidecar listening')).then(() => true, () => false)
      second.child.kill(started ? 'SIGTERM' : 'SIGKILL')
      await second.exited
    }
  })

  // A second signal of either kind ends a shutdown that waits for its transfers: a Ctrl-C after the
  // service manager's SIGTERM as well as a double Ctrl-C.
  for (const [first, second] of [['SIGTERM', 'SIGINT'], ['SIGINT', 'SIGTERM'], ['SIGTERM', 'SIGTERM']]) {
    it(`${first} then ${second} while a transfer holds the shutdown: the daemon ends at once`, async () => {
      const dir = await tempDir('signals-')
      const root = path.join(dir, 'root')
      await fs.mkdir(root)
      await fs.writeFile(path.join(root, 'a.txt'), 'a\n')
      // A server that takes the upload's connection and never answers.
      const sockets = new Set()
      const stall = net.createServer((socket) => { sockets.add(socket); socket.on('error', () => {}) })
      await new Promise((resolve) => stall.listen(0, '127.0.0.1', resolve))
      const cfg = path.join(dir, 'cfg.json')
      await fs.writeFile(cfg, JSON.stringify({
        listen: [`unix:${path.join(dir, 's.sock')}`],
        stateDir: path.join(dir, 'state'),
        roots: [root],
        shutdownGraceMs: 600000,
        logLevel: 'info',
        targets: { h: { type: 'http', url: `http://127.0.0.1:${stall.address().port}/` } }
      }))
      const daemon = run(cfg)
      try {
        await until(() => daemon.out().includes('transfer-sidecar listening'))
        const line = JSON.stringify({ direction: 'upload', target: 'h', local: path.join(root, 'a.txt'), remote: '/a.txt' }) + '\n'
        const answer = await new Promise((resolve, reject) => {
          const c = net.connect(path.join(dir, 's.sock'), () => c.write(line))
          c.once('data', (d) => { resolve(JSON.parse(d)); c.end() })
          c.once('error', reject)
        })
        expect(answer.status).toBe(202)
        await until(() => sockets.size > 0) // the upload is under way, and stalls
        daemon.child.kill(first)
        await until(() => daemon.out().includes('waiting for running transfers'))
        daemon.child.kill(second)
        const ended = await Promise.race([daemon.exited, new Promise((resolve) => setTimeout(resolve, 5000, 'still running 5 s later'))])
        expect(ended).toEqual({ code: null, signal: second })
      } finally {
        daemon.child.kill('SIGKILL')
        await daemon.exited
        for (const socket of sockets) socket.destroy()
        stall.close()
      }
    })
  }
})
