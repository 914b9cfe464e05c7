// Jobs that end outside an attempt are counted like the others (README, Metrics):
// - one found cut by a crash after its last attempt fails INTERRUPTED at start: a job that failed
//   for good, so sidecar_transfer_failures_total{code="INTERRUPTED"} and sidecar_transfers_total
//   count it, as they count every other failed job;
// - one cancelled while it waits to retry had transfer attempts: sidecar_transfers_total counts it
//   cancelled, once. A job cancelled before any attempt moved nothing and is not a transfer.
import { describe, it, expect } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'

describe('metrics of a job failed INTERRUPTED at start', () => {
  it('counts it as a failed transfer with its code', async () => {
    const root = await tempDir()
    const stateDir = await tempDir()
    const local = path.join(root, 'in.txt')
    await fs.writeFile(local, 'payload')
    await fs.mkdir(path.join(stateDir, 'jobs'))
    const now = new Date().toISOString()
    const job = {
      ...{ id: 'crashed-job-9', direction: 'upload', target: 'local', local, remote: '/r.txt', overwrite: false, expectedSha256: null },
      ...{ state: 'running', attempts: 3, bytes: 3, size: 7, sha256: null, rate: null, error: null },
      ...{ createdAt: now, updatedAt: now, startedAt: now, finishedAt: null, nextAttemptAt: null }
    }
    await fs.writeFile(path.join(stateDir, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
    const sc = await startTestSidecar({ stateDir, roots: [root], targets: { local: { type: 'file', dir: await tempDir() } } })
    try {
      expect((await sc.api.job('crashed-job-9')).json).toMatchObject({ state: 'failed', error: { code: 'INTERRUPTED' } })
      const text = await sc.metrics.registry.metrics()
      expect(text).toMatch(/^sidecar_transfer_failures_total\{backend="file",code="INTERRUPTED"\} 1$/m)
      expect(text).toMatch(/^sidecar_transfers_total\{direction="upload",backend="file",via="sidecar",mode="streamed",outcome="failed"\} 1$/m)
      expect(text).toMatch(/^sidecar_jobs_finished_total\{state="failed"\} 1$/m)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})

describe('metrics of a job cancelled while it waits to retry', () => {
  it('counts one cancelled transfer', async () => {
    const root = await tempDir()
    const local = path.join(root, 'in.txt')
    await fs.writeFile(local, 'payload')
    // Nothing listens there: every attempt fails with a connection error, retryable.
    const url = `http://127.0.0.1:${await freePort()}/upload/`
    const sc = await startTestSidecar({
      roots: [root],
      targets: { down: { type: 'http', url, concurrency: 1, retry: { attempts: 5, baseDelayMs: 600000, maxDelayMs: 600000 } } }
    })
    try {
      const first = await sc.api.submit({ direction: 'upload', target: 'down', local, remote: '/a.txt' })
      const waiting = await waitFor(async () => {
        const j = (await sc.api.job(first.json.id)).json
        return j.state === 'queued' && j.attempts === 1 && j.nextAttemptAt ? j : null
      })
      expect(waiting.error.code).toBe('NETWORK_ERROR')
      expect((await sc.api.call('DELETE', `/v1/jobs/${first.json.id}`)).json).toMatchObject({ state: 'cancelled' })
      const text = await sc.metrics.registry.metrics()
      expect(text).toMatch(/^sidecar_transfers_total\{direction="upload",backend="http",via="sidecar",mode="streamed",outcome="cancelled"\} 1$/m)
      expect(text).toMatch(/^sidecar_jobs_finished_total\{state="cancelled"\} 1$/m)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})
