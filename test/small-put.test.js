// The PUT of small files on kept-alive connections (src/backends/small-put.js), against a raw TCP
// server that answers each request with exactly the bytes of its script: what goes out (head and
// body), the answer's framings (length, chunked with extensions and trailers, until the close,
// interim 1xx, split anywhere), when a connection is kept and when it must not be, and the
// failures (a head cut short, a server that does not answer, an abort).
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { createSmallPut } from '../src/backends/small-put.js'

// path → the pieces of the answer, each written after a pause (a read of its own), and whether
// the server then closes the connection. A path not here is answered 201 with a short body.
const SCRIPTS = {
  '/chunked': { parts: ['HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n', '5;name=val\r\nhel', 'lo\r', '\n6\r\n world\r\n', '0\r\nX-Trailer: t\r\n\r\n'] },
  '/chunked-split-size': { parts: ['HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n1', '0\r\n0123456789abcdef\r\n0\r', '\n\r\n'] },
  '/interim': { parts: ['HTTP/1.1 100 Continue\r\n\r\n', 'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n'] },
  '/split-head': { parts: ['HTT', 'P/1.1 2', '01 Created\r', '\nContent-Le', 'ngth: 3\r\n\r', '\nabc'] },
  '/close-header': { parts: ['HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'] },
  '/http10': { parts: ['HTTP/1.0 201 Created\r\nContent-Length: 2\r\n\r\nok'] },
  '/until-close': { parts: ['HTTP/1.1 403 Forbidden\r\n\r\n', 'first ', 'second'], close: true },
  '/after-body': { parts: ['HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n'] },
  '/te-and-length': { parts: ['HTTP/1.1 201 Created\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n'] },
  '/long-error': { parts: ['HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n', 'x'.repeat(70000)] },
  '/error-text': { parts: ['HTTP/1.1 409 Conflict\r\nContent-Length: 13\r\n\r\n', 'Conflict: é\n'] },
  '/cut-head': { parts: ['HTTP/1.1 201 Created\r\nContent-Len'], close: true },
  '/not-http': { parts: ['SSH-2.0-OpenSSH_9.2\r\n\r\n'] },
  '/bad-length': { parts: ['HTTP/1.1 201 Created\r\nContent-Length: 2x\r\n\r\nok'] },
  '/bad-chunk': { parts: ['HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'] },
  '/silent': { parts: [] },
  '/close-after': { parts: ['HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n'], closeLater: true }
}

let server, base
const requests = [] // { conn, method, path, headers, body }
let connections = 0

beforeAll(async () => {
  server = net.createServer((socket) => {
    const conn = ++connections
    let data = Buffer.alloc(0)
    socket.on('error', () => {})
    socket.on('data', async (chunk) => {
      data = Buffer.concat([data, chunk])
      for (;;) {
        const end = data.indexOf('\r\n\r\n')
        if (end < 0) return
        const lines = data.subarray(0, end).toString('latin1').split('\r\n')
        const headers = Object.fromEntries(lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
        const length = Number(headers['content-length'] ?? 0)
        if (data.length < end + 4 + length) return
        const [method, path] = lines[0].split(' ')
        requests.push({ conn, method, path, version: lines[0].split(' ')[2], headers, body: data.subarray(end + 4, end + 4 + length).toString('latin1') })
        data = data.subarray(end + 4 + length)
        const script = SCRIPTS[path] ?? { parts: ['HTTP/1.1 201 Created\r\nContent-Length: 8\r\n\r\nCreated\n'] }
        for (const part of script.parts) {
          if (socket.destroyed) return
          socket.write(part)
          if (script.parts.length > 1) await sleep(20)
        }
        if (script.close) socket.end()
        if (script.closeLater) setTimeout(() => socket.end(), 50)
      }
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = new URL(`http://127.0.0.1:${server.address().port}/dav/`)
})
afterAll(() => new Promise((resolve) => server.close(resolve)))

// One PUT of `body`: the answer, with its text read.
async function put (client, path, body = 'hello', { signal } = {}) {
  const { stream, done } = client.put(new URL(path.slice(1), `http://${base.host}/`), { 'content-type': 'application/octet-stream', 'content-length': String(Buffer.byteLength(body)) }, { signal })
  stream.end(Buffer.from(body)) // no 'error' listener: a failure must reach `done` only, never throw
  const res = await done
  return { statusCode: res.statusCode, headers: res.headers, text: await res.text() }
}

const lastRequest = () => requests[requests.length - 1]

describe('small PUT: what goes out', () => {
  it('sends the head and the whole body, and keeps one connection for PUTs one after another', async () => {
    const client = createSmallPut(base, { idleMs: 5000 })
    try {
      const before = connections
      for (let i = 0; i < 3; i++) {
        const res = await put(client, `/dav/f${i}%20x.bin?a=1`, `body ${i} ✓`)
        expect(res).toMatchObject({ statusCode: 201, text: 'Created\n' })
        expect(lastRequest()).toMatchObject({ method: 'PUT', path: `/dav/f${i}%20x.bin?a=1`, version: 'HTTP/1.1', body: Buffer.from(`body ${i} ✓`).toString('latin1') })
        expect(lastRequest().headers).toMatchObject({ host: base.host, 'content-type': 'application/octet-stream', 'content-length': String(Buffer.byteLength(`body ${i} ✓`)) })
      }
      expect(connections - before).toBe(1)
      expect(new Set(requests.slice(-3).map((r) => r.conn)).size).toBe(1)
    } finally {
      client.close()
    }
  })

  it('sends an empty body as a head alone', async () => {
    const client = createSmallPut(base, { idleMs: 5000 })
    try {
      const { stream, done } = client.put(new URL(`http://${base.host}/empty`), { 'content-length': '0' })
      stream.end()
      expect((await done).statusCode).toBe(201)
      expect(lastRequest()).toMatchObject({ path: '/empty', body: '' })
    } finally {
      client.close()
    }
  })
})

describe('small PUT: reading the answer', () => {
  it('decodes chunked bodies (extensions, trailers, framing split across reads), skips 1xx, reads a head split anywhere, and keeps the connection after each', async () => {
    const client = createSmallPut(base, { idleMs: 5000 })
    try {
      const before = connections
      expect(await put(client, '/chunked')).toMatchObject({ statusCode: 201, text: 'hello world' })
      expect(await put(client, '/chunked-split-size')).toMatchObject({ statusCode: 201, text: '0123456789abcdef' })
      expect(await put(client, '/interim')).toMatchObject({ statusCode: 204, text: '' })
      expect(await put(client, '/split-head')).toMatchObject({ statusCode: 201, text: 'abc' })
      expect(await put(client, '/error-text')).toMatchObject({ statusCode: 409, text: 'Conflict: é\n' })
      expect(connections - before).toBe(1)
    } finally {
      client.close()
    }
  })

  it('does not keep a connection the answer does not leave clean: Connection: close, HTTP/1.0, a body until the close, bytes after the answer, both framings, a body past 64 KiB', async () => {
    const client = createSmallPut(base, { idleMs: 5000 })
    try {
      for (const [path, status, text] of [
        ['/close-header', 201, 'ok'], ['/http10', 201, 'ok'], ['/until-close', 403, 'first second'],
        ['/after-body', 201, 'ok'], ['/te-and-length', 201, 'ok'], ['/long-error', 500, 'x'.repeat(64 * 1024)]
      ]) {
        const res = await put(client, path)
        expect(res, path).toMatchObject({ statusCode: status, text })
        const used = lastRequest().conn
        await put(client, '/next')
        expect(lastRequest().conn, `${path}: the next PUT on a new connection`).not.toBe(used)
      }
    } finally {
      client.close()
    }
  })

  it('does not reuse a kept connection that the server has closed since', async () => {
    const client = createSmallPut(base, { idleMs: 5000 })
    try {
      const before = connections
      expect((await put(client, '/close-after')).statusCode).toBe(201)
      await sleep(200) // the server closes it, unasked
      expect((await put(client, '/next')).statusCode).toBe(201)
      expect(connections - before).toBe(2)
    } finally {
      client.close()
    }
  })
})

describe('small PUT: failures are failures, never answers', () => {
  it('a head cut short, a server that is not HTTP, a bad Content-Length, a bad chunk: rejected (a 2xx whose body breaks ends its connection only)', async () => {
    const client = createSmallPut(base, { idleMs: 5000 })
    try {
      await expect(put(client, '/cut-head')).rejects.toMatchObject({ code: 'ECONNRESET' })
      await expect(put(client, '/not-http')).rejects.toMatchObject({ code: 'ERR_BAD_HTTP_RESPONSE' })
      await expect(put(client, '/bad-length')).rejects.toMatchObject({ code: 'ERR_BAD_HTTP_RESPONSE' })
      expect((await put(client, '/bad-chunk')).statusCode).toBe(201)
      const used = lastRequest().conn
      await put(client, '/next')
      expect(lastRequest().conn).not.toBe(used)
    } finally {
      client.close()
    }
  })

  it('a server that does not answer fails ETIMEDOUT after idleMs, and an abort ends the request at once', async () => {
    const client = createSmallPut(base, { idleMs: 300 })
    try {
      const t0 = Date.now()
      await expect(put(client, '/silent')).rejects.toMatchObject({ code: 'ETIMEDOUT' })
      expect(Date.now() - t0).toBeGreaterThanOrEqual(250)
      const controller = new AbortController()
      const pending = put(client, '/silent', 'x', { signal: controller.signal })
      setTimeout(() => controller.abort(), 50)
      await expect(pending).rejects.toMatchObject({ name: 'AbortError' })
      const aborted = new AbortController()
      aborted.abort()
      await expect(put(client, '/f', 'x', { signal: aborted.signal })).rejects.toMatchObject({ name: 'AbortError' })
    } finally {
      client.close()
    }
  })

  it('a connection refused fails ECONNREFUSED', async () => {
    const closed = net.createServer()
    await new Promise((resolve) => closed.listen(0, '127.0.0.1', resolve))
    const { port } = closed.address()
    await new Promise((resolve) => closed.close(resolve))
    const client = createSmallPut(new URL(`http://127.0.0.1:${port}/`))
    await expect(put(client, '/f')).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    client.close()
  })
})
