// The data path's building blocks. Node allocates a fresh buffer for every socket or file read,
// and the garbage is collected only after tens of MiB of it pile up, so a naive stream moving
// 1 GiB peaks far above its real needs and spends its time in the allocator and GC. Here every
// transfer has a small pool of reused buffers: sources read into pool buffers and sinks give each
// buffer back once it has been hashed and written. The pool being empty is the backpressure.
import fs from 'node:fs'
import { Readable, Writable } from 'node:stream'

export const CHUNK = 256 * 1024
const POOL_BUFFERS = 16 // 4 MiB in flight per transfer at most

export class BufferPool {
  #free = []
  #owned = new Set()
  #waiters = []

  constructor ({ count = POOL_BUFFERS, size = CHUNK } = {}) {
    if (count < 4) throw new RangeError('a BufferPool needs at least 4 buffers') // readers pause at 1 free
    for (let i = 0; i < count; i++) {
      const buf = Buffer.allocUnsafeSlow(size)
      this.#free.push(buf)
      this.#owned.add(buf.buffer)
    }
  }

  get available () { return this.#free.length }

  acquire () {
    return this.#free.pop() ?? null
  }

  // Accepts the buffer or any view of it; views of buffers the pool does not own are ignored.
  release (view) {
    const ab = view.buffer
    if (!this.#owned.has(ab)) return
    this.#free.push(Buffer.from(ab))
    const waiter = this.#waiters.shift()
    if (waiter) waiter()
  }

  // Runs `fn` once a buffer is free (at once if one is), or on the next release when
  // `next` is set.
  whenAvailable (fn, { next = false } = {}) {
    if (this.#free.length && !next) fn()
    else this.#waiters.push(fn)
  }
}

// A file read into pool buffers from `start` (up to `end`, exclusive); each chunk must be released
// by the sink.
export function fileSource (fd, { pool, start = 0, end = Infinity }) {
  let position = start
  return new Readable({
    highWaterMark: 0,
    read () {
      pool.whenAvailable(() => {
        const buf = pool.acquire()
        fs.read(fd, buf, 0, Math.min(buf.length, end - position), position, (err, n) => {
          if (err) {
            pool.release(buf)
            return this.destroy(err)
          }
          if (n === 0) {
            pool.release(buf)
            return this.push(null)
          }
          position += n
          this.push(buf.subarray(0, n))
        })
      })
    }
  })
}

// The sinks take a `meter` with update(chunk) (transfer.js's Meter: bytes, sha256, HDFS checksum).

// Sink for uploads: hashes each chunk and writes it to an HTTP request (or any socket-like
// Writable); the chunk goes back to the pool when the kernel has taken it.
export function requestSink (request, { pool, meter }) {
  const sink = new Writable({
    highWaterMark: 0,
    write (chunk, encoding, callback) {
      meter.update(chunk)
      const flushed = request.write(chunk, () => pool.release(chunk))
      if (flushed) callback()
      else request.once('drain', () => callback())
    },
    final (callback) {
      request.end(callback)
    },
    destroy (err, callback) {
      if (err) request.destroy(err)
      callback(err)
    }
  })
  // A request destroyed from the other side (an early error answer, a reset, a client gone) ends
  // the pipeline too, instead of leaving it waiting for a drain or an end that will not come.
  request.on('error', (err) => sink.destroy(err))
  request.once('close', () => {
    if (!sink.writableFinished) sink.destroy(Object.assign(new Error('the request closed before its body was sent'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }))
  })
  return sink
}

// Sink for downloads and the file backend: hashes each chunk and writes it at its position with
// positional async writes (several in flight, so disk copies overlap the network), fdatasyncs
// about every 64 MiB so the final sync is short, and fdatasyncs at the end.
export function fileSink (fd, { pool, meter, start = 0, syncEvery = 64 * 1024 * 1024 }) {
  let position = start
  let inFlight = 0
  let failed = null
  let idle = null
  let syncedAt = start
  let syncing = null

  const settle = () => {
    if (inFlight === 0 && idle) {
      const done = idle
      idle = null
      done(failed)
    }
  }
  const background = () => {
    if (syncing || position - syncedAt < syncEvery) return
    const at = position
    syncing = new Promise((resolve) => fs.fdatasync(fd, (err) => {
      if (!err) syncedAt = at
      syncing = null
      resolve()
    }))
  }

  return new Writable({
    highWaterMark: 0,
    write (chunk, encoding, callback) {
      if (failed) return callback(failed)
      meter.update(chunk)
      inFlight++
      fs.write(fd, chunk, 0, chunk.length, position, (err) => {
        inFlight--
        pool.release(chunk)
        if (err) failed ??= err
        settle()
      })
      position += chunk.length
      background()
      callback()
    },
    final (callback) {
      const drained = new Promise((resolve) => { idle = resolve; settle() })
      drained
        .then(() => syncing)
        .then(() => {
          if (failed) throw failed
          return new Promise((resolve, reject) => fs.fdatasync(fd, (err) => err ? reject(err) : resolve()))
        })
        .then(() => callback(), callback)
    },
    destroy (err, callback) {
      // Writes still in flight own pool buffers; they finish on their own.
      callback(err)
    }
  })
}
