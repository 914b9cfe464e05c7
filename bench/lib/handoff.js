// Section 3a: what it costs a PHP request to get a small upload (4 KiB, to httpd) off its hands,
// in a burst of calls back to back: the sidecar acked over the unix socket and TCP, the sidecar
// without reading the answer, exec('curl … &'), and the blocking php-curl PUT itself. After each
// variant the uploads are let finish; lost = handed off (the call returned) but never done.
// The daemon runs the uploads (4 at once) while the burst goes on, as it would in production.
// The -paced variants make one call every PACE_US instead (an endpoint's usual load, the daemon
// mostly idle when a call comes): what one request waits, rather than a saturated daemon.
import fs from 'node:fs/promises'
import path from 'node:path'
import { existsSync } from 'node:fs'
import { randomFillSync } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { runPhp } from './php.js'
import { cpuSeconds } from './procfs.js'

const FILE_BYTES = 4096
const SIDECAR_VARIANTS = ['acked-unix', 'acked-tcp', 'noack-unix']
const EXEC_WAIT_MS = 300_000
const EST_CALL_S = { 'acked-unix': 0.004, 'acked-tcp': 0.004, 'noack-unix': 0.002, 'exec-curl': 0.015, direct: 0.0015, 'acked-unix-paced': 0.007, 'direct-paced': 0.006 }
const PACE_US = 5000
const paced = (variant) => variant.endsWith('-paced')
const callsOf = (variant, opts) => paced(variant) ? opts.handoffPacedCalls : opts.handoffCalls

export const estimateHandoff = (opts) => 3 + opts.handoffVariants.reduce((s, v) => s + 1 + callsOf(v, opts) * EST_CALL_S[v], 0)

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
  progress.section('handoff', opts.handoffVariants.length)
  if (opts.handoffVariants.includes('exec-curl') && !existsSync('/bin/bash')) {
    throw new Error('hand-off exec-curl needs /bin/bash (its `times` builtin counts the background curls\' CPU)')
  }
  const daemon = await env.startDaemon('handoff')
  const http = env.targets.http
  const file = path.join(env.filesDir, 'handoff.bin')
  await fs.writeFile(file, randomFillSync(Buffer.alloc(FILE_BYTES)))
  const records = []
  for (const variant of opts.handoffVariants) {
    const base = variant.replace(/-paced$/, '')
    const calls = callsOf(variant, opts)
    const sidecar = SIDECAR_VARIANTS.includes(base)
    const prefix = `handoff-${variant}`
    const timesDir = path.join(env.workDir, `handoff-${variant}.times`)
    await fs.mkdir(timesDir, { recursive: true })
    const cpu0 = cpuSeconds(daemon.pid)
    const r = await runPhp('handoff.php', {
      variant: base,
      count: calls,
      pauseUs: paced(variant) ? PACE_US : 0,
      file,
      socket: daemon.socketPath,
      port: daemon.port,
      sidecarTarget: http.sidecarName,
      remotePrefix: prefix, // flat names: the uploads need no new collection
      url: http.uploadUrl,
      timesDir
    })
    const daemonBurstCpuS = cpuSeconds(daemon.pid) - cpu0
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
      if (failures.length) progress.log(`${variant}: failed jobs, e.g. ${failures.join('; ')}`)
    } else {
      if (base === 'exec-curl') ({ cpuS: backgroundCpuS } = await backgroundCurlCpu(timesDir, calls - r.errors))
      const arrived = await countArrived(http.localPath(''), prefix, calls)
      lost = calls - r.errors - arrived
    }
    for (let i = 0; i < calls; i++) await http.remove(`${prefix}-${i}.bin`)
    const perCallUs = (s) => s * 1e6 / calls
    const handedOff = Math.max(1, calls - r.errors) // uploads that then ran
    const record = {
      variant,
      calls,
      pauseUs: paced(variant) ? PACE_US : 0,
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
      phpCpuUsPerCall: perCallUs(r.cpuS + r.childrenCpuS),
      daemonBurstCpuUsPerCall: perCallUs(daemonBurstCpuS),
      // Everything one upload cost this machine's client side, transfer included: PHP's (and the
      // shells' it waited for, failed calls included), the daemon's (until its queue was empty) or
      // the background curls', per upload that was actually handed off.
      totalCpuUsPerUpload: (r.cpuS + r.childrenCpuS + daemonCpuS + backgroundCpuS) * 1e6 / handedOff,
      drainSeconds
    }
    records.push(record)
    progress.step(`${variant.padEnd(16)} median ${r.medianUs?.toFixed(1) ?? '—'} µs  p99 ${r.p99Us?.toFixed(0) ?? '—'} µs  ${paced(variant) ? `one call every ${PACE_US / 1000} ms` : `${r.handedOffPerSecond.toFixed(0)} hand-offs/s`}  ` +
      `errors ${r.errors}  lost ${lost}  failed ${failed}  cpu/call PHP ${record.phpCpuUsPerCall.toFixed(0)} µs, all ${record.totalCpuUsPerUpload.toFixed(0)} µs` +
      (sidecar ? `  (queue drained ${drainSeconds.toFixed(1)} s after the burst)` : ''))
  }
  return { records, fileBytes: FILE_BYTES }
}
