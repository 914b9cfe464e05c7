// The hand-written HTTP/1.1 client of download bodies (src/backends/http-get.js, pooledGet) against
// what such clients most often get wrong, each case sent byte for byte by a raw TCP server: chunked
// bodies (extensions, trailers, framing split anywhere), interim 1xx answers, bodies cut short, a
// body delimited by the connection's close, a head split across reads, bytes after the body; and
// what it holds while a server streams at it (chunked bodies, answers the caller does not stream).
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { pooledGet } from '../src/backends/http-get.js'
import { createHttpBackend } from '../src/backends/http.js'
import { BufferPool } from '../src/datapath.js'
import { download, upload } from '../src/transfer.js'
import { newJob } from '../src/jobs.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

// path → the pieces the server writes, each after a pause (so that each is a read of its own), and
// whether it then closes the connection.
const SCRIPTS = {
  '/chunked-ext-trailers': {
    parts: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', '5;name=val\r\nhel', 'lo\r', '\n6\r\n world\r\n', '0\r\nX-Trailer: t\r\n\r\n'],
    close: false // the last chunk ends the body, not the connection
  },
  '/chunked-split-size': {
    parts: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1', '0\r\n0123456789abcdef\r\n0\r', '\n\r\n'],
    close: false
  },
  '/interim': {
    parts: ['HTTP/1.1 100 Continue\r\n\r\n', 'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n', 'after'],
    close: false
  },
  '/interim-one-read': {
    parts: ['HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-1/10\r\nContent-Length: 2\r\n\r\nok'],
    close: false
  },
  '/cut-length': {
    parts: ['HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n', 'hello'],
    close: true
  },
  '/cut-chunked': {
    parts: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', '5\r\nhello\r\n'],
    close: true
  },
  '/chunk-longer': {
    parts: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', '3\r\nabcdef\r\n0\r\n\r\n'],
    close: true
  },
  '/chunk-bad-size': {
    parts: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', '3x\r\nabc\r\n0\r\n\r\n'],
    close: true
  },
  '/cut-head': {
    parts: ['HTTP/1.1 200 OK\r\nContent-Len'],
    close: true
  },
  '/until-close': {
    parts: ['HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n', 'first ', 'second ', 'third'],
    close: true
  },
  '/split-head': {
    parts: ['HTT', 'P/1.1 2', '00 OK\r', '\nContent-Le', 'ngth: 3\r\n\r', '\nabc'],
    close: false
  },
  '/pipelined': {
    parts: ['HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nxyz'],
    close: false
  },
  '/pipelined-chunked': {
    parts: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nxyz'],
    close: false
  }
}

let server, port
const closedByClient = new Map() // path → resolves when the client closed its side
beforeAll(async () => {
  server = net.createServer((socket) => {
    let head = ''
    socket.on('error', () => {})
    socket.on('data', async (data) => {
      if (head.includes('\r\n\r\n')) return
      head += data.toString('latin1')
      if (!head.includes('\r\n\r\n')) return
      const target = head.split(' ')[1]
      const script = SCRIPTS[target]
      const gone = new Promise((resolve) => socket.once('close', resolve))
      closedByClient.set(target, gone)
      for (const part of script.parts) {
        if (socket.destroyed) return
        socket.write(part)
        await sleep(20)
      }
      if (script.close) socket.end()
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = server.address().port
})
afterAll(() => new Promise((resolve) => server.close(resolve)))

const url = (p) => `http://127.0.0.1:${port}${p}`

// The body as text; pool views are copied and given back, as the daemon's sinks do.
async function bodyOf (res, pool) {
  const chunks = []
  for await (const chunk of res.body) {
    chunks.push(Buffer.from(chunk))
    pool.release(chunk)
  }
  return Buffer.concat(chunks).toString('latin1')
}

async function get (p) {
  const pool = new BufferPool({ count: 4, size: 64 * 1024 })
  const res = await pooledGet(url(p), { pool, idleMs: 5000 })
  return { res, pool }
}

describe('pooledGet against a server that sends exactly these bytes', () => {
  it('decodes a chunked body with chunk extensions and trailers, framing split across reads, and ends at the last chunk', async () => {
    const { res, pool } = await get('/chunked-ext-trailers')
    expect(res.statusCode).toBe(200)
    expect(await bodyOf(res, pool)).toBe('hello world')
    await closedByClient.get('/chunked-ext-trailers') // not waiting for the server to close
    expect(pool.available).toBe(4)
  })

  it('reads a chunk size split across two reads', async () => {
    const { res, pool } = await get('/chunked-split-size')
    expect(await bodyOf(res, pool)).toBe('0123456789abcdef')
  })

  it('skips 100 Continue and 103 Early Hints before the final answer, in separate reads or in one', async () => {
    let { res, pool } = await get('/interim')
    expect(res.statusCode).toBe(200)
    expect(res.headers.link).toBeUndefined() // the 103's headers are not the answer's
    expect(await bodyOf(res, pool)).toBe('after')
    ;({ res, pool } = await get('/interim-one-read'))
    expect(res.statusCode).toBe(206)
    expect(res.headers['content-range']).toBe('bytes 0-1/10')
    expect(await bodyOf(res, pool)).toBe('ok')
  })

  it('fails a body cut short of its Content-Length, of its last chunk, or in its head, never a success', async () => {
    let { res, pool } = await get('/cut-length')
    await expect(bodyOf(res, pool)).rejects.toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' })
    ;({ res, pool } = await get('/cut-chunked'))
    await expect(bodyOf(res, pool)).rejects.toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' })
    await expect(get('/cut-head')).rejects.toMatchObject({ code: 'ERR_BAD_HTTP_RESPONSE' })
  })

  // The decoder small-put.js uses too (ChunkedDecoder): a size line is hex digits, then at most
  // extensions, and the data is followed by CRLF; anything else is not the answer's framing.
  it('refuses a chunk longer than its size, and a size line that is not a size', async () => {
    let { res, pool } = await get('/chunk-longer')
    await expect(bodyOf(res, pool)).rejects.toMatchObject({ code: 'ERR_BAD_HTTP_RESPONSE', message: 'chunk data longer than its size' })
    ;({ res, pool } = await get('/chunk-bad-size'))
    await expect(bodyOf(res, pool)).rejects.toMatchObject({ code: 'ERR_BAD_HTTP_RESPONSE', message: 'bad chunk size line: "3x"' })
  })

  it('reads a body without length or chunking until the server closes the connection', async () => {
    const { res, pool } = await get('/until-close')
    expect(await bodyOf(res, pool)).toBe('first second third')
  })

  it('parses a status line and headers split across reads, inside a CRLF too', async () => {
    const { res, pool } = await get('/split-head')
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-length']).toBe('3')
    expect(await bodyOf(res, pool)).toBe('abc')
  })

  it('takes nothing after the end of the body as body, and does not keep the connection', async () => {
    for (const p of ['/pipelined', '/pipelined-chunked']) {
      const { res, pool } = await get(p)
      expect(await bodyOf(res, pool)).toBe('abc')
      await closedByClient.get(p) // the socket is closed, never reused for a next request
    }
  })
})

// A server that writes `head`, then `total` bytes of `piece` (framed by `frame`), as fast as the
// socket takes them, then `tail`; resolves to its URL. Closed after the file's tests.
const streamers = []
afterAll(() => Promise.all(streamers.map((s) => new Promise((resolve) => s.close(resolve)))))
async function streamer (head, total, frame = (piece) => [piece], tail = '') {
  const piece = Buffer.alloc(1 << 20, 'c')
  const s = net.createServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', async () => {
      socket.write(head)
      for (let sent = 0; sent < total && !socket.destroyed; sent += piece.length) {
        let ok = true
        for (const part of frame(piece)) ok = socket.write(part) && ok
        if (!ok) await new Promise((resolve) => socket.once('drain', resolve).once('close', resolve))
      }
      socket.end(tail)
    })
  })
  streamers.push(s)
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${s.address().port}/f`
}

describe('pooledGet bounds what it holds, whatever the server sends', () => {
  it('a chunked body waits for its reader: the body buffers a read, not the file', async () => {
    const u = await streamer('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', 192 << 20, (piece) => [`${piece.length.toString(16)}\r\n`, piece, '\r\n'], '0\r\n\r\n')
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const res = await pooledGet(u, { pool, idleMs: 5000 })
    await sleep(500) // nobody reads
    expect(res.body.readableLength).toBeLessThan(1 << 20) // before: everything received so far
    let bytes = 0
    for await (const chunk of res.body) bytes += chunk.length
    expect(bytes).toBe(192 << 20)
  })

  // The idle timer is the server's: while the body waits for its reader (the pool full, or a copy
  // not read), the socket is paused by us, and a reader slower than idleMs is not a stalled server.
  it.each([
    ['streamed into pool buffers', 'HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n', (s) => s === 200],
    ['copied', 'HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n', () => false]
  ])('a body %s whose reader pauses longer than idleMs is read to its end', async (what, head, zeroCopy) => {
    const u = await streamer(head, 32 << 20)
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const res = await pooledGet(u, { pool, idleMs: 200, zeroCopy })
    let bytes = 0
    for await (const chunk of res.body) {
      if (bytes === 0) await sleep(600) // three times idleMs, with the pool full
      bytes += chunk.length
      if (zeroCopy(200)) pool.release(chunk)
    }
    expect(bytes).toBe(32 << 20)
  })

  it('a chunk size line that never ends is refused, not gathered', async () => {
    const u = await streamer('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', 32 << 20)
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const res = await pooledGet(u, { pool, idleMs: 5000 })
    const err = await (async () => {
      for await (const chunk of res.body) pool.release(chunk)
    })().then(() => null, (e) => e)
    expect(err).toMatchObject({ code: 'ERR_BAD_HTTP_RESPONSE', message: 'chunk size line too long' })
  })

  it('an answer the caller does not stream is copied, so reading a little of it and stopping gives the pool back', async () => {
    const u = await streamer('HTTP/1.1 203 Non-Authoritative Information\r\nContent-Length: 33554432\r\n\r\n', 32 << 20)
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const res = await pooledGet(u, { pool, idleMs: 5000, zeroCopy: (status) => status === 200 })
    expect(res.statusCode).toBe(203)
    let bytes = 0
    for await (const chunk of res.body) {
      bytes += chunk.length
      if (bytes > 4 << 20) break // more than the pool holds, none of it released by this reader
    }
    await sleep(50) // the socket's close gives back the buffer it had taken for its next read
    expect(pool.available).toBe(4)
  })
})

describe('an http target that answers what was not asked', () => {
  it('PUTs answered 201 with a body that never ends do not hold the target\'s connections for ever', async () => {
    const timers = new Set()
    const server = http.createServer(async (req, res) => {
      req.resume()
      await new Promise((resolve) => req.once('end', resolve))
      if (req.method !== 'PUT') return res.writeHead(req.method === 'MOVE' ? 201 : 404).end()
      res.writeHead(201)
      const t = setInterval(() => res.write('.'), 100) // an answer that trickles for ever
      timers.add(t)
      res.on('close', () => clearInterval(t))
    })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const backend = createHttpBackend({ name: 't', url: `http://127.0.0.1:${server.address().port}/`, timeouts: { idleMs: 1000, connectMs: 1000 }, concurrency: 1, atomic: true })
    const root = await tempDir('http-trickle-')
    await fs.writeFile(path.join(root, 'a'), 'hello')
    try {
      for (let i = 1; i <= 4; i++) { // concurrency 1: two sockets in the target's pool
        const job = newJob({ direction: 'upload', target: 't', local: path.join(root, 'a'), remote: `/f${i}`, overwrite: true }, new Date().toISOString())
        const outcome = await Promise.race([upload(job, { backend, roots: [root] }).then(() => 'succeeded', (e) => e.code), sleep(6000, 'still running after 6 s')])
        expect(outcome).toBe('succeeded') // before: the third still waited for a socket
      }
    } finally {
      await backend.close()
      for (const t of timers) clearInterval(t)
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  }, 40000)

  it('a download answered 203 with a body larger than the pool fails at once as REMOTE_REJECTED, not after idleMs', async () => {
    const u = await streamer('HTTP/1.1 203 Non-Authoritative Information\r\nContent-Length: 33554432\r\nConnection: close\r\n\r\n', 32 << 20)
    const backend = createHttpBackend({ name: 't', url: new URL('/', u).href, timeouts: { idleMs: 3000, connectMs: 1000 }, concurrency: 1, atomic: true })
    const root = await tempDir('http-203-')
    const job = newJob({ direction: 'download', target: 't', local: path.join(root, 'f'), remote: '/f', overwrite: false }, new Date().toISOString())
    const t0 = Date.now()
    const err = await download(job, { backend, roots: [root] }).then(() => null, (e) => e)
    await backend.close()
    expect(err?.code).toBe('REMOTE_REJECTED')
    expect(Date.now() - t0).toBeLessThan(2000) // before: ETIMEDOUT after idleMs, then retried
  })

  it('a ranged /v1/stream from a server that ignores Range (200, the whole file) fails at once', async () => {
    const u = await streamer('HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\nConnection: close\r\n\r\n', 32 << 20)
    const root = await tempDir('http-range-')
    const sc = await startTestSidecar({ roots: [root], targets: { web: { type: 'http', url: new URL('/', u).href, timeouts: { idleMs: 3000, connectMs: 1000 } } } })
    try {
      const t0 = Date.now()
      const res = await sc.api.call('GET', '/v1/stream/web/f.bin', undefined, { range: 'bytes=10-109' })
      expect(res.status).toBeGreaterThanOrEqual(500)
      expect(Date.now() - t0).toBeLessThan(2000) // before: 504 TIMEOUT after idleMs
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })
})
