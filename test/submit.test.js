// POST /v1/jobs (submit.js, served before express) takes what the express routes take.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { rawRequest } from './helpers/raw-http.js'

let sc, root

beforeAll(async () => {
  root = await tempDir('submit-root-')
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: await tempDir('submit-store-') } } })
  await fs.writeFile(path.join(root, 'up.txt'), 'up')
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

const raw = (text) => rawRequest(new URL(sc.url).port, text)

describe('POST /v1/jobs', () => {
  // RFC 9112 3.2.2: a server MUST accept the absolute form (what a client sends through a proxy);
  // GET /v1/jobs in that form is already served (express routes by the URL's path).
  it('accepts the absolute form of the request target, like the other routes', async () => {
    const body = JSON.stringify({ direction: 'upload', target: 'local', local: path.join(root, 'up.txt'), remote: '/abs.txt' })
    const res = await raw(`POST ${sc.url}/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)
    expect(res.status).toBe(202)
    expect(JSON.parse(res.body).state).toBe('queued')
    expect((await raw(`GET ${sc.url}/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`)).status).toBe(200)
  })
})

describe('a journal write that fails', () => {
  it('answers 503 STORE_UNAVAILABLE to the submission and to a resubmission of its id that waited on it', async () => {
    const store = sc.scheduler.store
    const put = store.put
    const id = 'store-fails-0001'
    store.put = (record, opts) => record.id === id
      ? new Promise((resolve, reject) => setTimeout(() => reject(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })), 200))
      : put.call(store, record, opts)
    try {
      const body = { id, direction: 'upload', target: 'local', local: path.join(root, 'up.txt'), remote: '/store-fails.txt' }
      const [first, second] = await Promise.all([
        sc.api.submit(body),
        new Promise((resolve) => setTimeout(resolve, 50)).then(() => sc.api.submit(body))
      ])
      for (const answer of [first, second]) {
        expect(answer.status).toBe(503)
        expect(answer.json.error.code).toBe('STORE_UNAVAILABLE')
      }
      expect((await sc.api.job(id)).status).toBe(404)
    } finally {
      store.put = put
    }
    // Not taken, so not known: the same id is accepted once the disk is back.
    const again = await sc.api.submit({ id, direction: 'upload', target: 'local', local: path.join(root, 'up.txt'), remote: '/store-fails.txt' })
    expect(again.status).toBe(202)
  })
})
