// Routing of the control API without any remote server: a `file` target only.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

let sc, root, store

beforeAll(async () => {
  root = await tempDir('routes-root-')
  store = await tempDir('routes-store-')
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: store } } })
  await fs.writeFile(path.join(store, 'f.txt'), 'content')
  await fs.writeFile(path.join(root, 'up.txt'), 'up')
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

describe('routes', () => {
  // README, Error codes: 405 METHOD_NOT_ALLOWED is a wrong method for a route, 404 NOT_FOUND no such route.
  it.each([
    ['DELETE', '/v1/stream/local/f.txt', 'GET, HEAD'],
    ['PUT', '/v1/stream/local/f.txt', 'GET, HEAD'],
    ['POST', '/v1/stream/local/f.txt', 'GET, HEAD'],
    ['POST', '/healthz', 'GET, HEAD'],
    ['DELETE', '/metrics', 'GET, HEAD'],
    ['PUT', '/v1/jobs', 'GET, HEAD, POST'],
    ['PATCH', '/v1/jobs/abcdefgh', 'GET, HEAD, DELETE'],
    ['GET', '/v1/observations', 'POST']
  ])('%s %s is 405 METHOD_NOT_ALLOWED with Allow: %s', async (method, p, allow) => {
    const res = await sc.api.call(method, p)
    expect(res.status).toBe(405)
    expect(res.json.error.code).toBe('METHOD_NOT_ALLOWED')
    expect(res.headers.allow).toBe(allow)
  })
})
