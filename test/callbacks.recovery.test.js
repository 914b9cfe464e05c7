// A job found unfinished at start whose target is no longer configured fails UNKNOWN_TARGET: it has
// ended like any other job, so its completion callback is sent and it counts as finished.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import http from 'node:http'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'

let hooks, hookUrl
const received = []

beforeAll(async () => {
  hooks = http.createServer((req, res) => {
    let body = ''
    req.on('data', (d) => { body += d })
    req.on('end', () => { received.push(JSON.parse(body)); res.end('ok') })
  })
  await new Promise((resolve) => hooks.listen(0, '127.0.0.1', resolve))
  hookUrl = `http://127.0.0.1:${hooks.address().port}`
})
afterAll(async () => {
  hooks.closeAllConnections()
  await new Promise((resolve) => hooks.close(resolve))
})

describe('callbacks of jobs failed at recovery', () => {
  it('a queued job of a removed target fails UNKNOWN_TARGET, and its callback is delivered', async () => {
    const root = await tempDir('cbr-root-')
    const stateDir = await tempDir('cbr-state-')
    await fs.mkdir(path.join(stateDir, 'jobs'))
    const now = new Date().toISOString()
    const job = {
      ...{ id: 'gone-target-1', direction: 'upload', target: 'old', local: path.join(root, 'a.txt'), remote: '/a.txt', overwrite: false, expectedSha256: null },
      ...{ callback: `${hookUrl}/hooks/done`, callbackState: null, state: 'queued', attempts: 0, bytes: 0, size: null, sha256: null, rate: null, error: null },
      ...{ createdAt: now, updatedAt: now, startedAt: null, finishedAt: null, nextAttemptAt: null }
    }
    await fs.writeFile(path.join(stateDir, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
    const sc = await startTestSidecar({
      stateDir,
      roots: [root],
      targets: { local: { type: 'file', dir: await tempDir('cbr-store-') } },
      extra: { callbacks: { allow: [`${hookUrl}/hooks/`], attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } }
    })
    try {
      expect((await sc.api.job('gone-target-1')).json).toMatchObject({ state: 'failed', error: { code: 'UNKNOWN_TARGET' } })
      await waitFor(async () => (await sc.api.job('gone-target-1')).json.callbackState === 'delivered', { timeoutMs: 5000 })
      expect(received).toEqual([expect.objectContaining({ id: 'gone-target-1', state: 'failed', error: expect.objectContaining({ code: 'UNKNOWN_TARGET' }) })])
      expect(await sc.metrics.registry.getSingleMetricAsString('sidecar_jobs_finished_total')).toMatch(/state="failed"\} 1$/m)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})
