// Completion callbacks across a stop of the daemon, with a `file` target only (no remote server):
// a delivery the stop cuts is still pending on disk, to be resumed after the restart.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import http from 'node:http'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { openJobStore } from '../src/store.js'

let hooks, hookUrl
const held = [] // requests the receiver has not answered
let holding = true
const received = []

beforeAll(async () => {
  hooks = http.createServer((req, res) => {
    req.resume()
    received.push(req.headers['x-sidecar-job'])
    if (req.url === '/hooks/hold' && holding) held.push(res)
    else res.end('ok')
  })
  await new Promise((resolve) => hooks.listen(0, '127.0.0.1', resolve))
  hookUrl = `http://127.0.0.1:${hooks.address().port}`
})
afterAll(async () => {
  for (const res of held) res.destroy()
  hooks.closeAllConnections()
  await new Promise((resolve) => hooks.close(resolve))
})

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
    const store = await tempDir('cb-store-')
    const stateDir = await tempDir('cb-state-')
    const start = () => startTestSidecar({
      stateDir,
      roots: [root],
      targets: { local: { type: 'file', dir: store } },
      extra: { callbacks: { allow: [`${hookUrl}/hooks/`], attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } }
    })
    let sc = await start()
    await fs.writeFile(path.join(root, 'a.txt'), 'a')
    const { json } = await sc.api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/a.txt', callback: `${hookUrl}/hooks/hold` })
    await waitFor(() => held.length === 1) // the delivery is in flight
    await sc.stop({ graceMs: 0 })
    expect(sc.logs.records().filter((r) => r.msg === 'callback failed, giving up')).toEqual([])
    expect(await sc.metrics.registry.getSingleMetricAsString('sidecar_callbacks_total')).toMatch(/outcome="failed"\} 0$/m)
    const job = await journaled(stateDir, json.id)
    expect(job).toMatchObject({ state: 'succeeded', callbackState: 'pending' })

    // The next start delivers it (the receiver now answers).
    holding = false
    held.splice(0).forEach((res) => res.destroy())
    sc = await start()
    try {
      await waitFor(async () => (await sc.api.job(json.id)).json.callbackState === 'delivered')
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})
