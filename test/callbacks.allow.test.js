// callbacks.allow is the rule for every delivery, not only for the submission: a callback journaled
// under a prefix the configuration no longer lists (removed, or callbacks turned off with []) is
// not POSTed after a restart.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import http from 'node:http'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'

let hooks, hookUrl
const received = []

beforeAll(async () => {
  hooks = http.createServer((req, res) => { received.push(req.url); req.resume(); res.end('ok') })
  await new Promise((resolve) => hooks.listen(0, '127.0.0.1', resolve))
  hookUrl = `http://127.0.0.1:${hooks.address().port}`
})
afterAll(async () => {
  hooks.closeAllConnections()
  await new Promise((resolve) => hooks.close(resolve))
})

describe('callbacks.allow after a restart', () => {
  it.each([
    ['the prefix was removed', (url) => [`${url}/hooks/`]],
    ['callbacks were turned off', () => []]
  ])('a pending callback is not delivered when %s', async (label, allow) => {
    const root = await tempDir('cba-root-')
    const stateDir = await tempDir('cba-state-')
    await fs.mkdir(path.join(stateDir, 'jobs'))
    const now = new Date().toISOString()
    const job = {
      ...{ id: 'pending-cb-1', direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/a.txt', overwrite: false, expectedSha256: null },
      ...{ callback: `${hookUrl}/old/done`, callbackState: 'pending', state: 'succeeded', attempts: 1, bytes: 1, size: 1, sha256: null, rate: 1, error: null },
      ...{ createdAt: now, updatedAt: now, startedAt: now, finishedAt: now, nextAttemptAt: null }
    }
    await fs.writeFile(path.join(stateDir, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
    received.length = 0
    const sc = await startTestSidecar({
      stateDir,
      roots: [root],
      targets: { local: { type: 'file', dir: await tempDir('cba-store-') } },
      extra: { callbacks: { allow: allow(hookUrl), attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } }
    })
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
    const root = await tempDir('cba-root-')
    const sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: await tempDir('cba-store-') } }, extra: { callbacks: { allow: [`${hookUrl}/hooks/`] } } })
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
