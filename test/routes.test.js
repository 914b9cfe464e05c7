// Routing of the control API without any remote server: a `file` target only.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import zlib from 'node:zlib'
import net from 'node:net'
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

  // An absolute-form target (RFC 9112 3.2.2) names the route as sent: "/v1/./jobs" is no route in
  // origin form, and must not become one in absolute form (new URL() resolves it to /v1/jobs).
  it('POST to an absolute-form target is routed by its path as sent', async () => {
    const body = JSON.stringify({ direction: 'upload', target: 'local', local: path.join(root, 'up.txt'), remote: '/abs.txt', overwrite: true })
    const post = (target) => new Promise((resolve, reject) => {
      const s = net.connect(new URL(sc.url).port, '127.0.0.1', () => s.write(`POST ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`))
      let out = ''
      s.on('data', (d) => { out += d })
      s.on('end', () => resolve(out.split('\r\n')[0]))
      s.on('error', reject)
    })
    expect(await post('http://127.0.0.1/v1/jobs')).toBe('HTTP/1.1 202 Accepted')
    for (const target of ['/v1/./jobs', 'http://127.0.0.1/v1/./jobs', 'http://127.0.0.1/x/../v1/jobs', 'http://127.0.0.1/v1/%2e/jobs', 'http://127.0.0.1/v1\\jobs', 'http://127.0.0.1/v1/jobs#x']) {
      expect(await post(target), target).toBe('HTTP/1.1 404 Not Found')
    }
  })

  // Read as POST /v1/jobs reads its body, not by express.json (which decoded invalid UTF-8 into
  // U+FFFD, inflated gzip and honoured a declared charset).
  it('POST /v1/observations refuses invalid UTF-8 (INVALID_JSON) and an encoded body (INVALID_REQUEST), as POST /v1/jobs', async () => {
    const good = { type: 'handoff', transport: 'unix', acked: true, seconds: 0.1 }
    const invalid = Buffer.concat([Buffer.from(JSON.stringify(good).slice(0, -1) + ',"'), Buffer.from([0xff]), Buffer.from('":1}')])
    for (const route of ['/v1/observations', '/v1/jobs']) {
      const bad = await sc.api.call('POST', route, invalid)
      expect(bad, route).toMatchObject({ status: 400, json: { error: { code: 'INVALID_JSON', message: 'the body is not valid UTF-8' } } })
      const gz = await sc.api.call('POST', route, zlib.gzipSync(JSON.stringify(good)), { 'content-encoding': 'gzip' })
      expect(gz, route).toMatchObject({ status: 400, json: { error: { code: 'INVALID_REQUEST' } } })
      const scalar = await sc.api.call('POST', route, '42')
      expect(scalar, route).toMatchObject({ status: 400, json: { error: { code: 'INVALID_JSON' } } })
    }
    expect(await sc.api.call('POST', '/v1/observations', good)).toMatchObject({ status: 202, json: { accepted: true } })
    // A throughput that is no number (1 MB in 1e-303 s) is refused, before any metric is counted
    // (it answered 500 after counting the transfer and its bytes).
    const before = (await sc.api.call('GET', '/metrics')).text
    const tiny = { type: 'transfer', via: 'php_curl', direction: 'upload', backend: 'http', mode: 'streamed', outcome: 'succeeded', bytes: 1000000, seconds: 1e-303 }
    expect(await sc.api.call('POST', '/v1/observations', tiny)).toMatchObject({ status: 400, json: { error: { code: 'INVALID_REQUEST' } } })
    const bytes = (text) => /^sidecar_transfer_bytes_total\{[^}]*via="php_curl"[^}]*\} (\d+)/m.exec(text)?.[1] ?? '0'
    expect(bytes((await sc.api.call('GET', '/metrics')).text)).toBe(bytes(before))
    expect(await sc.api.call('POST', '/v1/observations', 'x'.repeat(70 * 1024))).toMatchObject({ status: 413, json: { error: { code: 'PAYLOAD_TOO_LARGE' } } })
  })
})
