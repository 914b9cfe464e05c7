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
