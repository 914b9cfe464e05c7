#!/usr/bin/env node
// Where the daemon's time goes in one hand-off (POST /v1/jobs), step by step, with the daemon's own
// functions, in this process: parse the body, validate it, check the local path against the roots,
// build the job record, append it to the journal (each journal.sync mode), write the answer. Then
// whole hand-offs over the unix socket from a client process, back to back and one every 5 ms,
// against the daemon's request handler and against a bare node:http server that answers the same
// 202 without doing anything: what node's HTTP server and the socket cost on their own.
//   node bench/handoff-steps.js [--iterations 20000] [--calls 2000]
// (--child JSON is internal: the client process of the whole hand-offs.)
import fs from 'node:fs/promises'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { fork } from 'node:child_process'
import { validateConfig } from '../src/config.js'
import { parseJobRequest, newJob } from '../src/jobs.js'
import { resolveSource } from '../src/paths.js'
import { openJobStore } from '../src/store.js'
import { sendJson } from '../src/http/respond.js'
import { median } from './lib/stats.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/handoff-steps.js [--iterations 20000] [--calls 2000]\n(--child JSON is internal: the client process of the whole hand-offs.)'
const { values } = toolArgs({ options: { iterations: { type: 'string', default: '20000' }, calls: { type: 'string', default: '2000' }, child: { type: 'string' } } }, USAGE)

// The client side: one kept-alive connection, the request PHP's Client sends, a time per call.
if (values.child) {
  const [socket, calls, pauseMs] = JSON.parse(values.child)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const times = []
  for (let i = 0; i < calls; i++) {
    const body = JSON.stringify({ id: `steps-${process.pid}-${i}`, direction: 'upload', target: 'store', local: process.env.STEPS_LOCAL, remote: `/s/${process.pid}/${i}.bin` })
    const t0 = process.hrtime.bigint()
    await new Promise((resolve, reject) => {
      const req = http.request({ socketPath: socket, path: '/v1/jobs', method: 'POST', agent, headers: { host: 'localhost', 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        res.resume()
        res.once('end', () => res.statusCode === 202 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`)))
      })
      req.once('error', reject)
      req.end(body)
    })
    times.push(Number(process.hrtime.bigint() - t0) / 1000)
    if (pauseMs) await new Promise((resolve) => setTimeout(resolve, pauseMs))
  }
  agent.destroy()
  process.send(times)
  process.exit(0)
}

const N = Number(values.iterations)
const CALLS = Number(values.calls)
const work = await fs.mkdtemp(path.join(os.tmpdir(), 'handoff-steps-'))
const root = path.join(work, 'root')
await fs.mkdir(path.join(root, 'uploads'), { recursive: true })
const local = path.join(root, 'uploads', 'small.bin')
await fs.writeFile(local, Buffer.alloc(4096, 1))
const config = validateConfig({ stateDir: path.join(work, 'state'), roots: [root], listen: [`unix:${path.join(work, 's.sock')}`], targets: { store: { type: 'file', dir: path.join(work, 'store') } } })
const text = JSON.stringify({ id: 'aaaaaaaaaaaaaaaaaaaaaa', direction: 'upload', target: 'store', local, remote: '/2026/11/25/small.bin' })

// µs per call of `fn`, the median of 5 rounds of N/5 calls (async ones awaited one by one).
async function time (fn) {
  const rounds = []
  for (let r = 0; r < 5; r++) {
    const n = Math.ceil(N / 5)
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < n; i++) await fn(i)
    rounds.push(Number(process.hrtime.bigint() - t0) / 1000 / n)
  }
  return median(rounds)
}

const rows = []
const body = JSON.parse(text)
const spec = parseJobRequest(body, config)
const job = newJob(spec, new Date().toISOString())
rows.push(['parse the body (JSON.parse)', await time(() => JSON.parse(text))])
rows.push(['validate (parseJobRequest)', await time(() => parseJobRequest(body, config))])
rows.push(['path checks (realpath, stat, roots)', await time(() => resolveSource(spec.local, config.roots))])
rows.push(['record (newJob)', await time(() => newJob(spec, new Date().toISOString()))])
for (const sync of ['write', 'fsync']) {
  const store = await openJobStore({ dir: path.join(work, `journal-${sync}`), sync })
  rows.push([`journal append, journal.sync "${sync}" (one put at a time)`, await time((i) => store.put({ ...job, id: `j${i}` }))])
  await store.close()
}
// The answer, written to a socket nobody reads: what building and writing the 202 costs.
rows.push(['answer (JSON + headers, written to the socket)', await answerCost()])

async function answerCost () {
  const server = http.createServer((req, res) => {
    const n = Math.ceil(N / 5)
    const rounds = []
    for (let r = 0; r < 5; r++) {
      const t0 = process.hrtime.bigint()
      for (let i = 0; i < n; i++) {
        res.headersSent ? res.socket.write('x') : sendJson(res, 202, { id: job.id, state: 'queued' }, { location: `/v1/jobs/${job.id}` })
      }
      rounds.push(Number(process.hrtime.bigint() - t0) / 1000 / n)
    }
    server.result = rounds
    res.destroy()
  })
  await new Promise((resolve) => server.listen(path.join(work, 'answer.sock'), resolve))
  await new Promise((resolve) => {
    const req = http.request({ socketPath: path.join(work, 'answer.sock'), method: 'POST', path: '/' })
    req.once('error', resolve)
    req.once('response', (res) => { res.resume(); res.once('close', resolve) })
    req.end()
  })
  server.close()
  return server.result[0] // the first write of each round is the whole answer; the rest 1 byte
}

// Whole hand-offs: the daemon, and a bare server answering the same 202.
const { startSidecar } = await import('../src/index.js')
const { createLogger } = await import('../src/logger.js')
async function clientRun (socket, calls, pauseMs) {
  const child = fork(new URL(import.meta.url).pathname, ['--child', JSON.stringify([socket, calls, pauseMs])], { env: { ...process.env, STEPS_LOCAL: local } })
  const times = await new Promise((resolve, reject) => { child.once('message', resolve); child.once('exit', (code) => code && reject(new Error(`client exited ${code}`))) })
  times.sort((a, b) => a - b)
  return { median: times[times.length >> 1], p90: times[Math.floor(times.length * 0.9)] }
}
const whole = []
const bare = http.createServer((req, res) => {
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.once('end', () => {
    const { id } = JSON.parse(Buffer.concat(chunks))
    sendJson(res, 202, { id, state: 'queued' }, { location: `/v1/jobs/${id}` })
  })
})
const bareSocket = path.join(work, 'bare.sock')
await new Promise((resolve) => bare.listen(bareSocket, resolve))
whole.push(['bare node:http server, same 202', await clientRun(bareSocket, CALLS, 0), await clientRun(bareSocket, 300, 5)])
bare.close()
for (const sync of ['write', 'fsync']) {
  const c = validateConfig({ listen: [`unix:${path.join(work, `${sync}.sock`)}`], stateDir: path.join(work, `state-${sync}`), roots: [root], socketMode: '0600', journal: { sync }, logLevel: 'silent', targets: { store: { type: 'file', dir: path.join(work, `store-${sync}`), concurrency: 4 } } })
  const sidecar = await startSidecar(c, { logger: createLogger({ level: 'silent' }) })
  whole.push([`daemon, journal.sync "${sync}" (the jobs run meanwhile)`, await clientRun(path.join(work, `${sync}.sock`), CALLS, 0), await clientRun(path.join(work, `${sync}.sock`), 300, 5)])
  await sidecar.stop({ graceMs: 5000 })
}
await fs.rm(work, { recursive: true, force: true })

console.log(`# POST /v1/jobs step by step (node ${process.version}, ${N} iterations, median of 5 rounds)\n`)
console.log('| step | µs per call |\n|---|---|')
for (const [step, us] of rows) console.log(`| ${step} | ${us.toFixed(1)} |`)
console.log(`\n# Whole hand-offs over the unix socket (a node client process, one kept-alive connection; ${CALLS} back to back, 300 one every 5 ms)\n`)
console.log('| server | back to back median µs | p90 | one every 5 ms median µs | p90 |\n|---|---|---|---|---|')
for (const [what, b2b, paced] of whole) console.log(`| ${what} | ${b2b.median.toFixed(0)} | ${b2b.p90.toFixed(0)} | ${paced.median.toFixed(0)} | ${paced.p90.toFixed(0)} |`)
