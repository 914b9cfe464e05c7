// POST /v1/jobs (submit.js, served before express) takes what the express routes take.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import net from 'node:net'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

let sc, root

beforeAll(async () => {
  root = await tempDir('submit-root-')
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: await tempDir('submit-store-') } } })
  await fs.writeFile(path.join(root, 'up.txt'), 'up')
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

// One request written as is on a fresh connection; the status of the answer.
function raw (text) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(new URL(sc.url).port, '127.0.0.1', () => socket.write(text))
    let out = ''
    socket.on('data', (d) => { out += d })
    socket.once('close', () => resolve({ status: Number(out.split(' ')[1]), body: out.slice(out.indexOf('\r\n\r\n') + 4) }))
    socket.once('error', reject)
  })
}

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
