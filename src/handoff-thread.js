// The hand-off thread (config handoff.listen): the journal and the line protocol's hand-offs, on a
// thread of their own. On the main thread a hand-off waited for whatever transfer callback ran when
// its line, and then its synced write, came in: in "fsync" mode one at a time it took 3–4 × its
// paced time (BENCHMARKS.md). Here nothing else runs.
//
// This thread is the journal's only writer, so it is also where every job is made: it knows each
// live job's id (the journal's records), and a line whose id is known here, or one the main thread
// is making, is passed to the main thread's scheduler.submit to answer, as POST /v1/jobs would. A
// new job is answered once its record is on disk (as the journal's mode says), and posted to the
// main thread, which runs it, right after (handoff.js; the main thread waits for the message
// before it says a job does not exist, so a status asked right after the answer finds it).
import { workerData } from 'node:worker_threads'
import net from 'node:net'
import path from 'node:path'
import { openJobStore, DEFER_MS } from './store.js'
import { lineProtocol } from './http/lines.js'
import { parseJobRequest, newJob } from './jobs.js'
import { reserve, UNFINISHED, ANSWERED, POSTED, HOLD_MS } from './handoff.js'
import { resolveSource, resolveDestination } from './paths.js'
import { bindListener, closeListener } from './sockets.js'
import * as errors from './errors.js'

const { config, counter, port, lineTimeouts, postDelayMs } = workerData
const ERROR_CLASSES = new Map(Object.values(errors).filter((c) => typeof c === 'function' && c.code).map((c) => [c.code, c]))
const FIRST_BYTE_MS = 10000 // as the API's sockets wait for a request's head (listeners.js)
const NOT_LINES = 'this socket speaks only the line protocol (handoff.listen); HTTP is served on the sockets of "listen"'

// Log lines go to the main thread's logger (its destination, its redaction).
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal']
const logger = { isLevelEnabled: (level) => config.logLevel !== 'silent' && LEVELS.indexOf(level) >= LEVELS.indexOf(config.logLevel) }
for (const level of LEVELS) {
  logger[level] = (obj, msg) => {
    if (logger.isLevelEnabled(level)) port.postMessage({ op: 'log', level, obj: loggable(obj), msg })
  }
}

const asked = new Map() // n → the settle functions of a submission passed to the main thread
let asks = 0
const making = new Map() // id → promise of a job made here, until it is posted to the main thread (or failed)
let stopping = false
let servers = []
const silent = new Set() // connections that have sent nothing yet: closed at once at a stop
const lines = lineProtocol({ config, scheduler: { submit }, logger, timeouts: lineTimeouts })

const store = await openJobStore({ dir: path.join(config.stateDir, 'jobs'), logger, ...config.journal, ownThread: true, deferMs: DEFER_MS - HOLD_MS })
port.on('message', (m) => m.op === 'batch' ? m.ops.forEach(handle) : handle(m))
function handle (m) {
  switch (m.op) {
    case 'put': return put(m)
    case 'remove': return store.remove(m.id).catch(() => {}) // only after close (a stop's last moments)
    case 'known': return knownHere(m.id).then((has) => reply({ n: m.n, has }))
    case 'answer': return answered(m)
    case 'listen': return startListening().then(() => port.postMessage({ op: 'listening', addresses: servers.map((s) => s.address) }),
      (err) => port.postMessage({ op: 'listening', error: { message: err.message, code: err.code } }))
    case 'stop': return stopListening(m.graceMs).then(() => port.postMessage({ op: 'stopped' }))
    // The answers to the last puts go before it (a close with nothing left to write settles
    // before the turn in which they would be posted).
    case 'close': return store.close().then(() => { postReplies(); port.postMessage({ op: 'closed' }) },
      (err) => { postReplies(); port.postMessage({ op: 'closed', error: { message: err.message } }) })
  }
}
port.postMessage({ op: 'opened', records: store.loaded() })

// A record from the main thread, in JSON. `create`: the first record of a job made there (HTTP,
// the spool), refused as `known` when a job of that id exists here (made by a hand-off meanwhile,
// which the main thread reads before this answer), so that one id never makes two jobs.
async function put ({ n, id, json, durable, create }) {
  if (create && store.records.has(id)) {
    await making.get(id)?.catch(() => {})
    if (store.records.has(id)) return reply({ n, known: true })
  }
  const written = store.putJson(id, json, { durable })
  if (n) written.then(() => reply({ n }), (err) => reply({ n, error: { message: err.message, code: err.code } }))
  else written.catch(() => {}) // not durable: resolved at once, or refused after close
}

// The main thread's puts and lookups settled in this turn, answered in one message.
const replies = []
function reply (r) {
  if (replies.push(r) === 1) setImmediate(postReplies)
}
function postReplies () {
  if (replies.length) port.postMessage({ op: 'done', list: replies.splice(0) })
}

// Whether a job of this id exists here, once one being made here is posted to the main thread (or
// failed): the main thread has read that message before this answer.
async function knownHere (id) {
  await making.get(id)?.catch(() => {})
  return store.records.has(id)
}

// scheduler.submit's acceptance, for the line protocol (lines.js): the same checks, errors and
// durability.
async function submit (body, recorded) {
  if (stopping) throw new errors.ShuttingDownError('the sidecar is shutting down; retry on another instance or later')
  const spec = parseJobRequest(body, config)
  // A known id: the main thread answers, once a job of that id being made here is posted to it.
  if (spec.id && store.records.has(spec.id) && await knownHere(spec.id)) return ask(body)
  if (spec.direction === 'upload') await resolveSource(spec.local, config.roots)
  else await resolveDestination(spec.local, config.roots)
  // Jobs whose first record is still being written are waited for before a refusal (scheduler.js).
  while (Atomics.load(counter, UNFINISHED) >= config.queue.limit && making.size) await Promise.allSettled(making.values())
  if (spec.id && store.records.has(spec.id) && await knownHere(spec.id)) return ask(body)
  if (!reserve(counter, config.queue.limit)) {
    // The place may be the one the main thread took for this same id (HTTP, the spool), whose
    // first record has not reached this thread yet: the main thread answers, as it knows its own
    // jobs being made (and asks this thread about those made here before it refuses).
    if (spec.id) return ask(body)
    throw new errors.QueueFullError(`the queue holds ${Atomics.load(counter, UNFINISHED)} unfinished jobs (limit ${config.queue.limit})`)
  }
  const job = newJob(spec, new Date().toISOString())
  const persisted = store.put(job)
  // Until the job is posted to the main thread (or its write failed): what knownHere waits for.
  const made = Promise.withResolvers()
  making.set(job.id, made.promise)
  const done = () => {
    making.delete(job.id)
    made.resolve()
  }
  recorded?.()
  try {
    await persisted
  } catch (err) {
    done()
    Atomics.sub(counter, UNFINISHED, 1)
    logger.error({ err }, 'cannot persist job')
    throw new errors.StoreUnavailableError('the job could not be written to disk; it was not accepted')
  }
  postAfterAnswer(job, done)
  return { job, created: true, state: 'queued' }
}

// The jobs answered in this turn, posted to the main thread together once their answers are
// written (lines.js writes them in this turn): a main thread woken by the message before that
// started the job while the answer was on its way, and a hand-off paced one every 5 ms took 2–3 ×
// as long. Counted as answered at once, so that the main thread, asked about a job, knows to wait
// for the message (handoff.js, drain).
const toPost = [] // { job, done }
function postAfterAnswer (job, done) {
  Atomics.add(counter, ANSWERED, 1)
  if (toPost.push({ job, done }) > 1) return
  ;(postDelayMs ? (post) => setTimeout(post, postDelayMs) : setImmediate)(() => {
    const posting = toPost.splice(0)
    port.postMessage({ op: 'adopt', jobs: posting.map((p) => p.job) })
    Atomics.add(counter, POSTED, posting.length)
    Atomics.notify(counter, POSTED)
    for (const p of posting) p.done()
  })
}

// A line whose id is known, answered by the main thread's scheduler.submit.
function ask (body) {
  const n = ++asks
  port.postMessage({ op: 'submit', n, body })
  return new Promise((resolve, reject) => asked.set(n, { resolve, reject }))
}

function answered ({ n, result, error }) {
  const { resolve, reject } = asked.get(n)
  asked.delete(n)
  if (!error) return resolve(result)
  const Class = ERROR_CLASSES.get(error.code) ?? errors.InternalError
  reject(new Class(error.message))
}

async function startListening () {
  for (const l of config.handoff.listen) {
    // Half-open as node's HTTP servers are: a client that half-closes after its lines gets every
    // answer, as on the API's sockets (README, the line protocol).
    const server = net.createServer({ allowHalfOpen: true }, serve)
    servers.push({ server, listen: l, address: await bindListener(server, l, config) })
  }
}

// The first bytes decide, as on the API's sockets (listeners.js): a line, or a clear refusal.
function serve (socket) {
  const quiet = () => socket.destroy()
  if (stopping) return quiet()
  silent.add(socket)
  socket.once('close', () => silent.delete(socket))
  socket.setTimeout(FIRST_BYTE_MS, quiet)
  socket.once('error', quiet)
  socket.once('data', (first) => {
    silent.delete(socket)
    socket.setTimeout(0, quiet)
    socket.off('error', quiet)
    if (first[0] === 0x7b) return lines.serve(socket, first) // "{"
    const body = JSON.stringify({ error: { code: 'INVALID_REQUEST', message: NOT_LINES } })
    socket.on('error', () => {})
    socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`, () => socket.destroy())
  })
}

// Shutdown: no job is accepted from now on; idle connections end now, busy ones after their
// answers or `graceMs`.
async function stopListening (graceMs) {
  stopping = true
  const closing = servers.map(({ server, listen: l }) => closeListener(server, l))
  servers = []
  for (const socket of silent) socket.destroy() // nothing sent yet: nothing to answer
  lines.closeIdle()
  const timer = setTimeout(() => lines.destroyAll(), graceMs)
  await Promise.all(closing)
  clearTimeout(timer)
}

// An error's name, message, code and stack: what the main thread's logger prints of one.
function loggable (obj) {
  if (!(obj?.err instanceof Error)) return obj
  const { name, message, code, stack } = obj.err
  return { ...obj, err: { type: name, message, code, stack } }
}
