// Completion callbacks with a `file` target only (no remote server), against one receiver:
// a delivery a stop cuts stays pending for the next start; a job failed at recovery gets its
// callback; callbacks.allow is the rule at every delivery, not only at submission.
import { describe, it, expect, beforeAll, beforeEach, afterAll } from 'vitest'
import http from 'node:http'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { openJobStore } from '../src/store.js'

let hooks, hookUrl
const received = [] // { url, body } of every POST answered
const held = [] // answers to /hooks/hold not given while `holding`
let holding = true

beforeAll(async () => {
  hooks = http.createServer((req, res) => {
    let body = ''
    req.on('data', (d) => { body += d })
    req.on('end', () => {
      if (req.url === '/hooks/hold' && holding) return held.push(res)
      received.push({ url: req.url, body: JSON.parse(body) })
      res.end('ok')
    })
  })
  await new Promise((resolve) => hooks.listen(0, '127.0.0.1', resolve))
  hookUrl = `http://127.0.0.1:${hooks.address().port}`
})
beforeEach(() => { received.length = 0 })
afterAll(async () => {
  for (const res of held) res.destroy()
  hooks.closeAllConnections()
  await new Promise((resolve) => hooks.close(resolve))
})

const start = ({ stateDir, root, allow = [`${hookUrl}/hooks/`] }) => startTestSidecar({
  stateDir,
  roots: [root],
  targets: { local: { type: 'file', dir: path.join(stateDir, 'store') } },
  extra: { callbacks: { allow, attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } }
})

// A state dir whose journal holds `job` (the fields a record has, `over` on top), as a start finds it.
async function seeded (over) {
  const stateDir = await tempDir('cb-state-')
  await fs.mkdir(path.join(stateDir, 'jobs'))
  const now = new Date().toISOString()
  const job = {
    ...{ direction: 'upload', target: 'local', remote: '/a.txt', overwrite: false, expectedSha256: null, callbackState: null },
    ...{ attempts: 0, bytes: 0, size: null, sha256: null, rate: null, error: null },
    ...{ createdAt: now, updatedAt: now, startedAt: null, finishedAt: null, nextAttemptAt: null },
    ...over
  }
  await fs.writeFile(path.join(stateDir, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
  return stateDir
}

// A daemon started on a journal that holds the job `over` (its local file a.txt in a new root),
// `check`ed, then stopped.
async function recovered (over, check) {
  const root = await tempDir('cb-root-')
  await fs.writeFile(path.join(root, 'a.txt'), 'a\n')
  const sc = await start({ stateDir: await seeded({ local: path.join(root, 'a.txt'), ...over }), root })
  try {
    await check(sc)
  } finally {
    await sc.stop({ graceMs: 0 })
  }
}

async function journaled (stateDir, id) {
  const store = await openJobStore({ dir: path.join(stateDir, 'jobs') })
  try {
    return store.loaded().find((j) => j.id === id)
  } finally {
    await store.close()
  }
}

describe('callbacks across a stop', () => {
  it('a delivery in flight when the daemon stops stays pending, is not given up, and is resumed by the next start', async () => {
    const root = await tempDir('cb-root-')
    const stateDir = await tempDir('cb-state-')
    let sc = await start({ stateDir, root })
    await fs.writeFile(path.join(root, 'a.txt'), 'a')
    const { json } = await sc.api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/a.txt', callback: `${hookUrl}/hooks/hold` })
    await waitFor(() => held.length === 1) // the delivery is in flight
    await sc.stop({ graceMs: 0 })
    expect(sc.logs.records().filter((r) => r.msg === 'callback failed, giving up')).toEqual([])
    expect(await sc.metrics.registry.getSingleMetricAsString('sidecar_callbacks_total')).toMatch(/outcome="failed"\} 0$/m)
    expect(await journaled(stateDir, json.id)).toMatchObject({ state: 'succeeded', callbackState: 'pending' })

    // The next start delivers it (the receiver now answers).
    holding = false
    held.splice(0).forEach((res) => res.destroy())
    sc = await start({ stateDir, root })
    try {
      await waitFor(async () => (await sc.api.job(json.id)).json.callbackState === 'delivered')
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

describe('callbacks of jobs failed at recovery', () => {
  it('a queued job of a removed target fails UNKNOWN_TARGET, and its callback is delivered', async () => {
    const root = await tempDir('cb-root-')
    const stateDir = await seeded({ id: 'gone-target-1', target: 'old', local: path.join(root, 'a.txt'), callback: `${hookUrl}/hooks/done`, state: 'queued' })
    const sc = await start({ stateDir, root })
    try {
      expect((await sc.api.job('gone-target-1')).json).toMatchObject({ state: 'failed', error: { code: 'UNKNOWN_TARGET' } })
      await waitFor(async () => (await sc.api.job('gone-target-1')).json.callbackState === 'delivered', { timeoutMs: 5000 })
      expect(received.map((r) => r.body)).toEqual([expect.objectContaining({ id: 'gone-target-1', state: 'failed', error: expect.objectContaining({ code: 'UNKNOWN_TARGET' }) })])
      expect(await sc.metrics.registry.getSingleMetricAsString('sidecar_jobs_finished_total')).toMatch(/state="failed"\} 1$/m)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

describe('a download of a removed target', () => {
  it('fails UNKNOWN_TARGET at recovery, and the temp file it kept for a resume is removed', async () => {
    const root = await tempDir('cb-root-')
    const id = 'gone-download-1'
    const temp = path.join(root, `.a.bin.${id}.part`)
    await fs.writeFile(temp, 'the first bytes')
    await fs.writeFile(path.join(root, 'other.part'), 'not ours')
    const stateDir = await seeded({ id, direction: 'download', target: 'old', local: path.join(root, 'a.bin'), state: 'running', attempts: 1, bytes: 15 })
    const sc = await start({ stateDir, root })
    try {
      expect((await sc.api.job(id)).json).toMatchObject({ state: 'failed', error: { code: 'UNKNOWN_TARGET' } })
      expect((await fs.readdir(root)).sort()).toEqual(['other.part'])
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

// The journal is ours, but a hand edit or a bug of an older version may leave a record without
// createdAt or finishedAt: sorting them threw, and the daemon could not start until the journal
// was edited by hand.
describe('records with odd fields at recovery', () => {
  it('a record without createdAt, and finished ones without finishedAt, do not stop the start', async () => {
    const root = await tempDir('cb-root-')
    const stateDir = await seeded({ id: 'odd-queued-1', local: path.join(root, 'a.txt'), state: 'queued', createdAt: undefined })
    const now = new Date().toISOString()
    const finished = (id, finishedAt) => JSON.stringify({ op: 'put', job: { id, direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: `/${id}`, state: 'succeeded', attempts: 1, createdAt: now, finishedAt } })
    await fs.appendFile(path.join(stateDir, 'jobs', 'jobs.journal'), `${finished('odd-done-1', null)}\n${finished('odd-done-2', now)}\n${finished('odd-done-3', 7)}\n`)
    const sc = await start({ stateDir, root })
    try {
      // (A finished job whose end is unknown may be pruned at once, as one past its retention.)
      for (const id of ['odd-queued-1', 'odd-done-2']) expect((await sc.api.job(id)).status, id).toBe(200)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

describe('a retry due further away than node\'s longest timer', () => {
  it('waits for its time (node fires a longer timer after 1 ms)', async () => {
    await recovered({ id: 'far-retry-1', state: 'queued', attempts: 1, nextAttemptAt: '2999-01-01T00:00:00.000Z' }, async (sc) => {
      await new Promise((resolve) => setTimeout(resolve, 500))
      expect((await sc.api.job('far-retry-1')).json).toMatchObject({ state: 'queued', attempts: 1 })
    })
  })
})

describe('a job in a state this version does not know', () => {
  it('runs (it was accepted), rather than stay unfinished for ever', async () => {
    await recovered({ id: 'odd-state-1', state: 'paused' }, async (sc) => {
      await waitFor(async () => (await sc.api.job('odd-state-1')).json.state === 'succeeded', { timeoutMs: 10000 })
    })
  })
})

describe('callbacks.allow after a restart', () => {
  it.each([
    ['the prefix was removed', (url) => [`${url}/hooks/`], '/old/done'],
    ['callbacks were turned off', () => [], '/old/done'],
    ['its path holds an encoded slash (journaled before that was refused)', (url) => [`${url}/hooks/`], '/hooks/..%2fadmin']
  ])('a pending callback is not delivered when %s', async (label, allow, where) => {
    const root = await tempDir('cb-root-')
    const now = new Date().toISOString()
    const stateDir = await seeded({
      ...{ id: 'pending-cb-1', local: path.join(root, 'a.txt'), callback: `${hookUrl}${where}`, callbackState: 'pending' },
      ...{ state: 'succeeded', attempts: 1, bytes: 1, size: 1, rate: 1, startedAt: now, finishedAt: now }
    })
    const sc = await start({ stateDir, root, allow: allow(hookUrl) })
    try {
      await waitFor(async () => (await sc.api.job('pending-cb-1')).json.callbackState !== 'pending', { timeoutMs: 5000 })
      expect((await sc.api.job('pending-cb-1')).json.callbackState).toBe('failed')
      expect(received).toEqual([])
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

describe('callbacks.allow at submission', () => {
  it.each(['/hooks/..%2fadmin', '/hooks/..%2Fadmin/x', '/hooks/..%5cadmin', '/hooks/a%2f..%2f..%2fadmin'])('refuses %s (an encoded slash a receiver may decode)', async (p) => {
    const root = await tempDir('cb-root-')
    const sc = await start({ stateDir: await tempDir('cb-state-'), root })
    try {
      await fs.writeFile(path.join(root, 'a.txt'), 'a')
      const res = await sc.api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/a.txt', callback: `${hookUrl}${p}` })
      expect({ status: res.status, code: res.json.error?.code }).toEqual({ status: 400, code: 'CALLBACK_NOT_ALLOWED' })
      const ok = await sc.api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/b.txt', callback: `${hookUrl}/hooks/done%20ok` })
      expect(ok.status).toBe(202)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

// Many jobs ending together, a receiver that answers each callback in 300 ms: the deliveries beyond
// the sender's 8 sockets waited in its client's queue, and that wait counted against
// callbacks.timeoutMs, so callbacks answered in time were given up (failed) and sent again.
describe('many callbacks at once to a slow receiver', () => {
  it('are each delivered once, none failed for the time it waited for its turn', async () => {
    const posts = new Map()
    const slow = http.createServer((req, res) => {
      const id = req.headers['x-sidecar-job']
      posts.set(id, (posts.get(id) ?? 0) + 1)
      req.resume()
      req.on('end', () => setTimeout(() => res.end('ok'), 300))
    })
    await new Promise((resolve) => slow.listen(0, '127.0.0.1', resolve))
    const slowUrl = `http://127.0.0.1:${slow.address().port}/hooks/`
    const root = await tempDir('cb-many-root-')
    await fs.writeFile(path.join(root, 'a.txt'), 'a')
    const sc = await startTestSidecar({
      roots: [root],
      targets: { local: { type: 'file', dir: await tempDir('cb-many-store-'), concurrency: 32 } },
      extra: { callbacks: { allow: [slowUrl], attempts: 2, baseDelayMs: 20, maxDelayMs: 50, timeoutMs: 1000 } }
    })
    try {
      const ids = await Promise.all(Array.from({ length: 48 }, async (_, i) => (await sc.api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: `/many/${i}`, callback: slowUrl })).json.id))
      await waitFor(async () => (await Promise.all(ids.map(async (id) => (await sc.api.job(id)).json.callbackState))).every((s) => s === 'delivered' || s === 'failed'), { timeoutMs: 60000 })
      const states = await Promise.all(ids.map(async (id) => (await sc.api.job(id)).json.callbackState))
      expect(states.filter((s) => s !== 'delivered')).toEqual([])
      expect([...posts.values()].every((n) => n === 1)).toBe(true)
    } finally {
      await sc.stop({ graceMs: 0 })
      slow.closeAllConnections()
      slow.close()
    }
  })
})
