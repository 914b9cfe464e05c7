// Sections 1 and 2 of the matrix: download and upload throughput against file size, from httpd
// and WebHDFS, for the curl CLI, php-curl (RETURNTRANSFER, FILE, INFILE) and the sidecar (job
// handed over from PHP, timed until it has ended). Per size the file is made once; within a run
// the competitors go back to back, their order rotating from run to run, so drift hits all alike.
import fs from 'node:fs/promises'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { competitorsFor, runsFor } from './cli.js'
import { CPU_FLOOR_S, HASHERS } from './curl.js'
import { ensureFreeSpace, syncDisks } from './env.js'
import { runPhp } from './php.js'
import { cpuSeconds, threadCpuDelta, threadCpuSeconds, trackPeakRss } from './procfs.js'
import { check, verifyJob, verifyLocalCopy, verifyRemoteCopy } from './verify.js'
import { GiB, MiB, distinct, fittedChange, median, pairedRatio, spread, summarizeBy } from './stats.js'

// For the duration estimate only (MiB/s on this machine kind, see /work/shared/notes/baseline.md).
const EST_MIBPS = { http: 450, webhdfs: 280 }
const EST_OVERHEAD_S = 0.6 // php start, sync, sha256 of the copy, round trips

// The sidecar competitors and the job's `digest` option each runs with (undefined: the target's default, sha256).
const DIGEST = { sidecar: undefined, 'sidecar-none': 'none' }

// The figures of a curl CLI or bash pipeline run (curl.js).
const cliFigures = (c) => ({ seconds: c.ms / 1000, cpuS: c.cpuS, sysS: c.sysS, rssMiB: c.rssMiB })

export const seedName = (sizeMiB) => `seed-${sizeMiB}.bin`
const uploadName = (competitor, sizeMiB) => `up-${competitor}-${sizeMiB}.bin`

// RETURNTRANSFER holds the body, and file_put_contents may need a copy: about 2.2× the file.
const returnTransferLimit = (sizeMiB) => `${Math.ceil(sizeMiB * 2.2 + 128)}M`

export function rotate (items, by) {
  const k = by % items.length
  return [...items.slice(k), ...items.slice(0, k)]
}

export function throughputSteps (opts) {
  const perRun = opts.targets.length * opts.directions.reduce((s, d) => s + competitorsFor(opts, d).length, 0)
  return opts.sizes.reduce((s, size) => s + perRun * runsFor(opts, size), 0)
}

export function estimateThroughput (opts) {
  let seconds = 0
  for (const size of opts.sizes) {
    seconds += size / 600 + opts.targets.reduce((s, t) => s + size / EST_MIBPS[t], 0) // make + seed
    for (const t of opts.targets) {
      for (const d of opts.directions) {
        const n = competitorsFor(opts, d).length * runsFor(opts, size)
        seconds += n * (EST_OVERHEAD_S + size / EST_MIBPS[t] + size / 900) // transfer + writeback + sha256
      }
    }
  }
  return seconds
}

async function fsyncSeconds (file) {
  const fh = await fs.open(file, 'r+')
  try {
    const t0 = performance.now()
    await fh.sync()
    return (performance.now() - t0) / 1000
  } finally {
    await fh.close()
  }
}

// The sidecar's job, handed over and waited for by PHP, with the daemon's CPU (in all and per
// thread: `mainCpuS` is the main thread, which moves the bytes) and peak RSS. `digest` is the
// job's digest option ("none" for the sidecar-none competitor).
async function sidecarFromPhp (env, { target, direction, local, remote, phpEnv, digest }) {
  const daemon = env.daemon
  const peak = trackPeakRss(daemon.pid)
  const cpu0 = cpuSeconds(daemon.pid)
  const threads0 = threadCpuSeconds(daemon.pid)
  let r, rss
  try {
    r = await runPhp('transfer.php', {
      competitor: 'sidecar', direction, local, remote, socket: daemon.socketPath, sidecarTarget: target.sidecarName, ...(digest ? { digest } : {})
    }, { env: phpEnv })
  } finally {
    rss = peak.stop()
  }
  const daemonCpuS = cpuSeconds(daemon.pid) - cpu0
  const threads = threadCpuDelta(threads0, threadCpuSeconds(daemon.pid))
  // The daemon's own view (ms resolution): from accepted to started, and from started to finished.
  const at = (k) => Date.parse(r.job[k] ?? '')
  const jobRunSeconds = (at('finishedAt') - at('startedAt')) / 1000
  const jobQueueSeconds = (at('startedAt') - at('createdAt')) / 1000
  return { seconds: r.seconds, cpuS: daemonCpuS + r.cpuS, daemonCpuS, mainCpuS: threads.main, mainSysS: threads.mainSys, threadCpuS: threads.byName, rssMiB: rss.peakKiB / 1024, rssExact: rss.exact, jobQueueSeconds, jobRunSeconds, job: r.job }
}

// One transfer of `source` by `competitor`; returns the measured figures after verifying it.
// `phpEnv` is added to the environment of the php process of php-curl and sidecar competitors.
export async function transfer (env, { target, direction, competitor, source, sizeMiB, phpEnv }) {
  if (direction === 'download') {
    const out = path.join(env.filesDir, `dl-${competitor}.bin`)
    const remote = seedName(sizeMiB)
    try {
      let r
      if (competitor === 'curl') {
        const c = await target.curlDownload(remote, out)
        r = cliFigures(c)
      } else if (HASHERS[competitor]) {
        const c = await target.curlHashedDownload(competitor, remote, out)
        check(c.sha256 === source.sha256, `curl | tee | ${HASHERS[competitor]}: ${c.sha256}, expected ${source.sha256}`)
        r = cliFigures(c)
      } else if (competitor.startsWith('sidecar')) {
        const digest = DIGEST[competitor]
        r = await sidecarFromPhp(env, { target, direction, local: out, remote: `/${remote}`, phpEnv, digest })
        verifyJob(r.job, source, `${competitor} download`, { hashed: digest !== 'none' })
      } else {
        const memoryLimit = competitor === 'php-returntransfer' ? returnTransferLimit(sizeMiB) : '128M'
        const p = await runPhp('transfer.php', { competitor, direction, local: out, remote: `/${remote}`, target: target.php }, { memoryLimit, env: phpEnv })
        r = { seconds: p.seconds, cpuS: p.cpuS, rssMiB: p.peakRssKiB / 1024, phpMemoryPeakMiB: p.memoryPeakBytes / MiB }
      }
      // The daemon fsyncs a download before its rename; curl does not: time that for the fair figure.
      if (competitor === 'curl') r.fsyncSeconds = await fsyncSeconds(out)
      r.verified = await verifyLocalCopy(out, source)
      return r
    } finally {
      await fs.rm(out, { force: true })
    }
  }

  const remote = uploadName(competitor, sizeMiB)
  try {
    let r
    if (competitor === 'curl') {
      const c = await target.curlUpload(source.path, remote)
      r = cliFigures(c)
    } else if (HASHERS[competitor]) {
      const c = await target.curlHashedUpload(competitor, source.path, remote)
      check(c.sha256 === source.sha256, `${HASHERS[competitor]} beside curl -T: ${c.sha256}, expected ${source.sha256}`)
      r = cliFigures(c)
    } else if (competitor.startsWith('sidecar')) {
      const digest = DIGEST[competitor]
      r = await sidecarFromPhp(env, { target, direction, local: source.path, remote: `/${remote}`, digest })
      verifyJob(r.job, source, `${competitor} upload`, { hashed: digest !== 'none' })
    } else {
      const p = await runPhp('transfer.php', { competitor, direction, local: source.path, remote: `/${remote}`, target: target.php })
      r = { seconds: p.seconds, cpuS: p.cpuS, rssMiB: p.peakRssKiB / 1024, phpMemoryPeakMiB: p.memoryPeakBytes / MiB }
    }
    r.verified = await verifyRemoteCopy(target, remote, source)
    return r
  } finally {
    await target.remove(remote)
  }
}

export async function runThroughput (env, opts, progress) {
  progress.section('throughput', throughputSteps(opts))
  await env.startDaemon('throughput')
  const targets = opts.targets.map((t) => env.targets[t])
  const records = []
  for (const sizeMiB of opts.sizes) {
    const bytes = sizeMiB * MiB
    // Source, two local outputs at most, and on the same disk the remote seed and upload per target.
    await ensureFreeSpace(env.workDir, bytes * (3 + 2 * targets.length) + GiB)
    const source = await env.createSource(`src-${sizeMiB}.bin`, bytes)
    try {
      if (opts.directions.includes('download')) {
        for (const target of targets) {
          await target.curlUpload(source.path, seedName(sizeMiB))
          check(await target.remoteSize(seedName(sizeMiB)) === bytes, `${target.name}:${seedName(sizeMiB)} size after seeding`)
        }
      }
      const runs = runsFor(opts, sizeMiB)
      for (let run = 1; run <= runs; run++) {
        for (const target of targets) {
          for (const direction of opts.directions) {
            for (const competitor of rotate(competitorsFor(opts, direction), run - 1)) {
              syncDisks()
              const r = await transfer(env, { target, direction, competitor, source, sizeMiB })
              const record = {
                run,
                target: target.name,
                direction,
                competitor,
                sizeMiB,
                bytes,
                ...r,
                mibps: sizeMiB / r.seconds,
                cpuSPerGiB: r.cpuS === null || (competitor.startsWith('curl') && r.cpuS < CPU_FLOOR_S) ? null : r.cpuS / (bytes / GiB)
              }
              delete record.job
              if (r.fsyncSeconds !== undefined) record.mibpsWithFsync = sizeMiB / (r.seconds + r.fsyncSeconds)
              records.push(record)
              progress.step(`${String(sizeMiB).padStart(4)} MiB run ${run}/${runs} ${target.name.padEnd(7)} ${direction.padEnd(8)} ${competitor.padEnd(18)} ` +
                `${record.mibps.toFixed(0).padStart(5)} MiB/s  ${r.seconds.toFixed(3)} s  cpu ${r.cpuS?.toFixed(2) ?? '—'} s${r.sysS !== undefined ? ` (sys ${r.sysS.toFixed(2)})` : ''}  ` +
                `rss ${r.rssMiB?.toFixed(1) ?? '—'} MiB${r.mainCpuS !== undefined ? `  main ${r.mainCpuS.toFixed(2)} s (sys ${r.mainSysS.toFixed(2)})  ${Object.entries(r.threadCpuS).filter(([, v]) => v >= 0.01).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}` : ''}${r.jobRunSeconds !== undefined ? `  (job ran ${r.jobRunSeconds.toFixed(3)} s)` : ''}${r.fsyncSeconds !== undefined ? `  +fsync ${r.fsyncSeconds.toFixed(2)} s` : ''}  ok (${r.verified})`)
            }
          }
        }
      }
    } finally {
      await fs.rm(source.path, { force: true })
      for (const target of targets) await target.remove(seedName(sizeMiB)).catch(() => {})
    }
  }
  return { records, daemonIdleRssMiB: env.daemon.idleRssMiB }
}

// Who each sidecar competitor is measured against (issue #19), and the ratio it must reach: the
// sidecar hashing every byte against curl doing the same work (sha256 beside it, and an fsync
// after a download; with the issue's sha256sum, and with OpenSSL's, the stronger one), the sidecar
// with `digest: "none"` against plain curl, its ratio also flat across sizes.
export const PEERS = {
  sidecar: [{ peer: 'curl-sha256', min: 1.0 }, { peer: 'curl-openssl', min: 1.0 }],
  'sidecar-none': [{ peer: 'curl', min: 0.95, flat: 0.05 }]
}

// One row per target, direction, size and competitor; ratios pair each run with curl's, and the
// sidecar's with its peer's.
export function summarizeThroughput (records) {
  return summarizeBy(records, 'sizeMiB', (mine, curl, competitor) => {
    const first = mine[0]
    const runsOf = (c) => records.filter((r) => r.target === first.target && r.direction === first.direction && r.sizeMiB === first.sizeMiB && r.competitor === c)
    const vsPeers = {}
    for (const { peer } of PEERS[competitor] ?? []) {
      const peerRuns = runsOf(peer)
      if (peerRuns.length) vsPeers[peer] = pairedRatio(mine, peerRuns, 'mibps')
    }
    const main = median(mine.map((r) => (r.mainCpuS === undefined ? null : r.mainCpuS / (r.bytes / GiB))))
    const curlCpu = median(curl.map((r) => r.cpuSPerGiB))
    return {
      mibps: spread(mine.map((r) => r.mibps)),
      vsCurl: competitor === 'curl' ? 1 : pairedRatio(mine, curl, 'mibps'),
      // Only the sidecar fsyncs its download: php-curl's times, like curl's, do not include one.
      vsCurlFsync: first.direction === 'download' && competitor.startsWith('sidecar') ? pairedRatio(mine, curl, 'mibps', 'mibpsWithFsync') : null,
      vsPeers,
      // The daemon's main thread (which moves the bytes), and that over curl's CPU for the same transfer.
      mainCpuSPerGiB: main,
      mainVsCurlCpu: main !== null && curlCpu ? main / curlCpu : null
    }
  })
}

const percent = (x) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)} %`

// Issue #19's targets, from the competitors that ran: each sidecar against its PEERS at every size;
// the main thread's CPU per GiB ≤ 1.1× curl's; peak RSS ≤ 80 MiB for one transfer.
export function throughputTargets (summary) {
  const out = []
  for (const [competitor, peers] of Object.entries(PEERS)) {
    const mine = summary.filter((r) => r.competitor === competitor)
    for (const { peer, min, flat } of peers) {
      for (const target of distinct(mine, 'target')) {
        for (const direction of distinct(mine, 'direction')) {
          const rows = mine.filter((r) => r.target === target && r.direction === direction && r.vsPeers[peer] !== undefined && r.vsPeers[peer] !== null)
            .map((r) => ({ sizeMiB: r.sizeMiB, ratio: r.vsPeers[peer] }))
          if (!rows.length) continue
          const below = rows.filter((r) => r.ratio < min)
          out.push({
            goal: `${target} ${direction}: ${competitor} ≥ ${min.toFixed(2)}× ${peer} at every size`,
            met: below.length === 0,
            detail: below.length
              ? `below at ${below.map((r) => `${r.sizeMiB} MiB (${r.ratio.toFixed(2)})`).join(', ')}`
              : `lowest ${Math.min(...rows.map((r) => r.ratio)).toFixed(2)}`
          })
          if (flat && rows.length > 1) {
            const ref = median(rows.map((r) => r.ratio))
            const worst = rows.reduce((w, r) => (Math.abs(r.ratio / ref - 1) > Math.abs(w.ratio / ref - 1) ? r : w), rows[0])
            const dev = worst.ratio / ref - 1
            out.push({
              goal: `${target} ${direction}: ${competitor} ÷ ${peer} flat across sizes (±${flat * 100} % of its median over sizes, ${ref.toFixed(2)})`,
              met: Math.abs(dev) <= flat,
              detail: `furthest: ${worst.sizeMiB} MiB at ${worst.ratio.toFixed(2)} (${(dev * 100).toFixed(0)} %)`
            })
            // The issue's own word: the slope. The line fitted through the ratios, on log size, may
            // change by at most the same fraction from the smallest size to the largest.
            const change = fittedChange(rows.map((r) => ({ size: r.sizeMiB, ratio: r.ratio })))
            if (change !== null) {
              const sizes = rows.map((r) => r.sizeMiB)
              // Beside it, the same fit for two curls of the same run (OpenSSL's hash beside curl ÷
              // plain curl): how far the machine alone moves such a line.
              const reference = fittedChange(summary.filter((r) => r.competitor === 'curl-openssl' && r.target === target && r.direction === direction && r.vsCurl !== null)
                .map((r) => ({ size: r.sizeMiB, ratio: r.vsCurl })))
              out.push({
                goal: `${target} ${direction}: ${competitor} ÷ ${peer} slope across sizes within ±${flat * 100} % (least squares on log size, ${Math.min(...sizes)} → ${Math.max(...sizes)} MiB)`,
                met: Math.abs(change) <= flat,
                detail: `fitted change ${percent(change)}${reference === null ? '' : `; curl-openssl ÷ curl in the same run: ${percent(reference)}`}`
              })
            }
          }
        }
      }
    }
  }
  const sidecar = summary.filter((r) => r.competitor.startsWith('sidecar'))
  const cpuRows = sidecar.filter((r) => r.mainVsCurlCpu !== null)
  if (cpuRows.length) {
    const over = cpuRows.filter((r) => r.mainVsCurlCpu > 1.1)
    out.push({
      goal: 'main thread CPU per GiB ≤ 1.1× curl\'s CPU per GiB for the same transfer',
      met: over.length === 0,
      detail: over.length
        ? `over at ${over.length} of ${cpuRows.length} points, e.g. ${over.slice(0, 4).map((r) => `${r.target} ${r.direction} ${r.competitor} ${r.sizeMiB} MiB ${r.mainVsCurlCpu.toFixed(2)}×`).join(', ')}`
        : `highest ${Math.max(...cpuRows.map((r) => r.mainVsCurlCpu)).toFixed(2)}×`
    })
  }
  if (sidecar.length) {
    const worst = sidecar.reduce((w, r) => (r.rssMiB > w.rssMiB ? r : w))
    out.push({
      goal: 'daemon peak RSS ≤ 80 MiB for one transfer',
      met: worst.rssMiB <= 80,
      detail: `highest ${worst.rssMiB.toFixed(1)} MiB (${worst.target} ${worst.direction} ${worst.competitor} ${worst.sizeMiB} MiB)`
    })
  }
  return out
}
