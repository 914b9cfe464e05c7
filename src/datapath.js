// The data path's building blocks. Node allocates a fresh buffer for every socket or file read,
// and the garbage is collected only after tens of MiB of it pile up, so a naive stream moving
// 1 GiB peaks far above its real needs and spends its time in the allocator and GC. Here every
// transfer has a small pool of reused buffers: sources read into pool buffers and sinks give each
// buffer back once it has been hashed and written. The pool being empty is the backpressure.
import fs from 'node:fs'
import { Readable, Writable } from 'node:stream'
import { SizeMismatchError } from './errors.js'

// 1 MiB buffers, up to 8 per transfer. Against 8 × 256 KiB, a 1 GiB download from httpd took
// 10–25 % less CPU (fewer socket reads, file writes and hashing-thread round trips); 8 of them
// rather than 4 absorb the bursts of a WebHDFS datanode (WebHDFS download 2.8 → 2.5 s a GiB).
export const CHUNK = 1024 * 1024
const POOL_BUFFERS = 8 // 8 MiB in flight per transfer at most
const MIN_BUFFERS = 4 // a download's socket reader keeps one for its next read and waits for 2 free
// An upload needs only 2: its file source reads into one while the socket takes the other. With the
// same bytes in half as many buffers (2 × 128 KiB against 4 × 64 KiB a transfer), 64 uploads of 32
// MiB at once to httpd made 1.08–1.12 × the MiB/s for 0.80–0.85 × the main thread's CPU per GiB
// (medians of three alternating pairs, with and without sha256).
export const UPLOAD_MIN_BUFFERS = 2
const FLOOR_BYTES = 256 * 1024 // the least a pool holds: 4 × 64 KiB, or 2 × 128 KiB for an upload
// A pool made for a transfer gets half of what the open pools leave of this budget: the full
// POOL_BUFFERS × CHUNK for the first, 4 × 1 MiB beside it, then ever smaller buffers (4 × 512
// KiB, or 2 × 1 MiB for an upload), down to the floor. Pools keep their size; together the open
// ones never hold more than the budget plus the floor of each (four started one after another:
// 15 MiB; 64: ~30).
const BUDGET_BYTES = 16 * 1024 * 1024
const READ_AHEAD = 2 * CHUNK // what a file source reads before it is asked
const SEND_AHEAD = 2 * CHUNK // what a request sink leaves queued on its socket before it waits

let committed = 0 // bytes the open transfers' pools may hold
// Buffers of closed pools (one full pool's worth at most of each kind), for the next pools: one
// transfer after another reuses the same memory instead of leaving each pool resident until a
// garbage collection frees it. Pools of transfers hashed by the hashing thread (digest.js) take
// shared memory, which that thread reads where it is; others take plain buffers, as shared
// memory is freed later (once both threads have collected it): 100,000 small jobs on shared
// buffers had doubled the daemon's peak RSS.
const SPARE_BYTES = POOL_BUFFERS * CHUNK
const spares = { plain: { buffers: new Map(), bytes: 0 }, shared: { buffers: new Map(), bytes: 0 } }

function takeBuffer (size, shared) {
  const spare = shared ? spares.shared : spares.plain
  const buf = spare.buffers.get(size)?.pop()
  if (!buf) return shared ? Buffer.from(new SharedArrayBuffer(size)) : Buffer.allocUnsafeSlow(size)
  spare.bytes -= size
  return buf
}

function keepBuffer (buf) {
  const spare = buf.buffer instanceof SharedArrayBuffer ? spares.shared : spares.plain
  if (spare.bytes + buf.length > SPARE_BYTES) return
  if (!spare.buffers.has(buf.length)) spare.buffers.set(buf.length, [])
  spare.buffers.get(buf.length).push(buf)
  spare.bytes += buf.length
}

// The count and size of the buffers of one more transfer's pool, when the open ones may hold
// `committedBytes`, for a transfer that needs at least `minBuffers`.
export function poolShape (committedBytes, minBuffers = MIN_BUFFERS) {
  const share = (BUDGET_BYTES - committedBytes) / 2
  const count = Math.max(minBuffers, Math.min(POOL_BUFFERS, Math.floor(share / CHUNK)))
  if (count * CHUNK <= share) return { count, size: CHUNK }
  let size = CHUNK
  while (size > FLOOR_BYTES / minBuffers && minBuffers * size > share) size /= 2
  return { count: minBuffers, size }
}

export class BufferPool {
  #free = []
  #unallocated = 0 // buffers of the pool not taken yet: a small transfer never needs them all
  #shared = false
  #holds = new Map() // backing memory of each buffer of the pool → holds on it while it is out
  #waiters = []
  #committed = 0 // what the pool counts against the budget while open
  #closed = false

  // The pool of a transfer, sized by what the open ones hold; close() it when the transfer ends.
  // `minBuffers`: UPLOAD_MIN_BUFFERS for an upload's file source.
  static forTransfer ({ minBuffers = MIN_BUFFERS } = {}) {
    const shape = poolShape(committed, minBuffers)
    const pool = new BufferPool(shape)
    pool.#committed = shape.count * shape.size
    committed += pool.#committed
    return pool
  }

  constructor ({ count = POOL_BUFFERS, size = CHUNK } = {}) {
    if (count < UPLOAD_MIN_BUFFERS) throw new RangeError(`a BufferPool needs at least ${UPLOAD_MIN_BUFFERS} buffers`)
    this.size = size
    this.#unallocated = count
  }

  get available () { return this.#free.length + this.#unallocated }

  // From now on the pool's buffers are shared memory (see takeBuffer): its plain ones go to the
  // spares as they come back (a download's first reads land in them before its size, which
  // decides where it is hashed, is known), and shared ones are taken in their place.
  share () {
    if (this.#shared) return
    this.#shared = true
    for (const buf of this.#free) this.#retire(buf.buffer)
    this.#free = []
  }

  #retire (ab) {
    this.#holds.delete(ab)
    this.#unallocated++
    keepBuffer(Buffer.from(ab))
  }

  // Hands the free buffers on to later pools. One still out (an aborted write owns it) is left to
  // the garbage collector: release() after close() drops it.
  close () {
    committed -= this.#committed
    this.#committed = 0
    this.#closed = true
    for (const buf of this.#free) keepBuffer(buf)
    this.#free = []
    this.#unallocated = 0
  }

  acquire () {
    let buf = this.#free.pop()
    if (!buf && this.#unallocated > 0) {
      this.#unallocated--
      buf = takeBuffer(this.size, this.#shared)
    }
    if (!buf) return null
    this.#holds.set(buf.buffer, 1)
    return buf
  }

  // One more user of a buffer that is out (acquired), which must release it too; false when the
  // pool does not own the view's memory or is closed.
  hold (view) {
    const n = this.#holds.get(view.buffer)
    if (this.#closed || !n) return false
    this.#holds.set(view.buffer, n + 1)
    return true
  }

  // Accepts the buffer or any view of it; views of buffers the pool does not own are ignored. The
  // buffer is free again when every holder has released it.
  release (view) {
    const ab = view.buffer
    const n = this.#holds.get(ab)
    if (this.#closed || !n) return
    this.#holds.set(ab, n - 1)
    if (n > 1) return
    if (this.#shared && !(ab instanceof SharedArrayBuffer)) this.#retire(ab)
    else this.#free.push(Buffer.from(ab))
    const waiter = this.#waiters.shift()
    if (waiter) waiter()
  }

  // Runs `fn` once a buffer is free (at once if one is), or on the next release when
  // `next` is set.
  whenAvailable (fn, { next = false } = {}) {
    if (this.available && !next) fn()
    else this.#waiters.push(fn)
  }
}

// A regular file read into pool buffers from `start` (up to `end`, exclusive); each chunk must be
// released by the sink. A short read is the end of a regular file: a small file costs one read.
// The stream closes only once no read is in flight: the owner closes the descriptor on 'close', and
// a read still queued then could land on a file or socket opened meanwhile under the same number.
// `size`: the source must hold exactly that many bytes (an upload's declared Content-Length). It
// reads up to one byte beyond, and a source found longer or shorter fails with SIZE_MISMATCH before
// that read is pushed: a request body is never sent longer than declared, and one that would come
// short is cut (the server then stores nothing) rather than left waiting for its last bytes.
export function fileSource (fd, { pool, start = 0, end = Infinity, size }) {
  let position = start
  let reading = false
  let afterRead = null // a destroy waiting for the read in flight
  if (size !== undefined) end = start + size + 1
  return new Readable({
    // Reads ahead (up to READ_AHEAD, bounded by the pool): the next chunk comes off the disk while
    // this one is hashed and sent.
    highWaterMark: READ_AHEAD,
    read () {
      if (position >= end) return this.push(null)
      pool.whenAvailable(() => {
        if (this.destroyed) return
        const buf = pool.acquire()
        const want = Math.min(buf.length, end - position)
        reading = true
        fs.read(fd, buf, 0, want, position, (err, n) => {
          reading = false
          const seen = position + n - start // bytes of the source so far, this read's included
          const ended = n < want
          const changed = !err && size !== undefined && (ended ? seen !== size : seen > size)
          if (afterRead || err || n === 0 || changed) {
            pool.release(buf)
            if (afterRead) return afterRead()
            if (changed) err = sourceChanged(seen, size) // a short read here is below `size`: reads stop one byte past it
            return err ? this.destroy(err) : this.push(null)
          }
          position += n
          this.push(buf.subarray(0, n))
          if (ended) this.push(null)
        })
      })
    },
    destroy (err, callback) {
      if (reading) afterRead = () => callback(err)
      else callback(err)
    }
  })
}

// An upload's source found with `seen` bytes where it had `size` when the upload started (seen
// is at most size + 1: its sources read one byte beyond, no more).
const sourceChanged = (seen, size) => new SizeMismatchError(seen < size
  ? `the source file has ${seen} bytes now, ${size} when the upload started`
  : `the source file has grown past the ${size} bytes it had when the upload started`)

// A source this small is read on the main thread and sent in one write (sendSmallFile below; an
// http target's PUT of it goes through small-put.js).
export const SMALL_FILE_BYTES = 64 * 1024

// A small file (one pool buffer holds it) sent to `sink` in one end(chunk), not through
// stream.pipeline: the source is one read(2) on this thread (from the page cache a few µs; through
// libuv's pool tens of µs of CPU, two thread hand-offs, as paths.js found for open and stat), and
// the body one write. Node's pipeline costs such a transfer more than its bytes do: an
// AbortController aborted with a fresh DOMException, end-of-stream listeners on both streams, an
// async iteration, and garbage that outlives the transfer (bench/job-cpu.js, 4,000 uploads of 4 KiB
// to httpd, three alternating pairs: 0.37–0.48 ms of daemon CPU a job against 0.49–0.64 through
// pipeline, GC pauses halved; see BENCHMARKS.md). There is no stream of chunks here to apply
// backpressure to, and the memory is one pool buffer, as through pipeline. What pipeline does for
// the chunk is done by hand: the same size check as fileSource (one byte read beyond: SIZE_MISMATCH,
// nothing sent), the sink destroyed when the signal aborts, and the promise settled only once the
// sink has finished (or failed, or closed before finishing). Larger files go through pipeline.
export function sendSmallFile (fd, sink, { pool, size, signal }) {
  // Its errors reach the caller through the promise (end()'s callback, or the failures below);
  // one after it has finished (a request reset after its body was sent) is the answer's to report.
  // Without a listener either would be an uncaught 'error' event, which ends the process.
  sink.on('error', () => {})
  let buf = null
  // Nothing sent: the buffer back to the pool, the sink destroyed.
  const fail = (err) => {
    if (buf) pool.release(buf)
    sink.destroy(err)
    return Promise.reject(err)
  }
  if (signal?.aborted) return fail(abortError(signal))
  buf = pool.acquire()
  if (!buf || buf.length <= size) return fail(new RangeError(`a file of ${size} bytes does not fit one buffer of the pool`))
  let n
  try {
    n = fs.readSync(fd, buf, 0, size + 1, 0)
  } catch (err) {
    return fail(err)
  }
  if (n !== size) return fail(sourceChanged(n, size))
  return new Promise((resolve, reject) => {
    const abort = () => sink.destroy(abortError(signal))
    signal?.addEventListener('abort', abort, { once: true })
    const settle = (err) => {
      signal?.removeEventListener('abort', abort)
      sink.off('close', closed)
      if (err) reject(err)
      else resolve()
    }
    const closed = () => {
      if (!sink.writableFinished) settle(sink.errored ?? Object.assign(new Error('the sink closed before the body was written'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }))
    }
    sink.once('close', closed)
    // end()'s callback runs on 'finish', or with the error that destroyed the sink first.
    if (size === 0) {
      pool.release(buf)
      sink.end((err) => settle(err))
    } else {
      sink.end(buf.subarray(0, size), (err) => settle(err))
    }
  })
}

// As pipeline rejects when its signal aborts (also small-put.js's requests).
export const abortError = (signal) => Object.assign(new Error('The operation was aborted', { cause: signal.reason }), { name: 'AbortError', code: 'ABORT_ERR' })

// Destroys `stream` if it is still open and resolves once it has closed, i.e. once the file
// source (or sink) has no read (or write) in flight on its descriptor: call it before closing that.
export function release (stream) {
  if (stream.closed) return Promise.resolve()
  return new Promise((resolve) => {
    stream.once('close', resolve)
    stream.destroy()
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
      request.write(chunk, () => pool.release(chunk))
      // Keep the socket fed: take the next chunk while this one is still queued, up to SEND_AHEAD.
      if (request.writableLength <= SEND_AHEAD) callback()
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

// fdatasync of a file being written, about every `every` bytes, one at a time in the background:
// the disk writes back while the data still arrives, and the sync at the end is short. Call
// wrote(position) after each write; idle() is the sync running now, if any (wait for it before the
// final one).
export function backgroundSync (datasync, { start = 0, every = 64 * 1024 * 1024 } = {}) {
  let syncedAt = start
  let syncing = null
  return {
    wrote (position) {
      if (syncing || position - syncedAt < every) return
      syncing = datasync().then(() => { syncedAt = position }, () => {}).finally(() => { syncing = null })
    },
    idle: () => syncing
  }
}

const fdatasync = (fd) => new Promise((resolve, reject) => fs.fdatasync(fd, (err) => err ? reject(err) : resolve()))

// Writes every byte of `buffers` through a FileHandle at `position` (null: at the file's current
// position, its end with O_APPEND), again for what a short write left: a write cut by a full disk
// returns fewer bytes than asked, not an error, and the write of the rest then fails with it.
export async function writeAll (handle, buffers, position = null) {
  let rest = buffers.filter((b) => b.length)
  while (rest.length) {
    const { bytesWritten } = await handle.writev(rest, position)
    if (bytesWritten <= 0) throw Object.assign(new Error('a file write made no progress'), { code: 'EIO' })
    if (position !== null) position += bytesWritten
    let skip = bytesWritten
    while (rest.length && skip >= rest[0].length) {
      skip -= rest[0].length
      rest = rest.slice(1)
    }
    if (skip) rest = [rest[0].subarray(skip), ...rest.slice(1)]
  }
}

// Writes chunk[offset..] at `position` on a raw descriptor, again for what a short write left (as
// writeAll, with callbacks: fileSink's writes).
function writeAt (fd, chunk, offset, position, done) {
  fs.write(fd, chunk, offset, chunk.length - offset, position, (err, n) => {
    if (err || offset + n >= chunk.length) return done(err)
    if (n === 0) return done(Object.assign(new Error('a file write made no progress'), { code: 'EIO' }))
    writeAt(fd, chunk, offset + n, position + n, done)
  })
}

// Sink for the file backend: hashes each chunk and writes it at its position with positional
// async writes (several in flight, so disk copies overlap the network), fdatasyncs in the
// background (backgroundSync) and at the end.
export function fileSink (fd, { pool, meter, start = 0, syncEvery }) {
  let position = start
  let inFlight = 0
  let failed = null
  const waiters = [] // run once no write is in flight
  const sync = backgroundSync(() => fdatasync(fd), { start, every: syncEvery })

  const settle = () => {
    if (inFlight === 0) for (const done of waiters.splice(0)) done()
  }
  const drained = () => new Promise((resolve) => { waiters.push(resolve); settle() })
  return new Writable({
    highWaterMark: 0,
    write (chunk, encoding, callback) {
      if (failed) return callback(failed)
      meter.update(chunk)
      inFlight++
      writeAt(fd, chunk, 0, position, (err) => {
        inFlight--
        pool.release(chunk)
        if (err) failed ??= err
        settle()
      })
      position += chunk.length
      sync.wrote(position)
      callback()
    },
    final (callback) {
      drained()
        .then(() => sync.idle())
        .then(() => {
          if (failed) throw failed
          return fdatasync(fd)
        })
        .then(() => callback(), callback)
    },
    destroy (err, callback) {
      // Closed (and its descriptor with it, by the owner) only once the writes and the sync in
      // flight have ended: one still queued could land in a file opened meanwhile under that number.
      drained()
        .then(() => sync.idle())
        .then(() => callback(err))
    }
  })
}
