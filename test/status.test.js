// GET /v1/jobs/{id} is served by status.js before express, except what only express's route takes
// (HEAD, escaped ids, the absolute form of the target). Both must answer alike: each case is asked
// in the origin form (status.js) and in the absolute form (express), and the answers compared.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import net from 'node:net'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

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

// One request written as is on a fresh connection: status, the headers that describe the body, body.
function raw (target, headers = {}) {
  const head = Object.entries({ Host: '127.0.0.1', Connection: 'close', ...headers }).map(([k, v]) => `${k}: ${v}\r\n`).join('')
  return new Promise((resolve, reject) => {
    const socket = net.connect(new URL(sc.url).port, '127.0.0.1', () => socket.write(`GET ${target} HTTP/1.1\r\n${head}\r\n`))
    let out = ''
    socket.on('data', (d) => { out += d })
    socket.once('close', () => {
      const [top, body] = [out.slice(0, out.indexOf('\r\n\r\n')), out.slice(out.indexOf('\r\n\r\n') + 4)]
      const fields = Object.fromEntries(top.split('\r\n').slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
      resolve({ status: Number(top.split(' ')[1]), type: fields['content-type'], auth: fields['www-authenticate'], body: JSON.parse(body) })
    })
    socket.once('error', reject)
  })
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
