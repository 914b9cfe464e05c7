// Queue limits, per-target concurrency, pruning and socket ownership, with a slow fault server
// standing in for a busy backend.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import http from 'node:http'
import { startFaultServer } from './harness/faults.js'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'

const MiB = 1 << 20
let faults, sc, root

beforeAll(async () => {
  faults = await startFaultServer()
  root = await tempDir('queue-root-')
  sc = await startTestSidecar({
    roots: [root],
    extra: { queue: { limit: 3, retentionSeconds: 3600 }, socketGroup: 'www-data' },
    targets: { slow: { type: 'http', url: faults.url, atomic: false, concurrency: 1 } }
  })
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await faults?.stop()
})

describe('queue', () => {
  it('runs one job at a time per target at concurrency 1 and answers 429 with Retry-After when full', async () => {
    const submit = (i) => sc.api.submit({ direction: 'download', target: 'slow', local: path.join(root, `q${i}`), remote: `/slow/${MiB}/${2 * MiB}` })
    const ids = []
    for (let i = 0; i < 3; i++) ids.push((await submit(i)).json.id)
    const states = await Promise.all(ids.map(async (id) => (await sc.api.job(id)).json.state))
    expect(states).toEqual(['running', 'queued', 'queued'])
    const full = await submit(3)
    expect(full.status).toBe(429)
    expect(full.json.error.code).toBe('QUEUE_FULL')
    expect(full.headers['retry-after']).toBe('1')
    for (const id of ids) expect((await sc.api.job(id, 30)).json.state).toBe('succeeded')
    expect((await submit(4)).status).toBe(202)
    await waitFor(async () => sc.scheduler.stats().unfinished === 0)
  })

  it('prunes finished jobs after the retention time, from memory and journal', async () => {
    await fs.writeFile(path.join(root, 'p'), 'p')
    const { json } = await sc.api.submit({ direction: 'upload', target: 'slow', local: path.join(root, 'p'), remote: '/store/p' })
    expect((await sc.api.job(json.id, 10)).json.state).toBe('succeeded')
    const realClock = sc.scheduler.clock
    sc.scheduler.clock = () => realClock() + 3601 * 1000
    try {
      await sc.scheduler.prune()
    } finally {
      sc.scheduler.clock = realClock
    }
    expect((await sc.api.job(json.id)).status).toBe(404)
    await sc.scheduler.store.compact()
    const journal = await fs.readFile(path.join(sc.stateDir, 'jobs', 'jobs.journal'), 'utf8')
    expect(journal).not.toContain(json.id)
  })

  it('keeps at most queue.keepFinished finished jobs, forgetting the oldest first, also after a restart', async () => {
    const dir = await tempDir('keep-root-')
    const stateDir = await tempDir('keep-state-')
    const store = await tempDir('keep-store-')
    const options = { roots: [dir], stateDir, extra: { queue: { keepFinished: 3 } }, targets: { local: { type: 'file', dir: store } } }
    let keep = await startTestSidecar(options)
    await fs.writeFile(path.join(dir, 'k'), 'k')
    const ids = []
    try {
      for (let i = 0; i < 6; i++) {
        const job = await keep.api.run({ direction: 'upload', target: 'local', local: path.join(dir, 'k'), remote: `/k${i}` })
        expect(job.state).toBe('succeeded')
        ids.push(job.id)
      }
      await keep.scheduler.pruning
      const statuses = async () => Promise.all(ids.map(async (id) => (await keep.api.job(id)).status))
      expect(await statuses()).toEqual([404, 404, 404, 200, 200, 200])
      await keep.stop()
      keep = await startTestSidecar(options)
      expect(await statuses()).toEqual([404, 404, 404, 200, 200, 200])
    } finally {
      await keep.stop()
    }
  })

  it('keeps at most queue.keepFinished finished jobs also when jobs end while a prune is being written', async () => {
    const dir = await tempDir('prune-root-')
    await fs.writeFile(path.join(dir, 'p'), 'p')
    const busy = await startTestSidecar({ roots: [dir], extra: { queue: { keepFinished: 2 } }, targets: { local: { type: 'file', dir: await tempDir('prune-store-'), concurrency: 8 } } })
    try {
      // Each removal takes a while, as on a busy disk: the jobs ending meanwhile join that prune.
      const remove = busy.scheduler.store.remove.bind(busy.scheduler.store)
      busy.scheduler.store.remove = async (id) => {
        await new Promise((resolve) => setTimeout(resolve, 50))
        return remove(id)
      }
      const jobs = await Promise.all(Array.from({ length: 12 }, (_, i) => busy.api.run({ direction: 'upload', target: 'local', local: path.join(dir, 'p'), remote: `/p${i}`, overwrite: true })))
      expect(jobs.map((j) => j.state)).toEqual(Array(12).fill('succeeded'))
      await waitFor(async () => busy.scheduler.pruning === null && busy.scheduler.finished.size <= 2, { timeoutMs: 5000 }).catch(() => {})
      expect(busy.scheduler.finished.size).toBe(2)
      expect((await busy.api.call('GET', '/v1/jobs')).json.jobs).toHaveLength(2)
    } finally {
      await busy.stop({ graceMs: 0 })
    }
  })

  // A cancelled job stays in its queue's array until the queue reaches it; the job submitted again
  // under its id once it was pruned must run, not be dropped in its place.
  it('runs a job submitted again under the id of one cancelled while queued and since pruned', async () => {
    let release
    const held = new Promise((resolve) => { release = resolve })
    const server = http.createServer(async (req, res) => {
      if (req.url === '/held') await held
      res.writeHead(200, { 'content-length': 5 }).end('hello')
    })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const dir = await tempDir('requeue-root-')
    await fs.writeFile(path.join(dir, 'a'), 'a')
    const again = await startTestSidecar({
      roots: [dir],
      extra: { queue: { keepFinished: 1 } },
      targets: { web: { type: 'http', url: `http://127.0.0.1:${server.address().port}/`, concurrency: 1 }, local: { type: 'file', dir: await tempDir('requeue-store-') } }
    })
    try {
      const blocker = await again.api.submit({ direction: 'download', target: 'web', local: path.join(dir, 'held'), remote: '/held' })
      await waitFor(async () => (await again.api.job(blocker.json.id)).json.state === 'running')
      const job = { id: 'requeued-job-0001', direction: 'download', target: 'web', local: path.join(dir, 'k'), remote: '/k' }
      expect((await again.api.submit(job)).status).toBe(202)
      expect((await again.api.call('DELETE', `/v1/jobs/${job.id}`)).json.state).toBe('cancelled')
      for (let i = 0; i < 2; i++) {
        expect((await again.api.run({ direction: 'upload', target: 'local', local: path.join(dir, 'a'), remote: `/a${i}`, overwrite: true })).state).toBe('succeeded')
      }
      await again.scheduler.pruning
      expect((await again.api.job(job.id)).status).toBe(404)
      expect((await again.api.submit(job)).status).toBe(202)
      release()
      expect((await again.api.job(blocker.json.id, 30)).json.state).toBe('succeeded')
      expect((await again.api.job(job.id, 30)).json).toMatchObject({ state: 'succeeded', attempts: 1 })
      expect(again.scheduler.stats()).toMatchObject({ unfinished: 0, waiting: 0, queued: 0 })
    } finally {
      release()
      await again.stop({ graceMs: 0 })
      server.close()
    }
  })

  it('never counts a job both finished and running: waiting is not negative while its final record is saved', async () => {
    const dir = await tempDir('ending-root-')
    const ending = await startTestSidecar({ roots: [dir], targets: { local: { type: 'file', dir: await tempDir('ending-store-') } } })
    try {
      await fs.writeFile(path.join(dir, 'e'), 'e')
      // The final record is saved while the job is still in the scheduler's running map: look at
      // the counts from inside that save, as /healthz or a scrape at that moment would.
      const seen = []
      const gauge = []
      const put = ending.scheduler.store.put.bind(ending.scheduler.store)
      ending.scheduler.store.put = (job, opts) => {
        if (job.state === 'succeeded') {
          seen.push(ending.scheduler.stats())
          gauge.push(ending.metrics.registry.getSingleMetric('sidecar_queue_jobs').get()) // collects now
        }
        return put(job, opts)
      }
      expect((await ending.api.run({ direction: 'upload', target: 'local', local: path.join(dir, 'e'), remote: '/e' })).state).toBe('succeeded')
      expect(seen).toEqual([{ unfinished: 0, running: 0, waiting: 0, queued: 0 }])
      expect((await gauge[0]).values.map((v) => [v.labels.state, v.value])).toEqual([['queued', 0], ['running', 0]])
    } finally {
      await ending.stop()
    }
  })

  it('gives the unix socket the configured group', async () => {
    const gid = Number(execFileSync('getent', ['group', 'www-data'], { encoding: 'utf8' }).split(':')[2])
    expect((await fs.stat(sc.socket)).gid).toBe(gid)
  })
})
