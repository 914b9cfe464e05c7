// The pooled data path: reads into reused buffers, sinks that hash, write and give them back.
// Against the real Apache httpd (Content-Length bodies) and a Node server for chunked, 1xx and
// truncated answers.
import { describe, it, expect, beforeAll, afterAll, vi } from 'vitest'
import fs from 'node:fs/promises'
import fsSync from 'node:fs'
import path from 'node:path'
import http from 'node:http'
import net from 'node:net'
import { createHash } from 'node:crypto'
import { pipeline } from 'node:stream/promises'
import { Writable } from 'node:stream'
import { BufferPool, UPLOAD_MIN_BUFFERS, poolShape, fileSource, fileSink, requestSink, sendSmallFile } from '../src/datapath.js'
import { Meter } from '../src/transfer.js'
import { pooledGet } from '../src/backends/http-get.js'
import { readSmall } from '../src/backends/http-util.js'
import { startHttpd } from './harness/httpd.js'
import { tempDir } from './helpers/sidecar.js'
import { makeFile, sha256File } from './helpers/files.js'

const MiB = 1 << 20
let httpd, node, dir, big, bigSha

// A sink that keeps nothing: hashes, then releases after a delay (a slow consumer).
function slowSink (pool, meter, delayMs = 0) {
  return new Writable({
    highWaterMark: 0,
    write (chunk, enc, cb) {
      meter.update(chunk)
      setTimeout(() => { pool.release(chunk); cb() }, delayMs)
    }
  })
}

beforeAll(async () => {
  httpd = await startHttpd()
  dir = await tempDir('datapath-')
  big = path.join(httpd.davDir, 'big.bin')
  bigSha = await makeFile(big, 40 * MiB + 123, 3)
  node = http.createServer((req, res) => {
    if (req.url === '/chunked') {
      res.writeHead(200)
      for (let i = 0; i < 100; i++) res.write(Buffer.alloc(10000 + i, i))
      return res.end()
    }
    if (req.url === '/interim') {
      res.writeProcessing?.()
      res.writeHead(200, { 'content-length': 5 })
      return res.end('after')
    }
    if (req.url === '/truncated') {
      res.writeHead(200, { 'content-length': 1000 })
      res.write(Buffer.alloc(500))
      return setTimeout(() => res.socket.destroy(), 20)
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"nope"}')
  })
  await new Promise((resolve) => node.listen(0, '127.0.0.1', resolve))
})
afterAll(async () => {
  await httpd?.stop()
  await new Promise((resolve) => node?.close(resolve))
})

const nodeUrl = (p) => `http://127.0.0.1:${node.address().port}${p}`

describe('pooledGet + fileSink', () => {
  it('downloads a large file from httpd into a file, hashing on the way, with a bounded pool', async () => {
    const pool = new BufferPool()
    const meter = new Meter()
    const res = await pooledGet(httpd.uploadUrl + 'big.bin', { pool })
    expect(res.statusCode).toBe(200)
    const out = path.join(dir, 'big.out')
    const handle = await fs.open(out, 'w')
    await pipeline(res.body, fileSink(handle.fd, { pool, meter, syncEvery: 8 * MiB }))
    await handle.close()
    expect(meter.bytes).toBe(40 * MiB + 123)
    expect((await meter.digest()).sha256).toBe(bigSha)
    expect(await sha256File(out)).toBe(bigSha)
    expect(pool.available).toBe(8) // all back, the one taken for a read that did not come too
  })

  it('pauses the socket for a slow consumer instead of buffering', async () => {
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const meter = new Meter()
    const res = await pooledGet(httpd.uploadUrl + 'big.bin', { pool })
    const before = process.memoryUsage().arrayBuffers
    let peak = 0
    const sink = slowSink(pool, meter, 0)
    const timer = setInterval(() => { peak = Math.max(peak, process.memoryUsage().arrayBuffers - before) }, 1)
    await pipeline(res.body, sink)
    clearInterval(timer)
    expect((await meter.digest()).sha256).toBe(bigSha)
    expect(peak).toBeLessThan(8 * MiB)
  })

  it('reads a range', async () => {
    const pool = new BufferPool()
    const res = await pooledGet(httpd.uploadUrl + 'big.bin', { pool, headers: { range: 'bytes=100-199' } })
    expect(res.statusCode).toBe(206)
    const meter = new Meter()
    await pipeline(res.body, slowSink(pool, meter))
    const expected = createHash('sha256').update((await fs.readFile(big)).subarray(100, 200)).digest('hex')
    expect((await meter.digest()).sha256).toBe(expected)
  })

  it('decodes a chunked body', async () => {
    const pool = new BufferPool()
    const meter = new Meter()
    const res = await pooledGet(nodeUrl('/chunked'), { pool })
    await pipeline(res.body, slowSink(pool, meter))
    const hash = createHash('sha256')
    for (let i = 0; i < 100; i++) hash.update(Buffer.alloc(10000 + i, i))
    expect((await meter.digest()).sha256).toBe(hash.digest('hex'))
  })

  it('skips an interim 1xx answer', async () => {
    const res = await pooledGet(nodeUrl('/interim'), { pool: new BufferPool() })
    expect(res.statusCode).toBe(200)
    expect(await readSmall(res.body)).toBe('after')
  })

  it('lets an error body be read without releasing', async () => {
    const res = await pooledGet(nodeUrl('/missing'), { pool: new BufferPool({ count: 4, size: 16 }) })
    expect(res.statusCode).toBe(404)
    expect(JSON.parse(await readSmall(res.body))).toEqual({ error: 'nope' })
  })

  it('fails a body cut short', async () => {
    const pool = new BufferPool()
    const res = await pooledGet(nodeUrl('/truncated'), { pool })
    await expect(pipeline(res.body, slowSink(pool, new Meter()))).rejects.toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' })
  })

  it('connects to an IPv6 address (host in brackets in the URL)', async () => {
    const v6 = http.createServer((req, res) => res.writeHead(200, { 'content-length': 4 }).end('ipv6'))
    await new Promise((resolve) => v6.listen(0, '::1', resolve))
    try {
      const res = await pooledGet(`http://[::1]:${v6.address().port}/x`, { pool: new BufferPool() })
      expect(res.statusCode).toBe(200)
      expect(await readSmall(res.body)).toBe('ipv6')
    } finally {
      v6.closeAllConnections()
      await new Promise((resolve) => v6.close(resolve))
    }
  })

  it('rejects when nothing listens, and on abort', async () => {
    await expect(pooledGet('http://127.0.0.1:1/x', { pool: new BufferPool() })).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    const ac = new AbortController()
    const res = await pooledGet(httpd.uploadUrl + 'big.bin', { pool: new BufferPool(), signal: ac.signal })
    ac.abort()
    await expect(pipeline(res.body, slowSink(new BufferPool(), new Meter()))).rejects.toBeTruthy()
  })
})

// A raw server answering each connection with `answer(socket)`.
async function rawServer (answer) {
  const server = net.createServer((socket) => socket.once('data', () => answer(socket)))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}/x`, close: () => new Promise((resolve) => server.close(resolve)) }
}

describe('pooledGet: a body that fails before its consumer reads it', () => {
  // The response is handed on before the body is read (transfer.js awaits a truncate and a stat
  // before its pipeline when a resume meets a changed file): an error meanwhile must reach the
  // consumer, not be an 'error' event nobody listens to (an uncaught exception: the daemon exits).
  it.each([
    ['a bad chunk size in the first packet', (s) => s.end('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n'), 'ERR_BAD_HTTP_RESPONSE'],
    ['a connection reset right after the head', (s) => { s.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc'); s.resetAndDestroy() }, undefined]
  ])('%s', async (what, answer, code) => {
    const server = await rawServer(answer)
    try {
      const pool = new BufferPool({ count: 4, size: 64 * 1024 })
      const res = await pooledGet(server.url, { pool })
      expect(res.statusCode).toBe(200)
      await new Promise((resolve) => setTimeout(resolve, 50))
      const failed = await pipeline(res.body, slowSink(pool, new Meter())).then(() => null, (err) => err)
      expect(failed).toBeInstanceOf(Error)
      if (code) expect(failed.code).toBe(code)
    } finally {
      await server.close()
    }
  })
})

describe('pooledGet: a signal aborted before the call', () => {
  // A cancel or shutdown that came while the download got ready (a resumed one re-hashing its temp
  // file, a namenode call) must stop the GET at once, not after timeouts.idleMs of a server that
  // does not answer (DELETE /v1/jobs/{id} and shutdown wait for the attempt to end).
  it('rejects at once with the abort, without waiting for the server', async () => {
    const sockets = []
    const mute = net.createServer((socket) => { sockets.push(socket); socket.resume() }) // never answers
    await new Promise((resolve) => mute.listen(0, '127.0.0.1', resolve))
    try {
      const ac = new AbortController()
      ac.abort()
      const err = await pooledGet(`http://127.0.0.1:${mute.address().port}/x`, { pool: new BufferPool(), signal: ac.signal, idleMs: 3000 }).then(() => null, (e) => e)
      expect(err?.name).toBe('AbortError') // not ETIMEDOUT after idleMs
    } finally {
      for (const s of sockets) s.destroy()
      await new Promise((resolve) => mute.close(resolve))
    }
  })
})

describe('fileSource + requestSink', () => {
  // PUTs big.bin to httpd as `name` through `pool`; checks the answer, the digest and the stored file.
  async function uploadBig (name, pool, meter) {
    const handle = await fs.open(big, 'r')
    const req = http.request(httpd.uploadUrl + name, { method: 'PUT', headers: { 'content-length': 40 * MiB + 123 } })
    const answered = new Promise((resolve, reject) => req.once('response', resolve).once('error', reject))
    await pipeline(fileSource(handle.fd, { pool }), requestSink(req, { pool, meter }))
    const res = await answered
    res.resume()
    await handle.close()
    expect(res.statusCode).toBe(201)
    expect((await meter.digest()).sha256).toBe(bigSha)
    expect(await sha256File(path.join(httpd.davDir, name))).toBe(bigSha)
  }

  it('uploads a file through pool buffers to httpd', async () => {
    const pool = new BufferPool()
    await uploadBig('copy.bin', pool, new Meter())
    expect(pool.available).toBe(8)
  })

  it('uploads through an upload\'s smallest pool, 2 buffers, each hashed on the hashing thread before it is read into again', async () => {
    const pool = new BufferPool(poolShape(Infinity, UPLOAD_MIN_BUFFERS))
    expect([pool.available, pool.size]).toEqual([2, 128 * 1024])
    const meter = new Meter(null, { pool, size: 40 * MiB + 123 }) // its Digest makes the pool shared memory
    expect(meter.digester.inWorker).toBe(true)
    await uploadBig('copy-2.bin', pool, meter)
    expect(pool.available).toBe(2)
  })

  it('reads a slice of a file', async () => {
    const pool = new BufferPool({ count: 4, size: 4096 })
    const handle = await fs.open(big, 'r')
    const meter = new Meter()
    await pipeline(fileSource(handle.fd, { pool, start: 10, end: 10010 }), slowSink(pool, meter))
    await handle.close()
    expect(meter.bytes).toBe(10000)
  })

  // Every read is a trip through libuv's thread pool (~25 µs of CPU here): a small upload's file
  // costs one, not a second one to find the end.
  it('takes a short read as the end of the file, and stops at `end` without reading', async () => {
    const small = path.join(dir, 'small-4k')
    await fs.writeFile(small, Buffer.alloc(4096, 1))
    const handle = await fs.open(small, 'r')
    const reads = vi.spyOn(fsSync, 'read')
    try {
      const meter = new Meter()
      const pool = new BufferPool({ count: 4, size: 64 * 1024 })
      await pipeline(fileSource(handle.fd, { pool }), slowSink(pool, meter))
      expect(meter.bytes).toBe(4096)
      expect(reads).toHaveBeenCalledTimes(1)
      reads.mockClear()
      const slices = new Meter()
      const exact = new BufferPool({ count: 4, size: 1024 })
      await pipeline(fileSource(handle.fd, { pool: exact, start: 1024, end: 3072 }), slowSink(exact, slices))
      expect(slices.bytes).toBe(2048)
      expect(reads).toHaveBeenCalledTimes(2)
    } finally {
      reads.mockRestore()
      await handle.close()
    }
  })
})

// An upload declares its size (Content-Length) before the first byte: a source that turns out longer
// or shorter fails before the read that shows it is pushed, so no body longer than declared is ever
// sent, and one that would come short is cut rather than left waiting.
describe('fileSource with `size`', () => {
  async function read (content, size, poolOpts) {
    const file = path.join(dir, `sized-${content.length}-${size}`)
    await fs.writeFile(file, content)
    const handle = await fs.open(file, 'r')
    const pool = new BufferPool(poolOpts)
    const pushed = []
    try {
      await pipeline(fileSource(handle.fd, { pool, size }), new Writable({
        write (chunk, enc, cb) {
          pushed.push(Buffer.from(chunk))
          pool.release(chunk)
          cb()
        }
      }))
      return { bytes: Buffer.concat(pushed) }
    } catch (err) {
      return { err, bytes: Buffer.concat(pushed) }
    } finally {
      await handle.close()
    }
  }

  it('pushes a file of exactly `size` bytes, in one read when a buffer holds it', async () => {
    const reads = vi.spyOn(fsSync, 'read')
    try {
      const r = await read(Buffer.alloc(4096, 3), 4096, { count: 4, size: 64 * 1024 })
      expect(r.err).toBeUndefined()
      expect(r.bytes.length).toBe(4096)
      expect(reads).toHaveBeenCalledTimes(1)
    } finally {
      reads.mockRestore()
    }
    expect((await read(Buffer.alloc(3000, 3), 3000, { count: 4, size: 1024 })).bytes.length).toBe(3000)
    expect((await read(Buffer.alloc(0), 0, { count: 4, size: 1024 })).bytes.length).toBe(0)
  })

  it('fails a longer file with SIZE_MISMATCH without pushing a byte beyond `size`', async () => {
    const one = await read(Buffer.alloc(4097, 4), 4096, { count: 4, size: 64 * 1024 })
    expect(one.err).toMatchObject({ code: 'SIZE_MISMATCH' })
    expect(one.bytes.length).toBe(0)
    const chunked = await read(Buffer.alloc(5000, 4), 3072, { count: 4, size: 1024 })
    expect(chunked.err).toMatchObject({ code: 'SIZE_MISMATCH' })
    expect(chunked.bytes.length).toBeLessThanOrEqual(3072)
  })

  it('fails a shorter file with SIZE_MISMATCH', async () => {
    const r = await read(Buffer.alloc(4000, 5), 4096, { count: 4, size: 64 * 1024 })
    expect(r.err).toMatchObject({ code: 'SIZE_MISMATCH' })
    expect(r.err.message).toContain('4000 bytes now, 4096')
    expect((await read(Buffer.alloc(2000, 5), 3072, { count: 4, size: 1024 })).err).toMatchObject({ code: 'SIZE_MISMATCH' })
  })
})

// A small upload's body: one read(2) and one end(chunk) on the sink, with what pipeline would do
// for it (size check, abort, errors) done by hand.
describe('sendSmallFile', () => {
  async function send (content, size, { sink, signal, pool = new BufferPool({ count: 2, size: 64 * 1024 }) } = {}) {
    const file = path.join(dir, `small-${content.length}-${size}`)
    await fs.writeFile(file, content)
    const handle = await fs.open(file, 'r')
    const got = []
    sink ??= new Writable({
      write (chunk, enc, cb) {
        got.push(Buffer.from(chunk))
        pool.release(chunk)
        setImmediate(cb) // finishes a turn later, as a socket would
      }
    })
    try {
      await sendSmallFile(handle.fd, sink, { pool, size, signal })
      return { bytes: Buffer.concat(got), sink, pool }
    } catch (err) {
      return { err, bytes: Buffer.concat(got), sink, pool }
    } finally {
      await handle.close()
    }
  }

  it('sends a file of exactly `size` bytes in one write and one read, and settles once the sink has finished', async () => {
    const reads = vi.spyOn(fsSync, 'readSync')
    try {
      const r = await send(Buffer.alloc(4096, 7), 4096)
      expect(r.err).toBeUndefined()
      expect(r.bytes.equals(Buffer.alloc(4096, 7))).toBe(true)
      expect(r.sink.writableFinished).toBe(true)
      expect(reads).toHaveBeenCalledTimes(1)
      expect(r.pool.available).toBe(2) // the buffer came back
    } finally {
      reads.mockRestore()
    }
    const empty = await send(Buffer.alloc(0), 0)
    expect(empty.err).toBeUndefined()
    expect([empty.bytes.length, empty.sink.writableFinished, empty.pool.available]).toEqual([0, true, 2])
  })

  it('fails a longer or shorter file with SIZE_MISMATCH and sends nothing', async () => {
    const longer = await send(Buffer.alloc(4097, 1), 4096)
    expect(longer.err).toMatchObject({ code: 'SIZE_MISMATCH' })
    expect(longer.err.message).toContain('grown past the 4096 bytes')
    expect([longer.bytes.length, longer.sink.destroyed, longer.pool.available]).toEqual([0, true, 2])
    const shorter = await send(Buffer.alloc(4000, 1), 4096)
    expect(shorter.err).toMatchObject({ code: 'SIZE_MISMATCH' })
    expect(shorter.err.message).toContain('4000 bytes now, 4096')
    expect([shorter.bytes.length, shorter.sink.destroyed]).toEqual([0, true])
  })

  it('destroys the sink when the signal aborts, before or while the write is under way', async () => {
    const before = await send(Buffer.alloc(100), 100, { signal: AbortSignal.abort('cancel') })
    expect(before.err).toMatchObject({ name: 'AbortError', cause: 'cancel' })
    expect([before.bytes.length, before.sink.destroyed]).toEqual([0, true])

    const ac = new AbortController()
    const stuck = new Writable({ write (chunk, enc, cb) { ac.abort('shutdown') } }) // never calls back
    const during = await send(Buffer.alloc(100), 100, { sink: stuck, signal: ac.signal })
    expect(during.err).toMatchObject({ name: 'AbortError', cause: 'shutdown' })
    expect(stuck.destroyed).toBe(true)
  })

  it('rejects with the sink\'s error, and when the sink closes before it has finished', async () => {
    const failing = new Writable({ write (chunk, enc, cb) { cb(Object.assign(new Error('reset'), { code: 'ECONNRESET' })) } })
    expect((await send(Buffer.alloc(10), 10, { sink: failing })).err).toMatchObject({ code: 'ECONNRESET' })

    const closing = new Writable({ write (chunk, enc, cb) { setImmediate(() => closing.destroy()) } })
    expect((await send(Buffer.alloc(10), 10, { sink: closing })).err).toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' })

    // An error after the sink has finished (a request reset after its body was sent) is the
    // answer's to report: it must not reach the process as an unhandled 'error' event.
    const r = await send(Buffer.alloc(10), 10)
    expect(r.err).toBeUndefined()
    r.sink.destroy(new Error('late'))
    await new Promise((resolve) => setImmediate(resolve))
  })

  it('refuses a file that does not fit one buffer of the pool', async () => {
    const r = await send(Buffer.alloc(2048), 2048, { pool: new BufferPool({ count: 2, size: 2048 }) })
    expect(r.err).toBeInstanceOf(RangeError)
    expect([r.pool.available, r.sink.destroyed]).toEqual([2, true]) // no request left waiting for its body
  })
})

describe('fileSink', () => {
  // pwrite(2) may take fewer bytes than asked (a disk full for a moment, a FUSE file system); the
  // rest of the chunk must still reach the file, or it keeps a hole of zeros where the sha256 and
  // the size (given by the later writes) say all is well.
  it('writes the rest of a chunk the kernel took only part of', async () => {
    const data = Buffer.alloc(3 * 64 * 1024)
    for (let i = 0; i < data.length; i++) data[i] = (i % 251) + 1
    const src = path.join(dir, 'short-src')
    const out = path.join(dir, 'short-out')
    await fs.writeFile(src, data)
    const real = fsSync.write
    let calls = 0
    const writes = vi.spyOn(fsSync, 'write').mockImplementation(function (fd, buf, off, len, pos, cb) {
      if (++calls === 1) return real.call(fsSync, fd, buf, off, len >> 1, pos, cb) // half taken
      return real.call(fsSync, fd, buf, off, len, pos, cb)
    })
    const input = await fs.open(src, 'r')
    const output = await fs.open(out, 'w')
    try {
      const pool = new BufferPool({ count: 4, size: 64 * 1024 })
      const meter = new Meter()
      await pipeline(fileSource(input.fd, { pool }), fileSink(output.fd, { pool, meter }))
      expect(meter.bytes).toBe(data.length)
    } finally {
      writes.mockRestore()
      await input.close()
      await output.close()
    }
    expect((await fs.readFile(out)).equals(data)).toBe(true)
  })
})

// The owner closes the descriptor when the stream closes (file backend, upload source); a read or
// write still queued on the thread pool after that could land on a file or socket opened meanwhile
// under the same number. So a destroyed source or sink closes only once its I/O has ended.
describe('file streams close after their I/O in flight', () => {
  function held (name) { // fs[name] with the callbacks held until let go
    const real = fsSync[name]
    const waiting = []
    const spy = vi.spyOn(fsSync, name).mockImplementation(function (...args) {
      const cb = args.pop()
      real.call(fsSync, ...args, (...res) => waiting.push(() => cb(...res)))
    })
    return { spy, waiting, letGo: () => { for (const f of waiting.splice(0)) f() } }
  }

  it('fileSource: destroyed during a read, closes when the read has ended, and returns its buffer', async () => {
    const file = path.join(dir, 'inflight-read')
    await fs.writeFile(file, Buffer.alloc(256 * 1024, 7))
    const handle = await fs.open(file, 'r')
    const reads = held('read')
    try {
      const pool = new BufferPool({ count: 4, size: 64 * 1024 })
      const source = fileSource(handle.fd, { pool })
      source.resume()
      await vi.waitFor(() => expect(reads.waiting.length).toBe(1))
      let closed = false
      source.once('close', () => { closed = true })
      source.destroy()
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(closed).toBe(false) // the read is still in flight
      reads.letGo()
      await vi.waitFor(() => expect(closed).toBe(true))
      expect(pool.available).toBe(4)
      expect(reads.spy).toHaveBeenCalledTimes(1) // nothing read after the destroy
    } finally {
      reads.spy.mockRestore()
      await handle.close()
    }
  })

  it('fileSink: destroyed during a write, closes when the write has ended', async () => {
    const out = await fs.open(path.join(dir, 'inflight-write'), 'w')
    const writes = held('write')
    try {
      const pool = new BufferPool({ count: 4, size: 64 * 1024 })
      const sink = fileSink(out.fd, { pool, meter: new Meter() })
      const chunk = pool.acquire()
      chunk.fill(1)
      sink.write(chunk)
      await vi.waitFor(() => expect(writes.waiting.length).toBe(1))
      let closed = false
      sink.once('close', () => { closed = true })
      sink.destroy()
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(closed).toBe(false) // the write is still in flight
      writes.letGo()
      await vi.waitFor(() => expect(closed).toBe(true))
      expect(pool.available).toBe(4)
    } finally {
      writes.spy.mockRestore()
      await out.close()
    }
  })
})

describe('transfer buffer budget', () => {
  it('gives each new pool half of what the open ones leave of 16 MiB, down to 4 × 64 KiB', () => {
    expect(poolShape(0)).toEqual({ count: 8, size: MiB })
    expect(poolShape(8 * MiB)).toEqual({ count: 4, size: MiB })
    expect(poolShape(12 * MiB)).toEqual({ count: 4, size: 512 * 1024 })
    expect(poolShape(14 * MiB)).toEqual({ count: 4, size: 256 * 1024 })
    expect(poolShape(2 * MiB)).toEqual({ count: 7, size: MiB }) // one of 8 MiB closed, one of 2 open
    expect(poolShape(16 * MiB)).toEqual({ count: 4, size: 64 * 1024 }) // the floor: 256 KiB
    expect(poolShape(100 * MiB)).toEqual({ count: 4, size: 64 * 1024 })
  })

  it('gives an upload the same bytes in half as many buffers, down to 2 × 128 KiB', () => {
    expect(poolShape(0, UPLOAD_MIN_BUFFERS)).toEqual({ count: 8, size: MiB })
    expect(poolShape(8 * MiB, UPLOAD_MIN_BUFFERS)).toEqual({ count: 4, size: MiB })
    expect(poolShape(12 * MiB, UPLOAD_MIN_BUFFERS)).toEqual({ count: 2, size: MiB })
    expect(poolShape(14 * MiB, UPLOAD_MIN_BUFFERS)).toEqual({ count: 2, size: 512 * 1024 })
    expect(poolShape(16 * MiB, UPLOAD_MIN_BUFFERS)).toEqual({ count: 2, size: 128 * 1024 }) // the floor: 256 KiB
    expect(poolShape(100 * MiB, UPLOAD_MIN_BUFFERS)).toEqual({ count: 2, size: 128 * 1024 })
    expect(() => new BufferPool({ count: 1 })).toThrow(RangeError)
  })

  it('holds at most 16 MiB plus 256 KiB a transfer, however transfers come and go', () => {
    const held = (pools) => pools.reduce((sum, p) => sum + p.available * p.size, 0)
    const pools = Array.from({ length: 64 }, () => BufferPool.forTransfer())
    expect(pools.slice(0, 6).map((p) => [p.available, p.size / 1024])).toEqual([[8, 1024], [4, 1024], [4, 512], [4, 256], [4, 128], [4, 64]])
    expect([pools[63].available, pools[63].size]).toEqual([4, 64 * 1024])
    expect(held(pools.slice(0, 4))).toBe(15 * MiB) // README: four started one after another
    expect(held(pools)).toBe(30.25 * MiB) // and 64
    // Random churn: close some, open others; the bound holds throughout.
    let seed = 7
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
    for (let i = 0; i < 2000; i++) {
      if (pools.length && random() < 0.5) pools.splice(Math.floor(random() * pools.length), 1)[0].close()
      else pools.push(BufferPool.forTransfer(random() < 0.5 ? { minBuffers: UPLOAD_MIN_BUFFERS } : {}))
      expect(held(pools)).toBeLessThanOrEqual(16 * MiB + pools.length * 256 * 1024)
    }
    for (const p of pools) p.close()
    pools[0].close() // twice: counted once
    const next = [BufferPool.forTransfer(), BufferPool.forTransfer()]
    expect(next.map((p) => [p.available, p.size])).toEqual([[8, MiB], [4, MiB]])
    for (const p of next) p.close()
  })

  it('allocates a pool\'s buffers only as they are first needed', () => {
    const before = process.memoryUsage().arrayBuffers
    const pools = Array.from({ length: 50 }, () => new BufferPool({ count: 8, size: 256 * 1024 }))
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(MiB) // not 100 MiB
    const one = pools[0].acquire() // a small transfer takes one buffer and no more
    expect(one.length).toBe(256 * 1024)
    expect(pools[0].available).toBe(7)
    pools[0].release(one)
    expect(pools[0].available).toBe(8)
    for (const p of pools) p.close()
  })

  it('gives plain buffers, and shared memory once share() is called (for the hashing thread)', () => {
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const plain = pool.acquire()
    expect(plain.buffer).toBeInstanceOf(ArrayBuffer)
    pool.share()
    const shared = pool.acquire()
    expect(shared.buffer).toBeInstanceOf(SharedArrayBuffer)
    pool.release(plain) // not reused by this pool any more: a shared one takes its place
    expect(pool.available).toBe(3)
    const taken = [pool.acquire(), pool.acquire(), pool.acquire()]
    expect(taken.map((b) => b.buffer instanceof SharedArrayBuffer)).toEqual([true, true, true])
    expect(pool.acquire()).toBe(null)
    for (const b of [shared, ...taken]) pool.release(b)
    expect(pool.available).toBe(4)
    pool.close()
    const next = new BufferPool({ count: 4, size: 64 * 1024 }) // spares are reused by kind
    expect(next.acquire().buffer).toBeInstanceOf(ArrayBuffer)
    next.close()
  })

  it('hands a closed pool\'s free buffers to the next pool, never one still in use', () => {
    const earlier = new BufferPool({ count: 8, size: 256 * 1024 }) // takes what earlier tests left
    const first = new BufferPool({ count: 4, size: 256 * 1024 })
    const out = first.acquire() // e.g. owned by a write still in flight when the transfer ended
    const free = [first.acquire(), first.acquire(), first.acquire()]
    for (const b of free) first.release(b)
    first.close()
    first.release(out) // too late: dropped, not handed on
    const second = new BufferPool({ count: 4, size: 256 * 1024 })
    const got = [second.acquire(), second.acquire(), second.acquire(), second.acquire()]
    expect(got.filter((b) => free.some((f) => f.buffer === b.buffer))).toHaveLength(3)
    expect(got.some((b) => b.buffer === out.buffer)).toBe(false)
    second.close()
    earlier.close()
  })
})
