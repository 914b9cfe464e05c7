// The sha256 (and the target's own checksum) of the bytes a transfer moves. Hashing costs 0.7 s
// of CPU per GiB (sha256) to 1.2 s (with HDFS's checksum); done on the main thread, that time is
// taken from the socket and file work of every transfer, and one transfer runs at the speed of
// the two added up. Large transfers are therefore hashed by a worker thread, beside the main one:
// it reads each chunk where it lies (the pool buffers of such a transfer are shared memory, see
// datapath.js), and the chunk stays out of its pool until it has been hashed. Small transfers
// hash inline, as the round trips to the worker would cost more than they save.
//
// One worker serves all transfers. It starts with the first large one and stops when no digest
// has used it for IDLE_MS, so an idle daemon does not carry its ~16–25 MiB (node 24).
import { Worker } from 'node:worker_threads'
import { createHash } from 'node:crypto'
import { HashingFailedError } from './errors.js'

export const WORKER_MIN_BYTES = 8 * 1024 * 1024
const IDLE_MS = 10000

let worker = null
let generation = 0 // bumped when a worker dies: digests of an earlier one fail
let open = 0 // worker digests not yet finished or dropped
let idleTimer = null
let nextId = 1
let outbox = []
let flushing = false
// What waits on the worker, in the order it answers: a function per chunk (called when hashed)
// and a {resolve, reject} per digest.
const pending = []

function startWorker () {
  const w = worker = new Worker(new URL('./digest-worker.js', import.meta.url), {
    resourceLimits: { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 32 }, // it keeps ~1 KiB a digest
    stdout: false,
    stderr: false
  })
  w.unref()
  w.on('message', ({ done, results }) => {
    if (worker !== w) return
    let r = 0
    for (const waiter of pending.splice(0, done)) {
      if (typeof waiter === 'function') waiter()
      else waiter.resolve(results[r++])
    }
  })
  w.on('error', (err) => retire(w, err))
  w.on('exit', () => retire(w, null))
}

// Stops using worker `w`: what waits on it fails (chunks are given back), and a digest opened
// from now on starts a new one.
function retire (w, err) {
  if (worker !== w) return
  worker = null
  generation++
  open = 0
  outbox = []
  clearTimeout(idleTimer)
  const failure = new HashingFailedError(`the hashing thread stopped${err ? `: ${err.message}` : ''}`)
  for (const waiter of pending.splice(0)) {
    if (typeof waiter === 'function') waiter()
    else waiter.reject(failure)
  }
  w.terminate()
}

function send (op, waiter) {
  if (!worker) startWorker()
  outbox.push(op)
  if (waiter) pending.push(waiter)
  // One message per turn of the event loop, carrying everything the turn produced.
  if (!flushing) {
    flushing = true
    setImmediate(flush)
  }
}

function flush () {
  flushing = false
  if (!worker || !outbox.length) return
  const ops = outbox
  outbox = []
  worker.postMessage(ops)
}

function opened () {
  open++
  clearTimeout(idleTimer)
  idleTimer = null
}

function closed () {
  if (--open > 0 || !worker) return
  idleTimer = setTimeout(() => {
    idleTimer = null
    if (open === 0 && worker && !pending.length && !outbox.length) retire(worker, null)
  }, IDLE_MS).unref()
}

// A digest lost without digest() or dispose() (a job dropped while a partial download was kept for
// it) is dropped in the worker too.
const lost = new FinalizationRegistry(({ id, gen }) => {
  if (gen !== generation) return
  send(['x', id])
  closed()
})

export class Digest {
  #hash = null
  #checksum = null
  #id = 0
  #gen = 0
  #finished = false
  #pool = null

  // `checksum` is a backend's checksum object (hdfs-checksum.js) or null; `pool` owns the chunks
  // (they are held until hashed); `size` the bytes expected, which decides where to hash;
  // `sha256: false` (a job's digest "none") leaves sha256 out, and with no checksum there is
  // nothing to compute at all.
  constructor ({ checksum = null, pool = null, size = null, sha256 = true } = {}) {
    this.checksum = checksum
    this.inWorker = (sha256 || checksum !== null) && size !== null && size !== undefined && size >= WORKER_MIN_BYTES
    if (!this.inWorker) {
      this.#hash = sha256 ? createHash('sha256') : null
      this.#checksum = checksum
      return
    }
    this.pool = pool
    this.#id = nextId++
    const spec = checksum && { blockSize: checksum.blockSize, bytesPerChecksum: checksum.bytesPerChecksum, crcType: checksum.crcType }
    send(['o', this.#id, spec, sha256])
    this.#gen = generation
    opened()
    lost.register(this, { id: this.#id, gen: this.#gen }, this)
  }

  // The pool of the chunks to come (a download's next attempt has a new one); its new buffers
  // are made shared memory, which the thread reads without a copy.
  set pool (pool) {
    this.#pool = pool
    if (this.inWorker) pool?.share()
  }

  get pool () { return this.#pool }

  // Its thread died: digest() can only fail (a resume must hash its bytes again).
  get failed () { return this.inWorker && this.#gen !== generation }

  update (chunk) {
    if (!this.inWorker) {
      this.#hash?.update(chunk)
      this.#checksum?.update(chunk)
      return
    }
    if (this.#finished) throw new Error('update() after digest()')
    // The thread died: digest() fails. Not thrown here: update() runs inside the sinks' write
    // callbacks, where a throw is an uncaught exception (the daemon would exit).
    if (this.#gen !== generation) return
    if (chunk.buffer instanceof SharedArrayBuffer && this.#pool?.hold(chunk)) {
      const pool = this.#pool
      send(['u', this.#id, chunk.buffer, chunk.byteOffset, chunk.length], () => pool.release(chunk))
    } else {
      send(['u', this.#id, new Uint8Array(chunk)], () => {}) // a copy, as the chunk may be reused
    }
  }

  // { sha256: hex, checksum: the checksum's digest() or null }
  async digest () {
    if (!this.inWorker) return { sha256: this.#hash?.digest('hex') ?? null, checksum: this.#checksum?.digest() ?? null }
    if (this.#finished) throw new Error('digest() called twice')
    this.#finished = true
    lost.unregister(this)
    if (this.#gen !== generation) throw new HashingFailedError('the hashing thread stopped')
    try {
      const result = await new Promise((resolve, reject) => send(['d', this.#id], { resolve, reject }))
      if (!result) throw new HashingFailedError('the hashing thread lost a digest')
      return { sha256: result[0], checksum: result[1] }
    } finally {
      if (this.#gen === generation) closed()
    }
  }

  // For a digest that will not be finished.
  dispose () {
    if (!this.inWorker || this.#finished) return
    this.#finished = true
    lost.unregister(this)
    if (this.#gen !== generation) return
    send(['x', this.#id])
    closed()
  }
}

// For tests and the bench: is the hashing thread running, and a way to stop it now.
export const hashingThread = {
  get running () { return worker !== null },
  async stop () {
    if (worker) retire(worker, null)
  }
}
