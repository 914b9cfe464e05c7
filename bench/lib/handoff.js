// Section 3a: what it costs a PHP request to get a small upload (4 KiB, to httpd) off its hands,
// in a burst of calls back to back: the sidecar acked over the unix socket and TCP (line protocol;
// acked-http-unix: POST /v1/jobs; acked-thread: the line protocol on the hand-off thread's socket,
// handoff.listen, with the client's handoff_socket), the sidecar
// without reading the answer, exec('curl … &'), and the blocking php-curl PUT itself. After each
// variant the uploads are let finish; lost = handed off (the call returned) but never done.
// The daemon runs the uploads (4 at once) while the burst goes on, as it would in production.
// The -paced variants make one call every PACE_US instead (an endpoint's usual load, the daemon
// mostly idle when a call comes): what one request waits, rather than a saturated daemon.
// The sidecar's variants run once per journal mode (issue #18), each mode on a fresh daemon. Beside
// them, from the same run: redis-lpush (the anchor: php-redis LPUSH of the same job body to a
// redis-server with appendfsync everysec) and fdatasync (the floor of "fsync" mode: a bare
// write + fdatasync of a journal-sized line, on the file system of the daemon's state directory;
// fdatasync-loaded: the same back to back while php-curl PUTs the same 4 KiB file to httpd back to
// back, i.e. with the disk writes the daemon's own jobs bring during its back-to-back variants);
// pingpong: the same job line from PHP to a second PHP process that answers it and does nothing
// else (a unix socketpair), the floor of any acknowledged hand-off between two processes here.
// acked-floor: Client::upload() to a node process that does only the hand-off's own work with the
// daemon's functions (checks, path checks, record, journal write on its own thread, answer; no
// job runs: bench/lib/floor-server.js), once per journal mode: what the daemon adds is above it.
import fs from 'node:fs/promises'
import path from 'node:path'
import { existsSync, openSync, writeSync, fdatasyncSync, closeSync } from 'node:fs'
import { randomFillSync } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Worker } from 'node:worker_threads'
import { startFloor } from './floor.js'
import { WARM_UP_LINE_JOBS } from './env.js'
import { runPhp } from './php.js'
import { cpuSeconds } from './procfs.js'

const FILE_BYTES = 4096
const SIDECAR_VARIANTS = ['acked-unix', 'acked-tcp', 'acked-http-unix', 'acked-thread', 'noack-unix']
const EXEC_WAIT_MS = 300_000
const EST_CALL_S = { 'acked-floor': 0.001, 'acked-unix': 0.004, 'acked-tcp': 0.004, 'acked-http-unix': 0.004, 'acked-thread': 0.004, 'noack-unix': 0.002, 'exec-curl': 0.015, direct: 0.0015, 'redis-lpush': 0.0002, pingpong: 0.0001, fdatasync: 0.0005, 'fdatasync-loaded': 0.0015 }
const PACE_US = 5000
const REDIS_KEY = 'sidecar-bench-jobs'
// A journal line of a small upload, about as long as the daemon's (the floor's appended write).
const JOURNAL_LINE = Buffer.from(JSON.stringify({ op: 'put', job: { id: '0'.repeat(32), direction: 'upload', target: 'files', local: '/tmp/sidecar-bench-XXXXXX/files/handoff.bin', remote: '/handoff-acked-unix-1234.bin', overwrite: false, state: 'queued', attempts: 0, createdAt: new Date(0).toISOString(), error: null } }) + '\n')
export const JOURNAL_LINE_BYTES = JOURNAL_LINE.length
const paced = (variant) => variant.endsWith('-paced')
const baseOf = (variant) => variant.replace(/-paced$/, '')
const callsOf = (variant, opts) => paced(variant) ? opts.handoffPacedCalls : opts.handoffCalls
export const isSidecarVariant = (variant) => SIDECAR_VARIANTS.includes(baseOf(variant))
const isFloorVariant = (variant) => baseOf(variant) === 'acked-floor'
const runsOf = (variant, opts) => isSidecarVariant(variant) || isFloorVariant(variant) ? opts.journalModes.length : 1
const FLOOR_WARMUP_CALLS = WARM_UP_LINE_JOBS // as many as a daemon's warm-up hands off over lines

export const estimateHandoff = (opts) => 3 + opts.journalModes.length * 3 + opts.handoffVariants.reduce((s, v) =>
  s + runsOf(v, opts) * (1 + callsOf(v, opts) * (paced(v) ? PACE_US / 1e6 * 1.2 : EST_CALL_S[baseOf(v)])), 0)

// Percentiles as bench/php/common.php computes them, from µs.
function percentiles (us) {
  const v = [...us].sort((a, b) => a - b)
  const n = v.length
  const at = (p) => (n === 0 ? null : v[Math.min(n - 1, Math.floor(p * n))])
  const mid = n >> 1
  return {
    medianUs: n === 0 ? null : n % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2,
    p90Us: at(0.9),
    p99Us: at(0.99),
    meanUs: n === 0 ? null : v.reduce((s, x) => s + x, 0) / n
  }
}

// The floor of "fsync" mode: write(2) of a journal-sized line to a file opened O_APPEND, then
// fdatasync(2), both called directly (fs.writeSync, fs.fdatasyncSync: no thread pool) from this
// Node process, in `dir` (the file system of the daemon's state directory).
async function fdatasyncFloor (dir, count, pauseUs) {
  const file = path.join(dir, 'fdatasync-floor.journal')
  const fd = openSync(file, 'a')
  const times = []
  const cpu0 = process.cpuUsage()
  const started = performance.now()
  try {
    for (let i = 0; i < count; i++) {
      const t0 = process.hrtime.bigint()
      writeSync(fd, JOURNAL_LINE)
      fdatasyncSync(fd)
      times.push(Number(process.hrtime.bigint() - t0) / 1e3)
      if (pauseUs) await sleep(pauseUs / 1000)
    }
  } finally {
    closeSync(fd)
    await fs.rm(file, { force: true })
  }
  const seconds = (performance.now() - started) / 1000
  const cpu = process.cpuUsage(cpu0)
  return { ...percentiles(times), seconds, callsPerSecond: count / seconds, handedOffPerSecond: count / seconds, errors: 0, firstErrors: [], cpuS: (cpu.user + cpu.system) / 1e6, childrenCpuS: 0, ids: [] }
}

// The loop of fdatasyncFloor in a thread of its own, back to back until told to stop, so that
// this process can run a PHP load beside it: resolves to the times in µs.
const SYNC_LOOP = `
const { workerData: { file, line, stop }, parentPort } = require('node:worker_threads')
const { openSync, writeSync, fdatasyncSync, closeSync, rmSync } = require('node:fs')
const flag = new Int32Array(stop)
const fd = openSync(file, 'a')
const times = []
while (Atomics.load(flag, 0) === 0) {
  const t0 = process.hrtime.bigint()
  writeSync(fd, line)
  fdatasyncSync(fd)
  times.push(Number(process.hrtime.bigint() - t0) / 1e3)
}
closeSync(fd)
rmSync(file, { force: true })
parentPort.postMessage(times)
`

// fdatasync-loaded: the floor of "fsync" mode back to back while php-curl uploads the same 4 KiB
// file to httpd back to back (the direct variant), on a machine whose one disk holds both the
// journal and httpd's files: each fdatasync then also commits what httpd wrote since the last.
async function loadedFdatasyncFloor ({ dir, php }) {
  const stop = new SharedArrayBuffer(4)
  const worker = new Worker(SYNC_LOOP, { eval: true, workerData: { file: path.join(dir, 'fdatasync-loaded.journal'), line: JOURNAL_LINE, stop } })
  const timesP = new Promise((resolve, reject) => { worker.once('message', resolve); worker.once('error', reject) })
  const cpu0 = process.cpuUsage()
  const started = performance.now()
  let load
  try {
    load = await runPhp('handoff.php', php)
  } finally {
    Atomics.store(new Int32Array(stop), 0, 1)
  }
  const times = await timesP
  const seconds = (performance.now() - started) / 1000
  const cpu = process.cpuUsage(cpu0)
  return { ...percentiles(times), seconds, callsPerSecond: times.length / seconds, handedOffPerSecond: times.length / seconds, syncs: times.length, loadCallsPerSecond: load.callsPerSecond, errors: 0, firstErrors: [], cpuS: (cpu.user + cpu.system) / 1e6, childrenCpuS: 0, ids: [] }
}

// Looks every id up once the daemon is idle: unknown → lost, not succeeded → failed.
async function countLost (daemon, ids) {
  let lost = 0
  let failed = 0
  const failures = []
  for (let i = 0; i < ids.length; i += 16) {
    const jobs = await Promise.all(ids.slice(i, i + 16).map((id) => daemon.job(id)))
    for (const job of jobs) {
      if (job === null) lost++
      else if (job.state !== 'succeeded') {
        failed++
        if (failures.length < 3) failures.push(`${job.id} ${job.state} ${JSON.stringify(job.error)}`)
      }
    }
  }
  return { lost, failed, failures }
}

async function countArrived (dir, prefix, count) {
  let arrived = 0
  for (let i = 0; i < count; i++) {
    const st = await fs.stat(path.join(dir, `${prefix}-${i}.bin`)).catch(() => null)
    if (st?.size === FILE_BYTES) arrived++
  }
  return arrived
}

// exec-curl: bash's `times` prints its own user/sys, then its children's (the curl), per call
// ("0m0.004s 0m0.002s"), to timesDir/<i> once that curl has exited. Returns the curls' CPU seconds
// (the bash wrapper's own is left out: plain exec('curl … &') would not have it).
async function backgroundCurlCpu (timesDir, count) {
  const deadline = Date.now() + EXEC_WAIT_MS
  const seconds = (t) => { const m = /^(\d+)m([\d.]+)s$/.exec(t); return m ? Number(m[1]) * 60 + Number(m[2]) : NaN }
  for (;;) {
    let sum = 0
    let finished = 0
    for (const name of await fs.readdir(timesDir)) {
      const lines = (await fs.readFile(path.join(timesDir, name), 'utf8')).trim().split('\n')
      if (lines.length < 2) continue
      const [user, sys] = lines[1].split(' ').map(seconds)
      sum += user + sys
      finished++
    }
    if (finished >= count || Date.now() > deadline) return { cpuS: sum, finished }
    await sleep(100)
  }
}

export async function runHandoff (env, opts, progress) {
  const steps = opts.handoffVariants.reduce((sum, v) => sum + runsOf(v, opts), 0)
  progress.section('handoff', steps)
  if (opts.handoffVariants.includes('exec-curl') && !existsSync('/bin/bash')) {
    throw new Error('hand-off exec-curl needs /bin/bash (its `times` builtin counts the background curls\' CPU)')
  }
  const file = path.join(env.filesDir, 'handoff.bin')
  await fs.writeFile(file, randomFillSync(Buffer.alloc(FILE_BYTES)))
  const records = []
  const skippedModes = []
  const others = opts.handoffVariants.filter((v) => !isSidecarVariant(v) && !isFloorVariant(v))
  const sidecars = opts.handoffVariants.filter(isSidecarVariant)
  const floors = opts.handoffVariants.filter(isFloorVariant)
  // The competitors first, then each journal mode on its own fresh daemon.
  const redis = others.some((v) => baseOf(v) === 'redis-lpush') ? await env.redis() : null
  for (const variant of others) records.push(await runVariant({ env, opts, progress, variant, mode: null, daemon: null, redis, file }))
  // acked-thread on a daemon of its own with handoff.listen (whose journal is then the thread's for
  // every submission), the other sidecar variants on one as configured by default.
  const groups = [[sidecars.filter((v) => baseOf(v) !== 'acked-thread'), false], [sidecars.filter((v) => baseOf(v) === 'acked-thread'), true]]
  for (const mode of sidecars.length || floors.length ? opts.journalModes : []) {
    if (floors.length) {
      const floor = await startFloor({ dir: env.workDir, name: `handoff-${mode}`, roots: [env.filesDir], targets: [env.targets.http.sidecarName], sync: mode, cpuProfDir: opts.cpuProfDir })
      try {
        await runPhp('handoff.php', { variant: 'acked-floor', count: FLOOR_WARMUP_CALLS, file, socket: floor.socket, sidecarTarget: env.targets.http.sidecarName, remotePrefix: 'floor-warm-up' })
        for (const variant of floors) records.push(await runVariant({ env, opts, progress, variant, mode, floor, redis, file }))
      } finally {
        await floor.stop()
      }
    }
    for (const [variants, handoff] of groups.filter(([variants]) => variants.length)) {
      const daemon = await env.startModeDaemon('handoff', mode, { handoff, skipped: skippedModes })
      if (!daemon) {
        for (let i = 0; i < variants.length; i++) progress.step(`${mode}: skipped`)
        continue
      }
      for (const variant of variants) records.push(await runVariant({ env, opts, progress, variant, mode, daemon, redis, file }))
    }
  }
  return { records, fileBytes: FILE_BYTES, skippedModes, redisVersion: redis?.version ?? null }
}

async function runVariant ({ env, opts, progress, variant, mode, daemon, floor, redis, file }) {
  const base = baseOf(variant)
  const calls = callsOf(variant, opts)
  const sidecar = isSidecarVariant(variant)
  const pauseUs = paced(variant) ? PACE_US : 0
  const http = env.targets.http
  const prefix = `handoff-${variant}${mode ? `-${mode}` : ''}`
  const timesDir = path.join(env.workDir, `${prefix}.times`)
  await fs.mkdir(timesDir, { recursive: true })
  const cpuPid = sidecar ? daemon.pid : floor ? floor.pid : base === 'redis-lpush' ? redis.pid : null
  const floorLines0 = floor ? await floor.lines() : 0
  const cpu0 = cpuPid ? cpuSeconds(cpuPid) : 0
  const php = {
    variant: base === 'fdatasync-loaded' ? 'direct' : base,
    count: calls,
    pauseUs,
    file,
    socket: floor?.socket ?? daemon?.socketPath,
    handoffSocket: daemon?.handoffSocket,
    port: daemon?.port,
    sidecarTarget: http.sidecarName,
    remotePrefix: prefix, // flat names: the uploads need no new collection
    url: http.uploadUrl,
    redisPort: redis?.port,
    redisKey: REDIS_KEY,
    timesDir
  }
  const r = base === 'fdatasync'
    ? await fdatasyncFloor(env.workDir, calls, pauseUs)
    : base === 'fdatasync-loaded'
      ? await loadedFdatasyncFloor({ dir: env.workDir, php })
      : await runPhp('handoff.php', php)
  const daemonBurstCpuS = cpuPid ? cpuSeconds(cpuPid) - cpu0 : 0
  let lost = 0
  let failed = 0
  let failures = []
  let backgroundCpuS = 0
  let drainSeconds = 0
  let daemonCpuS = 0
  if (sidecar) {
    drainSeconds = await daemon.drained()
    daemonCpuS = cpuSeconds(daemon.pid) - cpu0
    // A no-ack job the daemon took after PHP moved on still counts: wait a moment for stragglers.
    if (base === 'noack-unix') await sleep(500)
    ;({ lost, failed, failures } = await countLost(daemon, r.ids))
    if (failures.length) progress.log(`${variant} (${mode}): failed jobs, e.g. ${failures.join('; ')}`)
  } else if (floor) {
    daemonCpuS = daemonBurstCpuS // the floor server's: it only journals the job, no upload runs
    lost = calls - r.errors - (await floor.lines() - floorLines0)
  } else if (base === 'redis-lpush') {
    daemonCpuS = daemonBurstCpuS // redis-server's: it only stores the job, no upload runs
    lost = calls - r.errors - r.queued
  } else if (!base.startsWith('fdatasync') && base !== 'pingpong') {
    if (base === 'exec-curl') ({ cpuS: backgroundCpuS } = await backgroundCurlCpu(timesDir, calls - r.errors))
    const arrived = await countArrived(http.localPath(''), prefix, calls)
    lost = calls - r.errors - arrived
  }
  if (sidecar || base === 'direct' || base === 'exec-curl' || base === 'fdatasync-loaded') {
    for (let i = 0; i < calls; i++) await http.remove(`${prefix}-${i}.bin`)
  }
  const perCallUs = (s) => s * 1e6 / calls
  const handedOff = Math.max(1, calls - r.errors) // uploads that then ran
  const record = {
    variant,
    mode, // the daemon's journal.sync; null: not the sidecar
    calls,
    pauseUs,
    medianUs: r.medianUs,
    p90Us: r.p90Us,
    p99Us: r.p99Us,
    meanUs: r.meanUs,
    callsPerSecond: paced(variant) ? null : r.callsPerSecond, // paced: set by the pause
    handedOffPerSecond: paced(variant) ? null : r.handedOffPerSecond, // calls that did not throw
    errors: r.errors,
    firstErrors: r.firstErrors,
    lost,
    failed,
    failures,
    phpCpuUsPerCall: base.startsWith('fdatasync') ? null : perCallUs(r.cpuS + r.childrenCpuS), // pingpong: both PHP processes'
    syncs: r.syncs ?? null, // fdatasync-loaded: the syncs timed while php-curl ran
    loadCallsPerSecond: r.loadCallsPerSecond ?? null, // … and php-curl's uploads per second meanwhile
    daemonBurstCpuUsPerCall: perCallUs(daemonBurstCpuS),
    // Everything one upload cost this machine's client side, transfer included: PHP's (and the
    // shells' it waited for, failed calls included), the daemon's (until its queue was empty),
    // the background curls', or redis-server's, per upload that was actually handed off.
    totalCpuUsPerUpload: (r.cpuS + r.childrenCpuS + daemonCpuS + backgroundCpuS) * 1e6 / handedOff,
    drainSeconds
  }
  progress.step(`${variant.padEnd(17)} ${(mode ?? '').padEnd(5)} median ${r.medianUs?.toFixed(1) ?? '—'} µs  p99 ${r.p99Us?.toFixed(0) ?? '—'} µs  ${paced(variant) ? `one call every ${PACE_US / 1000} ms` : `${r.handedOffPerSecond.toFixed(0)} hand-offs/s`}  ` +
    `errors ${r.errors}  lost ${lost}  failed ${failed}  cpu/call PHP ${record.phpCpuUsPerCall?.toFixed(0) ?? '—'} µs, all ${record.totalCpuUsPerUpload.toFixed(0)} µs` +
    (sidecar ? `  (queue drained ${drainSeconds.toFixed(1)} s after the burst)` : ''))
  return record
}
