// The hand-off section's acked-floor (issue #18): the least work an acknowledged hand-off must do,
// with the daemon's own functions and nothing else, in a process of its own. It speaks the line
// protocol on a unix socket (so PHP's Client::upload() talks to it as to the daemon) and, for each
// line: JSON.parse, parseJobRequest (validation), resolveSource (the path checks: realpath, stat,
// the roots), the id looked up (idempotence), newJob, the record appended to a journal file, and
// the 202 line. The journal is written on this thread (no thread-pool hop): one write(2) per turn
// of the event loop for what every connection sent, opened O_DSYNC in "fsync" mode. No job runs,
// no metrics, logs or timers: what the daemon spends over this is its own machinery, what this
// spends over `pingpong` is the hand-off's own work (the checks and the record the README
// promises), which redis-lpush does not do. A refused line is answered as the daemon answers it.
//   node bench/lib/floor-server.js '{"socket", "roots", "targets": ["name", …], "journal", "sync"[, "steps": true]}'
// Prints "ready" once listening; exits on SIGTERM (with "steps", printing each step's median µs
// first); on SIGUSR2 forgets the steps timed so far and prints "reset".
import net from 'node:net'
import { openSync, rmSync, writeSync, constants as C } from 'node:fs'
import { parseJobRequest, newJob } from '../../src/jobs.js'
import { resolveSource } from '../../src/paths.js'
import { errorAnswer } from '../../src/http/respond.js'
import { InvalidJsonError } from '../../src/errors.js'

const { socket, roots, targets, journal, sync, steps = false } = JSON.parse(process.argv[2])
const config = { targets: Object.fromEntries(targets.map((name) => [name, {}])), callbacks: { allow: [] } }
const fd = openSync(journal, C.O_WRONLY | C.O_APPEND | C.O_CREAT | (sync === 'fsync' ? C.O_DSYNC : 0), 0o600)
const known = new Set()

// steps: each step's time (µs) per line, printed as medians at exit (where a paced hand-off's time goes).
const STEPS = ['parse', 'validate', 'path checks', 'record', 'journal write', 'answer write']
const times = steps ? STEPS.map(() => []) : null
let mark = 0n
function step (i) {
  if (!times) return
  const now = process.hrtime.bigint()
  if (i >= 0) times[i].push(Number(now - mark) / 1e3)
  mark = now
}

const accepted = (id) => `{"status":202,"id":"${id}","state":"queued"}`
const silent = { error () {}, warn () {} }

async function handle (line) {
  try {
    const body = JSON.parse(line)
    step(0)
    const spec = parseJobRequest(body, config)
    step(1)
    await resolveSource(spec.local, roots)
    step(2)
    if (spec.id !== null && known.has(spec.id)) return { answer: accepted(spec.id), record: null }
    const job = newJob(spec, new Date().toISOString())
    known.add(job.id)
    const record = `{"op":"put","job":${JSON.stringify(job)}}\n`
    step(3)
    return { answer: accepted(job.id), record }
  } catch (err) {
    // JSON.parse's own error is the daemon's INVALID_JSON (its parseJson words the message).
    const { error, body } = errorAnswer(err instanceof SyntaxError ? new InvalidJsonError('the line is not valid JSON') : err, silent)
    return { answer: JSON.stringify({ status: error.statusCode, ...body }), record: null }
  }
}

// The records of one turn of the event loop, from every connection, share one write (group commit,
// as the daemon's journal does); then each connection gets its answers and is read on.
let batch = null
function flush () {
  const { records, answers } = batch
  batch = null
  if (records.length) writeSync(fd, records.join(''))
  step(4)
  for (const [s, text] of answers) {
    s.write(text)
    s.resume()
  }
  step(5)
}

const server = net.createServer((s) => {
  let rest = ''
  s.setEncoding('utf8')
  s.on('data', async (chunk) => {
    const lines = (rest + chunk).split('\n')
    rest = lines.pop()
    if (lines.length === 0) return
    s.pause()
    step(-1)
    const done = []
    for (const line of lines) done.push(await handle(line))
    batch ??= (setImmediate(flush), { records: [], answers: [] })
    for (const d of done) if (d.record) batch.records.push(d.record)
    batch.answers.push([s, done.map((d) => d.answer + '\n').join('')])
  })
  s.on('error', () => {})
})
rmSync(socket, { force: true }) // one left by an earlier run killed before it could close
server.listen(socket, () => console.log('ready'))
// SIGUSR2: forget the steps timed so far (a warm-up's), then say so.
process.on('SIGUSR2', () => {
  for (const t of times ?? []) t.length = 0
  console.log('reset')
})
process.on('SIGTERM', () => {
  if (times) {
    const median = (v) => v.sort((a, b) => a - b)[v.length >> 1]
    console.log(JSON.stringify(Object.fromEntries(STEPS.map((name, i) => [name, median(times[i])]))))
  }
  process.exit(0)
})
