// Section 4b (issue #18): concurrency of hand-offs. `burstClients` php processes (default 16), each
// a share of `burstJobs` uploads of a small file to a `file` target, start together (a barrier
// file) and hand off back to back over the unix socket: acked hand-offs/s = jobs / (first client's
// start → last ack), per journal mode, on a fresh daemon with queue.keepFinished set. Then the
// queue drains, and every acked job is checked: its file in the target directory with the right
// size, no other file there, the daemon's counters (accepted = succeeded = acked, no retry, so no
// job ran twice), and no more than keepFinished jobs left in the daemon. The daemon's VmRSS is
// sampled every RSS_SAMPLE_MS. Then the same on a daemon with a hand-off thread (handoff.listen),
// the clients handing off on its socket (`sidecar-thread`). The anchor: the same clients LPUSHing
// the same job body to redis. And the ceiling of the hand-off alone (`floor`, per mode): the same
// clients to bench/lib/floor-server.js, which does the hand-off's own work with the daemon's
// functions (checks, path checks, record, journal write) and runs no job.
import fs from 'node:fs/promises'
import { readdirSync, statSync } from 'node:fs'
import path from 'node:path'
import { randomFillSync } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { runPhp } from './php.js'
import { sampleRss } from './procfs.js'
import { check } from './verify.js'
import { startFloor } from './floor.js'

const FILE_BYTES = 4096
export const KEEP_FINISHED = 1000
const RSS_SAMPLE_MS = 200
const READY_TIMEOUT_MS = 30_000
const STORE = 'burst-store'
const REDIS_KEY = 'sidecar-bench-burst'

// Per mode: the burst (3,000–10,000/s) and the drain (the file target fsyncs each file: ~700–1,700/s here).
export const estimateBurst = (opts) => 2 * opts.journalModes.length * (8 + opts.burstJobs * (1 / 5000 + 1 / 1200)) + opts.journalModes.length * (2 + opts.burstJobs / 8000) + 4 + opts.burstJobs / 20000

function percentiles (us) {
  const v = us.sort((a, b) => a - b)
  const at = (p) => (v.length ? v[Math.min(v.length - 1, Math.floor(p * v.length))] : null)
  return { medianUs: at(0.5), p90Us: at(0.9), p99Us: at(0.99), maxUs: v.at(-1) ?? null }
}

// Starts the clients, lets them go together once all are ready, and collects what they acked.
async function burst ({ env, opts, role, name, args }) {
  const dir = path.join(env.workDir, `burst-${name}`)
  await fs.mkdir(dir, { recursive: true })
  const goFile = path.join(dir, 'go')
  const clients = opts.burstClients
  const shares = Array.from({ length: clients }, (_, w) => Math.floor(opts.burstJobs / clients) + (w < opts.burstJobs % clients ? 1 : 0))
  const procs = shares.map((count, worker) => runPhp('burst.php', {
    ...args,
    role,
    worker,
    count,
    readyFile: path.join(dir, `ready-${worker}`),
    goFile,
    idsFile: path.join(dir, `ids-${worker}`),
    timesFile: path.join(dir, `times-${worker}`)
  }))
  const settled = Promise.allSettled(procs)
  try {
    const deadline = Date.now() + READY_TIMEOUT_MS
    while ((await fs.readdir(dir)).filter((f) => f.startsWith('ready-')).length < clients) {
      if (Date.now() > deadline) throw new Error(`burst ${name}: the clients were not ready after ${READY_TIMEOUT_MS / 1000} s`)
      await sleep(10)
    }
  } finally {
    await fs.writeFile(goFile, '') // also on failure: no client is left waiting
  }
  const results = await settled
  const failedClient = results.find((r) => r.status === 'rejected')
  if (failedClient) throw failedClient.reason
  const rs = results.map((r) => r.value)
  const acked = []
  const times = []
  for (let w = 0; w < clients; w++) {
    for (const line of (await fs.readFile(path.join(dir, `ids-${w}`), 'utf8')).split('\n')) {
      if (line) acked.push(line.split(' '))
    }
    for (const line of (await fs.readFile(path.join(dir, `times-${w}`), 'utf8')).split('\n')) {
      if (line) times.push(Number(line))
    }
  }
  await fs.rm(dir, { recursive: true, force: true })
  const seconds = Math.max(...rs.map((r) => r.endedAt)) - Math.min(...rs.map((r) => r.startedAt))
  return {
    acked, // [id, remote]
    seconds,
    ackedPerSecond: acked.length / seconds,
    errors: rs.reduce((s, r) => s + r.errors, 0),
    firstErrors: [...new Set(rs.flatMap((r) => r.firstErrors))].slice(0, 3),
    phpCpuS: rs.reduce((s, r) => s + r.cpuS, 0),
    ...percentiles(times)
  }
}

// Every regular file under dir, relative, with its size.
function listFiles (dir) {
  const out = new Map()
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    const file = path.join(entry.parentPath, entry.name)
    out.set('/' + path.relative(dir, file), statSync(file).size)
  }
  return out
}

async function sidecarBurst ({ env, opts, progress, mode, file, thread }) {
  const name = thread ? `${mode}-thread` : mode
  const variant = thread ? 'sidecar-thread' : 'sidecar'
  const storeDir = path.join(env.workDir, `burst-store-${name}`)
  const daemon = await env.startDaemon(`burst-${name}`, {
    smallJobs: true,
    handoff: thread,
    journal: mode,
    queue: { keepFinished: KEEP_FINISHED },
    targets: { [STORE]: { type: 'file', dir: storeDir } }
  })
  const counters = async () => ({
    accepted: await daemon.metric('sidecar_jobs_accepted_total'),
    succeeded: await daemon.metric('sidecar_jobs_finished_total', 'state="succeeded"'),
    finished: await daemon.metric('sidecar_jobs_finished_total'),
    retries: await daemon.metric('sidecar_transfer_retries_total')
  })
  const before = await counters()
  const burstRss = sampleRss(daemon.pid, RSS_SAMPLE_MS)
  const r = await burst({
    env,
    opts,
    role: 'sidecar',
    name,
    // The hand-off thread speaks the line protocol only.
    args: { socket: daemon.socketPath, handoffSocket: daemon.handoffSocket, protocol: thread ? 'lines' : opts.protocol, target: STORE, file, prefix: '/burst' }
  })
  const burstPeak = burstRss.stop()
  const drainRss = sampleRss(daemon.pid, RSS_SAMPLE_MS)
  const drainSeconds = await daemon.drained({ timeoutMs: 1_800_000 })
  const drainPeak = drainRss.stop()
  await sleep(300) // the prune after the last job
  const after = await counters()
  const delta = Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]))

  // Lost: an acked job whose file is not there with its size. Duplicated: an id acked twice, or
  // more jobs accepted or succeeded than acked (retries, counted apart, would show a job run twice).
  // Stray: a file in the target nobody acked.
  const ids = new Set(r.acked.map(([id]) => id))
  const files = listFiles(storeDir)
  let lost = 0
  for (const [, remote] of r.acked) if (files.get(remote) !== FILE_BYTES) lost++
  const remotes = new Set(r.acked.map(([, remote]) => remote))
  const strayFiles = [...files.keys()].filter((f) => !remotes.has(f)).length // e.g. a temp file left behind
  const duplicated = (r.acked.length - ids.size) + Math.max(0, delta.accepted - r.acked.length) + Math.max(0, delta.succeeded - r.acked.length)
  const res = await fetch(`${daemon.base}/v1/jobs?limit=${KEEP_FINISHED * 2}`)
  const kept = (await res.json()).jobs
  const retriedKept = kept.filter((j) => j.attempts > 1).length
  const record = {
    variant,
    mode,
    ...burstFigures(r, opts),
    lost,
    duplicated,
    filesInTarget: files.size,
    strayFiles,
    accepted: delta.accepted,
    succeeded: delta.succeeded,
    notSucceeded: delta.finished - delta.succeeded,
    retries: delta.retries + retriedKept,
    drainSeconds,
    keepFinished: KEEP_FINISHED,
    jobsKept: kept.length,
    idleRssMiB: daemon.idleRssMiB,
    burstPeakRssMiB: burstPeak.peakKiB / 1024,
    drainPeakRssMiB: drainPeak.peakKiB / 1024,
    rssSamples: burstPeak.samples + drainPeak.samples,
    phpCpuUsPerJob: r.phpCpuS * 1e6 / Math.max(1, r.acked.length)
  }
  await fs.rm(storeDir, { recursive: true, force: true })
  progress.step(`${variant} ${mode.padEnd(5)} ${record.acked}/${record.jobs} acked in ${record.seconds.toFixed(2)} s: ${record.ackedPerSecond.toFixed(0)} hand-offs/s, ` +
    `median ${record.medianUs} µs p99 ${record.p99Us} µs; errors ${record.errors}, lost ${lost}, duplicated ${duplicated}, stray files ${strayFiles}, not succeeded ${record.notSucceeded}, retries ${record.retries}; ` +
    `drained ${drainSeconds.toFixed(1)} s later; RSS idle ${record.idleRssMiB.toFixed(0)}, peak ${record.burstPeakRssMiB.toFixed(0)} (burst) / ${record.drainPeakRssMiB.toFixed(0)} MiB (drain), ${kept.length} jobs kept (keepFinished ${KEEP_FINISHED})`)
  check(record.errors === 0, `burst ${name}: ${record.errors} hand-offs threw, e.g. ${record.firstErrors.join('; ')}`)
  return record
}

// What every burst record carries, from a burst() result.
function burstFigures (r, opts) {
  return {
    clients: opts.burstClients,
    jobs: opts.burstJobs,
    acked: r.acked.length,
    errors: r.errors,
    firstErrors: r.firstErrors,
    seconds: r.seconds,
    ackedPerSecond: r.ackedPerSecond,
    medianUs: r.medianUs,
    p90Us: r.p90Us,
    p99Us: r.p99Us,
    maxUs: r.maxUs
  }
}

async function redisBurst ({ env, opts, progress, file }) {
  const redis = await env.redis()
  const args = { redisPort: redis.port, redisKey: REDIS_KEY, target: STORE, file, prefix: '/burst' }
  await redis.del(REDIS_KEY)
  const r = await burst({ env, opts, role: 'redis', name: 'redis', args })
  const c = await runPhp('burst.php', { ...args, role: 'redis-check' })
  const record = {
    variant: 'redis-lpush',
    mode: null,
    ...burstFigures(r, opts),
    lost: r.acked.length - c.distinct,
    duplicated: c.length - c.distinct
  }
  progress.step(`redis-lpush ${record.acked}/${record.jobs} in ${record.seconds.toFixed(2)} s: ${record.ackedPerSecond.toFixed(0)} hand-offs/s, median ${record.medianUs} µs p99 ${record.p99Us} µs; ` +
    `errors ${record.errors}, in the list ${c.length} (${c.distinct} distinct ids)`)
  return record
}

async function floorBurst ({ env, opts, progress, mode, file }) {
  const floor = await startFloor({ dir: env.workDir, name: `burst-${mode}`, roots: [env.filesDir], targets: [STORE], sync: mode, cpuProfDir: opts.cpuProfDir })
  let r, lines
  try {
    r = await burst({ env, opts, role: 'sidecar', name: `floor-${mode}`, args: { socket: floor.socket, protocol: 'lines', target: STORE, file, prefix: '/burst' } })
    lines = await floor.lines()
  } finally {
    await floor.stop()
  }
  const ids = new Set(r.acked.map(([id]) => id))
  const record = {
    variant: 'floor',
    mode,
    ...burstFigures(r, opts),
    lost: r.acked.length - lines, // an acked job without its journal record
    duplicated: r.acked.length - ids.size
  }
  progress.step(`floor ${mode.padEnd(5)} ${record.acked}/${record.jobs} acked in ${record.seconds.toFixed(2)} s: ${record.ackedPerSecond.toFixed(0)} hand-offs/s, ` +
    `median ${record.medianUs} µs p99 ${record.p99Us} µs; errors ${record.errors}, records ${lines}`)
  return record
}

export async function runBurst (env, opts, progress) {
  progress.section('burst', 3 * opts.journalModes.length + 1)
  const file = path.join(env.filesDir, 'burst.bin')
  await fs.writeFile(file, randomFillSync(Buffer.alloc(FILE_BYTES)))
  const records = []
  const skippedModes = []
  for (const mode of opts.journalModes) {
    for (const thread of [false, true]) {
      try {
        records.push(await sidecarBurst({ env, opts, progress, mode, file, thread }))
      } catch (err) {
        if (!/daemon (exited at start|not healthy)/.test(err.message)) throw err
        const what = `${mode}${thread ? ' (hand-off thread)' : ''}`
        skippedModes.push({ mode, thread, error: err.message.split('\n')[0] })
        progress.log(`burst: journal mode ${what} skipped, the daemon did not start: ${err.message.split('\n').slice(0, 3).join(' ')}`)
        progress.step(`${what}: skipped`)
      }
    }
  }
  for (const mode of opts.journalModes) records.push(await floorBurst({ env, opts, progress, mode, file }))
  records.push(await redisBurst({ env, opts, progress, file }))
  return { records, fileBytes: FILE_BYTES, keepFinished: KEEP_FINISHED, skippedModes }
}
