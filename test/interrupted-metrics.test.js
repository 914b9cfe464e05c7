// A job found cut by a crash after its last attempt fails INTERRUPTED at start: a job that failed for
// good, so sidecar_transfer_failures_total{code="INTERRUPTED"} and sidecar_transfers_total count it
// (README, Metrics), as they count every other failed job.
import { describe, it, expect } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

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
