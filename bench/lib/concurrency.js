// Section 4: N transfers at once (1, 4, 16, 64) of one fixed-size file: N curl processes against
// N sidecar jobs on a target whose concurrency is raised to the highest N, once with the default
// digest (sha256, hashed on the daemon's hashing thread) and once with `digest: "none"` (no hashing
// thread; WebHDFS still computes the HDFS checksum there), so that the memory of each is measured.
// Aggregate throughput = N × size / (first start → last end); memory = the peak RSS of a daemon
// started for the point, or the sum of the curls' peaks.
import fs from 'node:fs/promises'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { WIDE, ensureFreeSpace, syncDisks } from './env.js'
import { cpuSeconds, trackPeakRss } from './procfs.js'
import { check, verifyJob, verifyLocalCopy, verifyRemoteCopy } from './verify.js'
import { GiB, MiB, pairedRatio, spread, summarizeBy } from './stats.js'
import { rotate } from './throughput.js'
import { CPU_FLOOR_S } from './curl.js'

const COMPETITORS = ['curl', 'sidecar', 'sidecar-none']
// The sidecar's digest for each of its competitors: its jobs' and its daemon's warm-up's.
const digestOf = (competitor) => competitor === 'sidecar-none' ? 'none' : undefined
const SEED = 'conc-seed.bin'
const EST_MIBPS = { http: 500, webhdfs: 250 }

export function estimateConcurrency (opts) {
  let seconds = 0
  for (const t of opts.concTargets) {
    seconds += opts.concSizeMiB / 300
    for (const n of opts.concurrency) {
      seconds += opts.directions.length * COMPETITORS.length * opts.concRuns * (1.5 + n * opts.concSizeMiB * (1 / EST_MIBPS[t] + 1 / 1500))
    }
  }
  return seconds
}

async function curls (env, { target, direction, n, source }) {
  const t0 = performance.now()
  const results = await Promise.all(Array.from({ length: n }, (_, i) => {
    const timeFile = path.join(env.workDir, `time-conc-${i}.txt`)
    return direction === 'download'
      ? target.curlDownload(SEED, path.join(env.filesDir, 'conc', `curl-${i}.bin`), timeFile)
      : target.curlUpload(source.path, `conc-curl-${i}.bin`, timeFile)
  }))
  const seconds = (performance.now() - t0) / 1000
  const sum = (k) => results.reduce((s, r) => s + r[k], 0)
  const cpuKnown = results.every((r) => r.cpuS !== null && r.cpuS >= CPU_FLOOR_S)
  return { seconds, cpuS: cpuKnown ? sum('cpuS') : null, rssMiB: results.every((r) => r.rssMiB !== null) ? sum('rssMiB') : null }
}

async function sidecarJobs (env, { target, direction, competitor, n }) {
  const daemon = env.daemon
  const peak = trackPeakRss(daemon.pid)
  const cpu0 = cpuSeconds(daemon.pid)
  const t0 = performance.now()
  let jobs, rss
  try {
    const submitted = await Promise.all(Array.from({ length: n }, (_, i) => daemon.submit({
      direction,
      target: target.sidecarName + WIDE,
      local: direction === 'download' ? path.join(env.filesDir, 'conc', `${competitor}-${i}.bin`) : path.join(env.filesDir, 'conc-src.bin'),
      remote: direction === 'download' ? `/${SEED}` : `/conc-${competitor}-${i}.bin`,
      overwrite: true,
      digest: digestOf(competitor)
    })))
    jobs = await Promise.all(submitted.map(({ id }) => daemon.waitEnd(id)))
  } finally {
    rss = peak.stop()
  }
  const seconds = (performance.now() - t0) / 1000
  return { seconds, cpuS: cpuSeconds(daemon.pid) - cpu0, rssMiB: rss.peakKiB / 1024, jobs }
}

async function verify (env, { target, direction, competitor, n, source, jobs }) {
  const hashed = competitor === 'sidecar'
  for (let i = 0; i < n; i++) {
    if (jobs) verifyJob(jobs[i], source, `${competitor} ${direction} ${i}`, { hashed })
    if (direction === 'download') {
      const out = path.join(env.filesDir, 'conc', `${competitor}-${i}.bin`)
      // The daemon hashed every byte it wrote (verifyJob); the other outputs are sampled.
      if (hashed) check((await fs.stat(out)).size === source.bytes, `${out} size`)
      else await verifyLocalCopy(out, source, 'sample')
    } else {
      await verifyRemoteCopy(target, `conc-${competitor}-${i}.bin`, source, 'sample')
    }
  }
  if (hashed) return 'job sha256 + sizes'
  const own = jobs ? 'job sizes, ' : ''
  return own + (direction === 'download' ? 'sizes + samples' : target.name === 'http' ? 'httpd files: sizes + samples' : 'remote sizes')
}

async function clean (env, { target, direction, competitor, n }) {
  if (direction === 'download') {
    await fs.rm(path.join(env.filesDir, 'conc'), { recursive: true, force: true })
    await fs.mkdir(path.join(env.filesDir, 'conc'))
  } else {
    for (let i = 0; i < n; i++) await target.remove(`conc-${competitor}-${i}.bin`)
  }
}

export async function runConcurrency (env, opts, progress) {
  const targets = opts.concTargets.map((t) => env.targets[t])
  const levels = opts.concurrency
  progress.section('concurrency', targets.length * opts.directions.length * levels.length * COMPETITORS.length * opts.concRuns)
  const { idleRssMiB } = await env.startDaemon('concurrency')
  const bytes = opts.concSizeMiB * MiB
  await ensureFreeSpace(env.workDir, bytes * (2 + Math.max(...levels)) + GiB)
  const source = await env.createSource('conc-src.bin', bytes)
  await fs.mkdir(path.join(env.filesDir, 'conc'), { recursive: true })
  const records = []
  try {
    for (const target of targets) {
      if (opts.directions.includes('download')) await target.curlUpload(source.path, SEED)
      for (let run = 1; run <= opts.concRuns; run++) {
        for (const direction of opts.directions) {
          for (const n of levels) {
            for (const competitor of rotate(COMPETITORS, run - 1 + levels.indexOf(n))) {
              syncDisks()
              const point = { target, direction, competitor, n, source }
              // A fresh daemon per point: its peak RSS then belongs to this N, not to a larger one before.
              if (competitor !== 'curl') await env.startDaemon(`concurrency-${n}`, { quiet: true, digest: digestOf(competitor) })
              const r = competitor === 'curl' ? await curls(env, point) : await sidecarJobs(env, point)
              const verified = await verify(env, { ...point, jobs: r.jobs })
              await clean(env, point)
              const record = {
                run,
                target: target.name,
                direction,
                competitor,
                concurrency: n,
                sizeMiB: opts.concSizeMiB,
                seconds: r.seconds,
                aggMiBps: n * opts.concSizeMiB / r.seconds,
                cpuS: r.cpuS,
                cpuSPerGiB: r.cpuS === null ? null : r.cpuS / (n * bytes / GiB),
                rssMiB: r.rssMiB,
                verified
              }
              records.push(record)
              progress.step(`${target.name.padEnd(7)} ${direction.padEnd(8)} ×${String(n).padEnd(3)} ${competitor.padEnd(12)} ` +
                `${record.aggMiBps.toFixed(0).padStart(5)} MiB/s aggregate  ${r.seconds.toFixed(2)} s  cpu ${r.cpuS?.toFixed(2) ?? '—'} s  ` +
                `${competitor === 'curl' ? 'sum of curl' : 'daemon peak'} rss ${r.rssMiB?.toFixed(1) ?? '—'} MiB  ok (${verified})`)
            }
          }
        }
      }
      if (opts.directions.includes('download')) await target.remove(SEED)
    }
  } finally {
    await fs.rm(source.path, { force: true })
  }
  return { records, daemonIdleRssMiB: idleRssMiB }
}

export function summarizeConcurrency (records) {
  return summarizeBy(records, 'concurrency', (mine, curl, competitor) => ({
    aggMiBps: spread(mine.map((r) => r.aggMiBps)),
    vsCurl: competitor === 'curl' ? 1 : pairedRatio(mine, curl, 'aggMiBps')
  }))
}
