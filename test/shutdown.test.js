// A graceful stop (SIGTERM) of the daemon as a real process: what it leaves for the next start and
// how long it takes. README, Shutdown: listeners close, running transfers get shutdownGraceMs, then
// are aborted and left queued; nothing more is accepted.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import http from 'node:http'
import path from 'node:path'
import { spawnSidecar, spoolJob, tempDir, waitFor, client } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'

const servers = []
const daemons = []
afterEach(async () => {
  for (const d of daemons.splice(0)) await d.kill('SIGKILL')
  for (const s of servers.splice(0)) {
    s.closeAllConnections()
    s.close()
  }
})

// An http server answering `handler`, for the targets below.
async function server (handler) {
  const s = http.createServer(handler)
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
  servers.push(s)
  return `http://127.0.0.1:${s.address().port}/`
}

async function daemon (dir, extra) {
  const port = await freePort()
  const config = { listen: [`127.0.0.1:${port}`], stateDir: path.join(dir, 'state'), roots: [path.join(dir, 'root')], shutdownGraceMs: 500, ...extra }
  await fs.mkdir(path.join(dir, 'root'), { recursive: true })
  const d = await spawnSidecar(config, { dir })
  daemons.push(d)
  return { ...d, api: client(`http://127.0.0.1:${port}`), config }
}

// The last record of each job in the journal.
async function journal (dir) {
  const records = new Map()
  for (const line of (await fs.readFile(path.join(dir, 'state', 'jobs', 'jobs.journal'), 'utf8')).split('\n')) {
    if (!line) continue
    const entry = JSON.parse(line)
    if (entry.op === 'put') records.set(entry.job.id, entry.job)
  }
  return records
}

describe('a graceful stop', () => {
  // Stopped by the daemon, not by the job: the attempt is given back, so a job stopped at every
  // restart does not use up its retries (the server's 503 after the restart is retried).
  it('leaves a running job queued with its attempt given back', async () => {
    const dir = await tempDir('shutdown-attempt-')
    let calls = 0
    const url = await server((req, res) => {
      calls++
      if (calls === 1) return res.writeHead(200, { 'content-length': 1000 }).write('x') // then stalls
      if (calls === 2) return res.writeHead(503).end()
      res.writeHead(200, { 'content-length': 3 }).end('abc')
    })
    const extra = { retry: { attempts: 2, baseDelayMs: 10, maxDelayMs: 20 }, targets: { web: { type: 'http', url } } }
    let d = await daemon(dir, extra)
    const job = { id: 'stopped-job-0001', direction: 'download', target: 'web', local: path.join(dir, 'root', 'x.bin'), remote: '/x.bin' }
    expect((await d.api.submit(job)).status).toBe(202)
    await waitFor(() => calls === 1)
    expect(await d.kill('SIGTERM')).toEqual({ code: 0, signal: null })
    expect((await journal(dir)).get(job.id)).toMatchObject({ state: 'queued', attempts: 0 })
    d = await daemon(dir, extra)
    expect((await d.api.job(job.id, 30)).json).toMatchObject({ state: 'succeeded', attempts: 2 })
  })

  // An upload whose server takes the body and never answers, then does not answer the removal of
  // the temp name either: the stop took shutdownGraceMs + the target's idleMs (60 s), past a
  // service manager's stop timeout (the unit's 30 s), which then ends it with SIGKILL.
  it('ends within seconds when a stalled server does not answer the cleanup either', async () => {
    const dir = await tempDir('shutdown-stall-')
    let puts = 0
    const url = await server((req) => { if (req.method === 'PUT') puts++ }) // answers nothing, ever
    const d = await daemon(dir, { targets: { web: { type: 'http', url } } })
    await fs.writeFile(path.join(dir, 'root', 'a.txt'), 'a'.repeat(100000))
    expect((await d.api.submit({ direction: 'upload', target: 'web', local: path.join(dir, 'root', 'a.txt'), remote: '/a.txt' })).status).toBe(202)
    await waitFor(() => puts === 1)
    const stopped = Date.now()
    expect(await d.kill('SIGTERM')).toEqual({ code: 0, signal: null })
    expect(Date.now() - stopped).toBeLessThan(15000) // 500 ms of grace, 1 s of cleanup at most, 5 s for the aborted
  })

  // The spool's scan under way stops at its next file, and no queued job starts: the stop took as
  // long as the whole backlog and ran it.
  it('ingests no more spooled jobs and starts no queued one', async () => {
    const dir = await tempDir('shutdown-spool-')
    const spool = path.join(dir, 'spool')
    const ready = path.join(dir, 'ready') // written here, then moved into the spool at once
    for (const d of [spool, ready, path.join(dir, 'root')]) await fs.mkdir(d, { recursive: true })
    await fs.writeFile(path.join(dir, 'root', 'a.txt'), 'a')
    for (let i = 0; i < 2000; i++) {
      await spoolJob(ready, { id: `spooled-${String(i).padStart(6, '0')}`, direction: 'upload', target: 'local', local: path.join(dir, 'root', 'a.txt'), remote: `/s/${i}`, overwrite: true })
    }
    const d = await daemon(dir, { spool: { dir: spool, intervalMs: 100 }, targets: { local: { type: 'file', dir: path.join(dir, 'store') } } })
    // All at once, for one scan to list them all: the spool directory replaced by the full one.
    await fs.rename(ready, spool)
    await waitFor(() => d.output.join('').includes('spooled job ingested'))
    expect(await d.kill('SIGTERM')).toEqual({ code: 0, signal: null })
    const left = (await fs.readdir(spool)).filter((n) => n.endsWith('.json')).length
    const records = await journal(dir)
    expect(left + records.size).toBe(2000) // each spooled job in exactly one place
    expect(left).toBeGreaterThan(1000) // the scan stopped with the stop
  })

  // A cancelled upload's temp name is removed again 1, 5 and 20 s later, for a server that stores
  // a cut PUT a moment after the daemon's first removal; a stop right after the cancel dropped those
  // removals, and the temp name stayed on the server for good.
  it('still removes a cancelled upload\'s temp name that the server stored after its first removal', async () => {
    const dir = await tempDir('shutdown-sweep-')
    const stored = new Set()
    const deletes = []
    let putting = false
    const url = await server((req, res) => {
      if (req.method === 'PUT') {
        putting = true
        return req.pause() // the body is taken slowly, then cut by the cancel
      }
      if (req.method === 'DELETE') {
        deletes.push(req.url)
        const had = stored.delete(req.url)
        if (deletes.length === 1) setTimeout(() => stored.add(req.url), 300) // the cut PUT, stored late
        return res.writeHead(had ? 204 : 404).end()
      }
      res.writeHead(404).end()
    })
    const d = await daemon(dir, { targets: { web: { type: 'http', url } } })
    await fs.writeFile(path.join(dir, 'root', 'big.bin'), Buffer.alloc(8 << 20, 1))
    const job = await d.api.submit({ direction: 'upload', target: 'web', local: path.join(dir, 'root', 'big.bin'), remote: '/big.bin' })
    await waitFor(() => putting)
    expect((await d.api.call('DELETE', `/v1/jobs/${job.json.id}`)).json.state).toBe('cancelled')
    await waitFor(() => deletes.length === 1)
    expect(await d.kill('SIGTERM')).toEqual({ code: 0, signal: null })
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(deletes.length).toBeGreaterThan(1)
    expect([...stored]).toEqual([])
  })

  // A daemon that cannot listen (another one has its socket or port) stops before its first spool
  // scan: it took the other daemon's spooled jobs into a journal that nothing runs.
  it('of a second daemon that cannot listen leaves the spool it shares alone', async () => {
    const dir = await tempDir('shutdown-second-')
    const spool = path.join(dir, 'spool')
    await fs.mkdir(spool, { recursive: true })
    const first = await daemon(path.join(dir, 'a'), { spool: { dir: spool }, targets: { local: { type: 'file', dir: path.join(dir, 'store') } } })
    first.child.kill('SIGSTOP') // holds its port, ingests nothing
    await spoolJob(spool, { id: 'shared-spool-0001', direction: 'upload', target: 'local', local: path.join(dir, 'a', 'root', 'x'), remote: '/x' })
    const config = { ...first.config, stateDir: path.join(dir, 'b', 'state') }
    await fs.mkdir(path.join(dir, 'b'), { recursive: true })
    const second = await spawnSidecar(config, { dir: path.join(dir, 'b') }).then(() => null, (err) => err)
    expect(second?.message).toMatch(/exited 1 before it was ready[\s\S]*(in use|EADDRINUSE)/)
    expect(await fs.readdir(spool)).toContain('shared-spool-0001.json')
    first.child.kill('SIGCONT')
  })
})
