// The main thread's side of the hand-off thread (handoff-thread.js): the journal as the scheduler
// knows it (put, remove, loaded, close, as store.js's), the jobs the thread made, and the
// submissions it passes here.
import { Worker, MessageChannel, receiveMessageOnPort } from 'node:worker_threads'
import { asSidecarError } from './http/respond.js'

// The counters both threads share (an Int32Array): the unfinished jobs (queue.limit), and the jobs
// the thread has answered and those it has posted to the main thread (see drain).
export const UNFINISHED = 0
export const ANSWERED = 1
export const POSTED = 2
const SETTLE_MS = 1000 // the longest a lookup waits for the thread to post a job it answered
// The longest a record nobody waits for is held here to ride along with others; the thread's
// journal then holds it back for at most DEFER_MS - HOLD_MS, as store.js would for DEFER_MS.
export const HOLD_MS = 50

// Takes a place among the `limit` unfinished jobs counted in `counter` (shared by the main thread
// and the hand-off thread, which both make jobs), or says there is none.
export function reserve (counter, limit) {
  for (let n = Atomics.load(counter, UNFINISHED); n < limit;) {
    const was = Atomics.compareExchange(counter, UNFINISHED, n, n + 1)
    if (was === n) return true
    n = was
  }
  return false
}

// `counter`: the number of unfinished jobs, shared with the thread (the queue limit).
// `lineTimeouts`: as lineProtocol's (http/lines.js), shorter in tests; `postDelayMs`: tests delay
// the post of each job the thread answered by that much (see drain).
export async function startHandoffThread ({ config, logger, lineTimeouts, postDelayMs }) {
  const counter = new Int32Array(new SharedArrayBuffer(3 * Int32Array.BYTES_PER_ELEMENT))
  const { port1: port, port2 } = new MessageChannel()
  const worker = new Worker(new URL('./handoff-thread.js', import.meta.url), {
    workerData: { config: threadConfig(config), counter, port: port2, lineTimeouts, postDelayMs },
    transferList: [port2],
    stdout: false,
    stderr: false
  })
  const waiting = new Map() // n → the settle functions of a put, by its number
  let puts = 0
  let records = null // the journal's, until loaded()
  let scheduler = null // set by listen()
  let failure = null // the thread ended: every put from now on fails with it
  let once = null // the one message awaited: { op, settle }

  // What goes to the thread, in order, posted in one message at the end of this turn of the loop
  // (or, if nothing in it is waited for, within HOLD_MS): a message wakes the thread, and one per
  // record had cost this thread ~30 µs each (11.7 % of its time in a profile of small uploads).
  const outbox = []
  let soon = null
  let later = null
  const flush = () => {
    clearImmediate(soon)
    clearTimeout(later)
    soon = later = null
    if (outbox.length) port.postMessage({ op: 'batch', ops: outbox.splice(0) })
  }
  const send = (m, waited) => {
    outbox.push(m)
    if (waited) soon ??= setImmediate(flush)
    else if (!soon) later ??= setTimeout(flush, HOLD_MS).unref()
  }
  // A control message goes after every record sent before it.
  const control = (m) => {
    flush()
    port.postMessage(m)
  }

  const handle = (m) => {
    switch (m.op) {
      case 'done': return m.list.forEach(settle)
      case 'adopt': return m.jobs.forEach((job) => scheduler.adopt(job))
      case 'submit': return answer(m)
      case 'log': return logger[m.level](m.obj, m.msg)
      default: if (once?.op === m.op) once.settle(m)
    }
  }
  port.on('message', handle)
  port.unref()
  const next = (op) => new Promise((resolve) => { once = { op, settle: resolve } })

  let opened = false
  let closing = false
  // The thread ended. Before it opened the journal, the start fails (below). While the daemon runs,
  // no job can be recorded from now on: the daemon ends, as on any crash, and its next start
  // recovers every job from the journal.
  const ended = (err) => {
    if (failure) return
    failure = err
    for (const { reject } of waiting.values()) reject(failure)
    waiting.clear()
    once?.settle({ op: once.op, error: { message: failure.message } })
    if (!opened || closing) return
    logger.fatal({ err }, 'the hand-off thread ended; the daemon cannot record jobs and stops')
    logger.flush?.()
    setImmediate(() => { throw err })
  }
  worker.on('error', ended)
  worker.on('exit', (code) => ended(new Error(`the hand-off thread exited (code ${code})`)))

  function settle ({ n, known, has, error }) {
    // Already rejected if the thread ended first (ended() cleared them): nothing waits any more.
    const waiter = waiting.get(n)
    if (!waiter) return
    const { resolve, reject } = waiter
    waiting.delete(n)
    if (has !== undefined) resolve(has) // the answer to known()
    else if (known) reject(Object.assign(new Error('a job of this id was made by a hand-off'), { known: true }))
    else if (error) reject(Object.assign(new Error(error.message), { code: error.code }))
    else resolve()
  }

  async function answer ({ n, body }) {
    try {
      const { job, created, state } = await scheduler.submit(body)
      send({ op: 'answer', n, result: { job: { id: job.id }, created, state } }, true)
    } catch (err) {
      const error = asSidecarError(err)
      if (error.code === 'INTERNAL') logger.error({ err }, 'hand-off failed')
      send({ op: 'answer', n, error: { code: error.code, message: error.message } }, true)
    }
  }

  const journal = await next('opened')
  if (journal.error) {
    await worker.terminate()
    throw new Error(`the hand-off thread could not open the journal: ${journal.error.message}`)
  }
  opened = true
  records = journal.records

  const store = {
    // As store.js's put; `create`: the job's first record, refused ({ known: true }) when the
    // thread has a job of that id.
    // The record crosses as JSON, which the thread writes as it is.
    put (record, { durable = true, create = false } = {}) {
      if (failure) return Promise.reject(failure)
      const json = JSON.stringify(record)
      if (!durable && !create) {
        send({ op: 'put', id: record.id, json, durable }, false)
        return Promise.resolve()
      }
      const n = ++puts
      send({ op: 'put', n, id: record.id, json, durable, create }, true)
      return new Promise((resolve, reject) => waiting.set(n, { resolve, reject }))
    },
    remove (id) {
      if (failure) return Promise.reject(failure)
      send({ op: 'remove', id }, false)
      return Promise.resolve()
    },
    // Whether the thread has a job of this id (its write waited for): the main thread's last look
    // before it refuses a job with a known id as QUEUE_FULL.
    known (id) {
      if (failure) return Promise.resolve(false)
      const n = ++puts
      send({ op: 'known', n, id }, true)
      return new Promise((resolve, reject) => waiting.set(n, { resolve, reject }))
    },
    loaded () {
      const loaded = records
      records = null
      return loaded
    },
    // Handles the messages already sent: the jobs the thread made and answered. True if any came.
    // `settle`: first waits (on this thread, at most SETTLE_MS) until every job the thread has
    // answered so far is posted: it posts a job right after its answer, so a client may ask about
    // it first (a lookup that would otherwise answer JOB_NOT_FOUND).
    drain ({ settle = false } = {}) {
      if (settle && !failure) {
        const answered = Atomics.load(counter, ANSWERED)
        const until = Date.now() + SETTLE_MS
        for (let posted; ((posted = Atomics.load(counter, POSTED)) - answered | 0) < 0 && Date.now() < until;) {
          Atomics.wait(counter, POSTED, posted, 5)
        }
      }
      let any = false
      for (let m; (m = receiveMessageOnPort(port));) {
        handle(m.message)
        any = true
      }
      return any
    },
    async close () {
      closing = true
      if (!failure) {
        control({ op: 'close' })
        const closed = await next('closed')
        if (closed.error && !failure) logger.error({ err: closed.error }, 'closing the journal failed')
      }
      await worker.terminate()
    }
  }

  return {
    store,
    counter,
    // Serves handoff.listen; `scheduler` runs the jobs made there and answers the lines passed here.
    async listen (s) {
      scheduler = s
      control({ op: 'listen' })
      const { addresses, error } = await next('listening')
      if (error) throw Object.assign(new Error(error.message), { code: error.code })
      return addresses
    },
    async stop (graceMs) {
      if (failure || !scheduler) return
      control({ op: 'stop', graceMs })
      await next('stopped')
    }
  }
}

// What the thread needs of the config, as plain data (targets hold URL objects and secrets it has
// no use for: it checks only a target's name).
function threadConfig (config) {
  return {
    stateDir: config.stateDir,
    roots: config.roots,
    token: config.token,
    socketMode: config.socketMode,
    socketGid: config.socketGid,
    logLevel: config.logLevel,
    queue: { limit: config.queue.limit },
    journal: config.journal,
    callbacks: { allow: config.callbacks.allow },
    handoff: config.handoff,
    targets: Object.fromEntries(Object.keys(config.targets).map((name) => [name, {}]))
  }
}
