// The scheduler's races (cancel, slots freed, shutdown) with the transfers replaced by promises the
// test settles, so that each moment is reached deterministically; the journal is the real one, and
// what it holds is read back by opening it again, as a restart would.
import { describe, it, expect, vi, beforeAll, beforeEach, afterEach } from 'vitest'
import path from 'node:path'
import { validateConfig } from '../src/index.js'
import { tempDir } from './helpers/sidecar.js'

const ctl = vi.hoisted(() => ({ runs: [], discardGate: null, onRun: null, done: [], clock: null }))

vi.mock('../src/transfer.js', () => {
  function run (job, deps) {
    return new Promise((resolve, reject) => {
      ctl.runs.push({ job, deps, resolve, reject })
      deps.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true })
      ctl.onRun?.(job, deps)
    })
  }
  return {
    upload: run,
    download: run,
    finishPublish: async () => null,
    discardPartial: async () => { await ctl.discardGate }
  }
})

const tick = () => new Promise((resolve) => setImmediate(resolve))
// Until n transfers have started (an accepted job starts START_DELAY_MS after its answer), at most 1 s.
async function started (n) {
  const deadline = Date.now() + 1000
  while (ctl.runs.length < n && Date.now() < deadline) await tick()
  expect(ctl.runs.length).toBe(n)
}
function gate () {
  let open
  const promise = new Promise((resolve) => { open = resolve })
  return { promise, open }
}

let Scheduler, RemoteUnavailableError, openJobStore, scheduler, root, stateDir, store
// test/setup.js has loaded the real modules already: load the scheduler again, with the mock.
beforeAll(async () => {
  vi.resetModules()
  ;({ Scheduler } = await import('../src/scheduler.js'))
  ;({ RemoteUnavailableError } = await import('../src/errors.js')) // the instance the scheduler knows
  ;({ openJobStore } = await import('../src/store.js'))
})

// The job as the journal holds it (store closed first: what a restart would find).
async function journaled (id) {
  await store.close()
  const reopened = await openJobStore({ dir: stateDir })
  try {
    return reopened.loaded().find((j) => j.id === id)
  } finally {
    await reopened.close()
  }
}
beforeEach(async () => {
  ctl.runs = []
  ctl.discardGate = null
  ctl.onRun = null
  root = await tempDir('sched-root-')
  stateDir = await tempDir('sched-state-')
  const config = validateConfig({
    stateDir,
    roots: [root],
    retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 200 },
    logLevel: 'silent',
    targets: { t: { type: 'file', dir: await tempDir('sched-store-'), concurrency: 1 } }
  })
  store = await openJobStore({ dir: stateDir })
  ctl.done = []
  const metrics = { jobAccepted () {}, transferDone (job, backend, outcome, seconds, code, moved) { ctl.done.push({ outcome, seconds, moved }) }, retry () {}, jobFinished () {} }
  const logger = { info () {}, warn () {}, error () {}, debug () {} }
  ctl.clock = null
  scheduler = new Scheduler({ config, store, backends: { t: {} }, metrics, logger, clock: () => ctl.clock ?? Date.now() })
  await scheduler.recover()
  scheduler.start()
})
afterEach(async () => {
  ctl.discardGate = null
  await scheduler.stop(0)
  await store.close()
})

const submit = async (name) => (await scheduler.submit({ direction: 'download', target: 't', local: path.join(root, name), remote: `/${name}` })).job

describe('scheduler races', () => {
  it('a job accepted starts START_DELAY_MS after its answer, and is counted as queued meanwhile', async () => {
    const { START_DELAY_MS } = await import('../src/scheduler.js')
    const t0 = Date.now()
    const a = await submit('a')
    await tick()
    expect(ctl.runs).toHaveLength(0) // not in the turn that answered it
    expect(scheduler.stats()).toMatchObject({ unfinished: 1, running: 0, queued: 1 })
    await started(1)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(START_DELAY_MS - 1) // a timer may fire up to 1 ms early by Date.now()
    expect(ctl.runs[0].job.id).toBe(a.id)
    expect(scheduler.stats()).toMatchObject({ unfinished: 1, running: 1, queued: 0 })
    ctl.runs[0].resolve({ bytes: 0, size: 0, sha256: 'x' })
    await scheduler.waitForEnd(a.id, 1000)
    expect(a.state).toBe('succeeded')
  })

  it('two cancels of one queued job: one cancels it, the other answers JOB_FINISHED; the counts stay right', async () => {
    const a = await submit('a')
    const b = await submit('b')
    await started(1)
    expect([a.state, b.state]).toEqual(['running', 'queued'])
    const slow = gate()
    ctl.discardGate = slow.promise // removing b's (absent) temp file takes a moment
    const both = Promise.allSettled([scheduler.cancel(b.id), scheduler.cancel(b.id)])
    slow.open()
    const outcomes = (await both).map((r) => r.status === 'fulfilled' ? r.value.state : r.reason.code)
    expect(outcomes.sort()).toEqual(['JOB_FINISHED', 'cancelled'])
    expect(scheduler.stats().unfinished).toBe(1) // a still runs
    ctl.runs[0].resolve({ bytes: 0, size: 0, sha256: 'x' })
    await scheduler.waitForEnd(a.id, 1000)
    expect(scheduler.stats().unfinished).toBe(0)
  })

  it('a queued job being cancelled is not started by a slot freed meanwhile', async () => {
    const a = await submit('a')
    const b = await submit('b')
    await started(1)
    const slow = gate()
    ctl.discardGate = slow.promise
    const cancelling = scheduler.cancel(b.id)
    ctl.runs[0].resolve({ bytes: 0, size: 0, sha256: 'x' }) // a ends: its slot is free
    await scheduler.waitForEnd(a.id, 1000)
    await tick()
    slow.open()
    expect((await cancelling).state).toBe('cancelled')
    await tick()
    expect(ctl.runs.map((r) => r.job.id)).toEqual([a.id]) // b never started
    expect(b).toMatchObject({ state: 'cancelled', attempts: 0 })
    expect(scheduler.stats().unfinished).toBe(0)
  })

  it('jobs cancelled while queued leave the queue at once: its count, and the order of the rest', async () => {
    const a = await submit('a')
    await started(1) // a holds the target's only slot
    const first = await submit('first')
    for (let i = 0; i < 3000; i++) {
      const job = await submit(`c${i}`)
      await tick() // in the queue
      await scheduler.cancel(job.id)
    }
    const last = await submit('last')
    await tick()
    expect(scheduler.stats()).toMatchObject({ unfinished: 3, running: 1, queued: 2 })
    ctl.runs[0].resolve({ bytes: 0, size: 0, sha256: 'x' })
    await scheduler.waitForEnd(a.id, 1000)
    await started(2)
    expect(ctl.runs[1].job.id).toBe(first.id)
    ctl.runs[1].resolve({ bytes: 0, size: 0, sha256: 'x' })
    await scheduler.waitForEnd(first.id, 1000)
    await started(3)
    expect(ctl.runs[2].job.id).toBe(last.id)
    ctl.runs[2].resolve({ bytes: 0, size: 0, sha256: 'x' })
    await scheduler.waitForEnd(last.id, 1000)
    expect(scheduler.stats()).toMatchObject({ unfinished: 0, queued: 0 })
    expect(a.state).toBe('succeeded')
  })

  it('a cancel while the job\'s first record is being written waits for it: counts stay right, written or not', async () => {
    const a = await submit('a')
    await started(1) // a holds the target's only slot
    const put = store.put
    const gates = []
    store.put = function (record, opts) {
      if (record.id.startsWith('gated') && record.state === 'queued' && record.attempts === 0) {
        return new Promise((resolve, reject) => gates.push({ resolve: () => put.call(this, record, opts).then(resolve, reject), reject }))
      }
      return put.call(this, record, opts)
    }
    try {
      // Written: the cancel takes the job once it is accepted, and it is never queued.
      const spec = (id) => ({ id, direction: 'download', target: 't', local: path.join(root, id), remote: `/${id}` })
      const accepted = scheduler.submit(spec('gated-ok-1'))
      while (gates.length < 1) await tick()
      const cancelled = scheduler.cancel('gated-ok-1')
      gates[0].resolve()
      expect((await accepted).created).toBe(true)
      expect((await cancelled).state).toBe('cancelled')
      await tick()
      expect(scheduler.stats()).toMatchObject({ unfinished: 1, running: 1, waiting: 0, queued: 0 }) // before: queued 1
      // Not written: never accepted, so there is nothing to cancel, and nothing is counted twice.
      const refused = scheduler.submit(spec('gated-no-1'))
      while (gates.length < 2) await tick()
      const notFound = scheduler.cancel('gated-no-1')
      gates[1].reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }))
      await expect(refused).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' })
      await expect(notFound).rejects.toMatchObject({ code: 'JOB_NOT_FOUND' })
      expect(scheduler.stats()).toMatchObject({ unfinished: 1, waiting: 0, queued: 0 }) // before: unfinished 0, then −1
      await scheduler.prune() // before: a TypeError for the id left in the finished set
    } finally {
      store.put = put
    }
    ctl.runs[0].resolve({ bytes: 0, size: 0, sha256: 'x' })
    await scheduler.waitForEnd(a.id, 1000)
  })

  it('at the queue limit, a submission waits for a first record still being written: one that fails gives its place back', async () => {
    const config = validateConfig({ stateDir, roots: [root], logLevel: 'silent', queue: { limit: 2 }, targets: { t: { type: 'file', dir: await tempDir('sched-store-'), concurrency: 1 } } })
    const logger = { info () {}, warn () {}, error () {}, debug () {} }
    const metrics = { jobAccepted () {}, transferDone () {}, retry () {}, jobFinished () {} }
    const limited = new Scheduler({ config, store, backends: { t: {} }, metrics, logger })
    await limited.recover()
    const spec = (id) => ({ id, direction: 'download', target: 't', local: path.join(root, id), remote: `/${id}` })
    await limited.submit(spec('first-0001')) // not started: unfinished 1 of 2
    const put = store.put
    const gates = []
    store.put = function (record, opts) {
      if (record.id.startsWith('gated') && record.state === 'queued') return new Promise((resolve, reject) => gates.push({ resolve: () => put.call(this, record, opts).then(resolve, reject), reject }))
      return put.call(this, record, opts)
    }
    try {
      // Its write fails: the submission after it, made while it was pending, is taken (it was QUEUE_FULL).
      let recorded = false
      const failing = limited.submit(spec('gated-fail-1'), () => { recorded = true })
      while (!gates.length) await tick()
      expect(recorded).toBe(true)
      const next = limited.submit(spec('next-0001'))
      for (let i = 0; i < 5; i++) await tick()
      gates[0].reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }))
      await expect(failing).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' })
      expect((await next).created).toBe(true)
      // Its write succeeds: the one after it is refused once it is on disk.
      await limited.cancel('next-0001')
      const succeeding = limited.submit(spec('gated-ok-01'))
      while (gates.length < 2) await tick()
      const refused = limited.submit(spec('refused-001'))
      for (let i = 0; i < 5; i++) await tick()
      gates[1].resolve()
      expect((await succeeding).created).toBe(true)
      await expect(refused).rejects.toMatchObject({ code: 'QUEUE_FULL' })
    } finally {
      store.put = put
    }
  })

  it('a retryable failure during the shutdown grace leaves the job queued for the next start, not failed', async () => {
    const a = await submit('a')
    await started(1)
    expect(a.state).toBe('running')
    const stopping = scheduler.stop(10000)
    ctl.runs[0].reject(new RemoteUnavailableError('503 from the server')) // within the grace
    await stopping
    expect(a.state).toBe('queued')
    expect(await journaled(a.id)).toMatchObject({ state: 'queued', attempts: 1, finishedAt: null })
    expect(scheduler.stats().unfinished).toBe(1)
  })

  it('a job aborted by shutdown while publishing keeps the verified size that finishPublish needs', async () => {
    ctl.onRun = (job, deps) => deps.onVerified({ bytes: 7, sha256: 'f'.repeat(64) })
    const a = await submit('a')
    await started(1)
    expect(a).toMatchObject({ state: 'running', phase: 'publishing', bytes: 7 })
    await scheduler.stop(0) // the publish is cut (or fails) after the grace
    expect(await journaled(a.id)).toMatchObject({ state: 'queued', phase: 'publishing', bytes: 7, sha256: 'f'.repeat(64) })
  })

  it('a cancel while the shutdown aborts the running job cancels it, rather than leaving it queued', async () => {
    const a = await submit('a')
    await started(1)
    const { signal } = ctl.runs[0].deps
    const stopping = scheduler.stop(0)
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
    const answer = await scheduler.cancel(a.id) // the job is saving its "queued" meanwhile
    await stopping
    expect(answer.state).toBe('cancelled')
    expect(await journaled(a.id)).toMatchObject({ state: 'cancelled', error: { code: 'CANCELLED' } })
    expect(scheduler.stats().unfinished).toBe(0)
  })

  it('a resumed download reports the rate and metrics of what its last attempt moved', async () => {
    ctl.clock = Date.parse('2026-11-22T10:00:00Z')
    const a = await submit('a')
    await started(1)
    const { deps, resolve } = ctl.runs[0]
    await deps.onStart({ size: 1000, version: 'v1', resumedFrom: 600 })
    deps.onProgress(800)
    ctl.clock += 1000
    expect(scheduler.view(a).rate).toBe(200) // 200 bytes in 1 s, not 800
    deps.onProgress(1000)
    ctl.clock += 1000
    resolve({ bytes: 1000, size: 1000, sha256: 'f'.repeat(64) })
    for (let i = 0; i < 100 && a.state !== 'succeeded'; i++) await tick()
    expect(a).toMatchObject({ state: 'succeeded', rate: 200 })
    expect(ctl.done).toEqual([{ outcome: 'succeeded', seconds: 2, moved: 400 }])
  })
})

describe('scheduler recovery', () => {
  it('prunes the oldest finished job first after a restart that fails an interrupted one', async () => {
    const now = Date.now()
    const iso = (ms) => new Date(ms).toISOString()
    const job = (over) => ({ direction: 'download', target: 't', local: path.join(root, over.id), remote: `/${over.id}`, overwrite: false, bytes: 0, error: null, nextAttemptAt: null, updatedAt: iso(now), ...over })
    await store.put(job({ id: 'old-done-01', state: 'succeeded', attempts: 1, createdAt: iso(now - 7200e3), startedAt: iso(now - 7200e3), finishedAt: iso(now - 3600e3) }))
    await store.put(job({ id: 'crashed-001', state: 'running', attempts: 3, createdAt: iso(now - 1000), startedAt: iso(now - 1000), finishedAt: null }))
    await scheduler.stop(0)
    await store.close()
    store = await openJobStore({ dir: stateDir })
    const config = validateConfig({ stateDir, roots: [root], logLevel: 'silent', queue: { keepFinished: 1 }, retry: { attempts: 3 }, targets: { t: { type: 'file', dir: await tempDir('sched-store-'), concurrency: 1 } } })
    const noop = () => {}
    scheduler = new Scheduler({ config, store, backends: { t: {} }, metrics: { jobAccepted: noop, transferDone: noop, retry: noop, jobFinished: noop }, logger: { info: noop, warn: noop, error: noop, debug: noop } })
    await scheduler.recover()
    expect(scheduler.jobs.has('old-done-01')).toBe(false) // before: the new INTERRUPTED one was pruned, the hour-old one kept
    expect(scheduler.jobs.get('crashed-001')).toMatchObject({ state: 'failed', error: { code: 'INTERRUPTED', message: expect.stringContaining('last attempt (3 of 3)') } })
  })
})
