// GET /v1/jobs/{id} is served by status.js before express, except what only express's route takes
// (HEAD, escaped ids, the absolute form of the target). Both must answer alike: each case is asked
// in the origin form (status.js) and in the absolute form (express), and the answers compared.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { rawRequest } from './helpers/raw-http.js'

let sc, root, id
const token = 'status-test-token'

beforeAll(async () => {
  root = await tempDir('status-root-')
  sc = await startTestSidecar({ roots: [root], token, targets: { local: { type: 'file', dir: await tempDir('status-store-') } } })
  await fs.writeFile(path.join(root, 'up.txt'), 'up')
  const job = await sc.api.run({ direction: 'upload', target: 'local', local: path.join(root, 'up.txt'), remote: '/up.txt' })
  expect(job.state).toBe('succeeded')
  id = job.id
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

// GET `target` on a fresh connection: status, the headers that describe the body, body.
async function raw (target, headers = {}) {
  const head = Object.entries({ Host: '127.0.0.1', Connection: 'close', ...headers }).map(([k, v]) => `${k}: ${v}\r\n`).join('')
  const res = await rawRequest(new URL(sc.url).port, `GET ${target} HTTP/1.1\r\n${head}\r\n`)
  return { status: res.status, type: res.headers['content-type'], auth: res.headers['www-authenticate'], body: JSON.parse(res.body) }
}

const bearer = { Authorization: `Bearer ${token}` }

describe('GET /v1/jobs/{id}: status.js answers as express does', () => {
  it.each([
    ['a finished job', () => `/v1/jobs/${id}`, bearer],
    ['a finished job, wait=5 (answered at once)', () => `/v1/jobs/${id}?wait=5`, bearer],
    ['an unknown id (JOB_NOT_FOUND)', () => '/v1/jobs/AAAAAAAAAAAA', bearer],
    ['an id too short for a job', () => '/v1/jobs/abc', bearer],
    ['wait not a plain decimal', () => `/v1/jobs/${id}?wait=0x3`, bearer],
    ['wait over 300', () => `/v1/jobs/${id}?wait=301`, bearer],
    ['wait given twice', () => `/v1/jobs/${id}?wait=1&wait=2`, bearer],
    ['wait escaped', () => `/v1/jobs/${id}?wait=%31`, bearer],
    ['other parameters beside wait', () => `/v1/jobs/${id}?x=1&wait=0`, bearer],
    ['no token', () => `/v1/jobs/${id}`, {}],
    ['a wrong token', () => `/v1/jobs/${id}`, { Authorization: 'Bearer nope' }]
  ])('%s', async (what, target, headers) => {
    const fast = await raw(target(), headers)
    const viaExpress = await raw(`${sc.url}${target()}`, headers)
    expect(fast).toEqual(viaExpress)
    expect(fast.type).toBe('application/json; charset=utf-8')
    if (fast.status === 200) expect(fast.body.id).toBe(id)
    else expect(fast.body.error.code).toMatch(/^[A-Z_]+$/)
  })

  it('logs each request as express does', async () => {
    await raw(`/v1/jobs/${id}`, bearer)
    const line = sc.logs.records().findLast((l) => l.msg === 'request' && l.path === `/v1/jobs/${id}`)
    expect(line).toMatchObject({ level: 30, method: 'GET', status: 200 })
    expect(line.ms).toBeGreaterThanOrEqual(0)
  })
})
