// Requests that race on one job or one name: what each caller is told must be what happened.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import crypto from 'node:crypto'
import { Digest } from '../src/digest.js'
import { startHttpd } from './harness/httpd.js'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'

let httpd, sc, root, store
beforeAll(async () => {
  httpd = await startHttpd()
  root = await tempDir('races-root-')
  store = await tempDir('races-store-')
  sc = await startTestSidecar({
    roots: [root],
    targets: {
      direct: { type: 'http', url: httpd.uploadUrl, atomicPut: true },
      moved: { type: 'http', url: httpd.uploadUrl },
      local: { type: 'file', dir: store }
    },
    extra: { journal: { sync: 'fsync' } }
  })
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await httpd?.stop()
})

// mod_dav checks a PUT's If-None-Match and a MOVE's Overwrite: F before it renames its file into
// place: two uploads side by side both passed, both succeeded, and the second replaced the first.
describe('two uploads to one name without overwrite, at once', () => {
  it.each(['direct', 'moved', 'local'])('on %s: exactly one succeeds, the other is REMOTE_EXISTS, and the file is the winner\'s', async (target) => {
    const sources = []
    for (const n of [1, 2]) {
      const file = path.join(root, `${target}-${n}.bin`)
      await fs.writeFile(file, crypto.randomBytes(512 * 1024))
      sources.push(file)
    }
    for (let round = 0; round < 8; round++) {
      const remote = `/same-${target}/${round}.bin`
      const jobs = await Promise.all(sources.map((local) => sc.api.run({ direction: 'upload', target, local, remote, overwrite: false })))
      const states = jobs.map((j) => j.state === 'succeeded' ? 'succeeded' : j.error?.code).sort()
      expect(states, `round ${round}`).toEqual(['REMOTE_EXISTS', 'succeeded'])
      const winner = jobs.find((j) => j.state === 'succeeded')
      const stored = await fs.readFile(path.join(target === 'local' ? store : httpd.davDir, remote))
      expect(crypto.createHash('sha256').update(stored).digest('hex')).toBe(winner.sha256)
    }
  })
})

// A cancel that comes once the bytes are sent but before the job is publishing (its digest being
// finished, here held 300 ms as under a busy hashing thread) was taken and then ignored: the job
// published its file and ended succeeded, and DELETE answered 200 with it.
describe('a cancel while the digest is finished', () => {
  it('ends the job cancelled, with nothing published', async () => {
    const local = path.join(root, 'cancel.bin')
    await fs.writeFile(local, crypto.randomBytes(16 * 1024 * 1024)) // hashed by the hashing thread
    let digesting = false
    const digest = Digest.prototype.digest
    Digest.prototype.digest = async function () {
      digesting = true
      await new Promise((resolve) => setTimeout(resolve, 300))
      return digest.call(this)
    }
    try {
      for (let round = 0; round < 3; round++) {
        digesting = false
        const { json } = await sc.api.submit({ direction: 'upload', target: 'local', local, remote: `/cancelled/${round}.bin` })
        await waitFor(() => digesting, { intervalMs: 2 })
        const cancel = await sc.api.call('DELETE', `/v1/jobs/${json.id}`)
        expect(cancel).toMatchObject({ status: 200, json: { state: 'cancelled' } })
        expect((await sc.api.job(json.id, 30)).json.state).toBe('cancelled')
        await expect(fs.access(path.join(store, 'cancelled', `${round}.bin`))).rejects.toThrow(/ENOENT/)
      }
    } finally {
      Digest.prototype.digest = digest
    }
  })
})

// A job exists once its first record is written: while that write is under way the id is not a
// job yet, and one whose write fails never was (a different request with that id then got
// JOB_CONFLICT against nothing, and a spooled copy was rejected for good).
describe('the same id while its first record is written, and that write fails', () => {
  it('is not found meanwhile, and a different request with that id is then a job of its own', async () => {
    await fs.writeFile(path.join(root, 'a'), 'a')
    await fs.writeFile(path.join(root, 'b'), 'b')
    const id = 'race-write-0001'
    const a = { id, direction: 'upload', target: 'local', local: path.join(root, 'a'), remote: '/race/a' }
    const b = { ...a, local: path.join(root, 'b') }
    const put = sc.scheduler.store.put
    let fail = true
    sc.scheduler.store.put = function (job, opts) {
      if (fail && job.id === id) {
        fail = false
        const written = put.call(this, job, opts)
        return new Promise((resolve, reject) => setTimeout(() => written.finally(() => reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }))), 200))
      }
      return put.call(this, job, opts)
    }
    try {
      const first = sc.api.submit(a)
      await new Promise((resolve) => setTimeout(resolve, 50))
      const [other, during, listed] = await Promise.all([sc.api.submit(b), sc.api.job(id), sc.api.call('GET', '/v1/jobs')])
      expect(listed.json.jobs.map((j) => j.id)).not.toContain(id)
      expect((await first).status).toBe(503)
      expect(during).toMatchObject({ status: 404, json: { error: { code: 'JOB_NOT_FOUND' } } })
      expect(other.status).toBe(202)
      expect((await sc.api.job(id, 30)).json).toMatchObject({ state: 'succeeded', local: path.join(root, 'b') })
    } finally {
      sc.scheduler.store.put = put
    }
  })
})
