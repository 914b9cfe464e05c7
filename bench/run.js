#!/usr/bin/env node
// First benchmark of transfer-sidecar: the daemon against the curl CLI, uploading and downloading
// one large file to/from Apache httpd (mod_dav) and WebHDFS (MiniDFSCluster) on loopback.
// Throughput, CPU and the daemon's peak RSS; every transfer is verified. See bench/lib/cli.js for
// the options and bench/lib/report.js for how the figures are defined.
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { parseCli, USAGE } from './lib/cli.js'
import { cleanup, installCleanupHandlers, interruptedBy, onCleanup, onExitKill } from './lib/cleanup.js'
import { createTestFile } from './lib/testfile.js'
import { startTarget } from './lib/targets.js'
import { startSidecar } from './lib/sidecar.js'
import { sampleRss, statusKiB, cpuSeconds } from './lib/procfs.js'
import { summarize, MiB } from './lib/stats.js'
import { machineInfo, tableText, markdown, saveResults, today } from './lib/report.js'
import { performance } from 'node:perf_hooks'

const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url))
const RESULTS_NAME = 'first-bench'
const SEED = 'seed.bin' // the remote object every download reads, uploaded once, untimed
const CURL_REMOTE = 'curl.bin'
const SIDECAR_REMOTE = 'sidecar.bin'

const log = (msg) => console.log(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`)

async function ensureFreeSpace (dir, needBytes) {
  const st = await fs.statfs(dir)
  const free = st.bavail * st.bsize
  if (free < needBytes) {
    throw new Error(`only ${(free / 2 ** 30).toFixed(1)} GiB free in ${dir}, need ${(needBytes / 2 ** 30).toFixed(1)} GiB`)
  }
}

// Flush dirty pages so the writeback of one transfer's output is not billed to the next one.
function syncDisks () {
  spawnSync('sync')
}

async function fileSize (file) {
  return (await fs.stat(file)).size
}

function check (condition, message) {
  if (!condition) throw new Error(`verification failed: ${message}`)
}

// fsync time of a finished curl download, to compare with the daemon, which fsyncs before rename.
async function fsyncMs (file) {
  const fh = await fs.open(file, 'r+')
  try {
    const t0 = performance.now()
    await fh.sync()
    return performance.now() - t0
  } finally {
    await fh.close()
  }
}

// One sidecar job, timed from POST to the end of the long-poll, with RSS and CPU of the daemon.
async function sidecarJob (daemon, job) {
  const sampler = sampleRss(daemon.pid)
  const cpu0 = cpuSeconds(daemon.pid)
  const t0 = performance.now()
  let result, peakKiB
  try {
    const { id } = await daemon.submit(job)
    result = await daemon.waitEnd(id)
  } finally {
    peakKiB = sampler.stop().peakKiB
  }
  const ms = performance.now() - t0
  const cpuS = cpuSeconds(daemon.pid) - cpu0
  if (result.state !== 'succeeded') {
    throw new Error(`sidecar ${job.direction} ${job.remote} ${result.state}: ${JSON.stringify(result.error)}`)
  }
  return { ms, cpuS, rssMiB: peakKiB / 1024, job: result }
}

// The four measurements. Each returns { ms, cpuS, rssMiB, ... } after verifying the transfer.
const MEASURE = {
  async 'upload/curl' ({ target, src, bytes }) {
    const r = await target.curlUpload(src, CURL_REMOTE)
    const size = await target.remoteSize(CURL_REMOTE)
    check(size === bytes, `${target.name}:${CURL_REMOTE} has ${size} bytes, expected ${bytes}`)
    return { ...r, verified: 'remote size' }
  },

  async 'upload/sidecar' ({ target, daemon, src, bytes, sha256 }) {
    const r = await sidecarJob(daemon, {
      direction: 'upload', target: target.sidecarName, local: src, remote: `/${SIDECAR_REMOTE}`, overwrite: true
    })
    check(r.job.sha256 === sha256, `sidecar upload sha256 ${r.job.sha256}, file has ${sha256}`)
    check(r.job.bytes === bytes, `sidecar upload moved ${r.job.bytes} bytes, expected ${bytes}`)
    const size = await target.remoteSize(SIDECAR_REMOTE)
    check(size === bytes, `${target.name}:${SIDECAR_REMOTE} has ${size} bytes, expected ${bytes}`)
    return { ms: r.ms, cpuS: r.cpuS, rssMiB: r.rssMiB, verified: 'sha256 + remote size' }
  },

  async 'download/curl' ({ target, filesDir, bytes }) {
    const out = path.join(filesDir, 'curl-out.bin')
    try {
      const r = await target.curlDownload(SEED, out)
      const size = await fileSize(out)
      check(size === bytes, `curl wrote ${size} bytes, expected ${bytes}`)
      const syncMs = await fsyncMs(out)
      return { ...r, fsyncMs: syncMs, verified: 'size' }
    } finally {
      await fs.rm(out, { force: true })
    }
  },

  async 'download/sidecar' ({ target, daemon, filesDir, bytes, sha256 }) {
    const out = path.join(filesDir, 'sidecar-out.bin')
    try {
      const r = await sidecarJob(daemon, {
        direction: 'download', target: target.sidecarName, local: out, remote: `/${SEED}`, overwrite: true
      })
      check(r.job.sha256 === sha256, `sidecar download sha256 ${r.job.sha256}, file has ${sha256}`)
      const size = await fileSize(out)
      check(size === bytes, `sidecar wrote ${size} bytes, expected ${bytes}`)
      return { ms: r.ms, cpuS: r.cpuS, rssMiB: r.rssMiB, verified: 'sha256 + size' }
    } finally {
      await fs.rm(out, { force: true })
    }
  }
}

async function measure (ctx, { run, target, direction, competitor }) {
  syncDisks()
  const r = await MEASURE[`${direction}/${competitor}`]({ ...ctx, target })
  const seconds = r.ms / 1000
  const record = {
    run,
    target: target.name,
    direction,
    competitor,
    bytes: ctx.bytes,
    seconds,
    mibps: ctx.bytes / MiB / seconds,
    cpuS: r.cpuS,
    rssMiB: r.rssMiB,
    verified: r.verified
  }
  if (r.fsyncMs !== undefined) {
    record.fsyncSeconds = r.fsyncMs / 1000
    record.mibpsWithFsync = ctx.bytes / MiB / ((r.ms + r.fsyncMs) / 1000)
  }
  const extra = [
    r.cpuS === null ? null : `cpu ${r.cpuS.toFixed(2)} s`,
    r.rssMiB === null ? null : `${competitor === 'sidecar' ? 'peak ' : 'max '}rss ${r.rssMiB.toFixed(1)} MiB`,
    r.fsyncMs === undefined ? null : `+fsync ${(r.fsyncMs / 1000).toFixed(2)} s`,
    `ok (${r.verified})`
  ].filter(Boolean).join(', ')
  log(`run ${run}/${ctx.runs} ${target.name.padEnd(7)} ${direction.padEnd(8)} ${competitor.padEnd(7)} ` +
    `${seconds.toFixed(2).padStart(6)} s ${record.mibps.toFixed(0).padStart(5)} MiB/s  ${extra}`)
  return record
}

// Competitors alternate their order from run to run so neither always goes first.
function competitorOrder (run, competitors) {
  return run % 2 === 1 ? competitors : [...competitors].reverse()
}

async function setup (opts) {
  const workDir = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'sidecar-bench-')))
  onCleanup(() => fs.rm(workDir, { recursive: true, force: true }))
  const filesDir = path.join(workDir, 'files')
  await fs.mkdir(filesDir)
  const bytes = opts.sizeMiB * MiB
  // Test file + two download outputs locally, seed + two uploads on each server, some slack.
  await ensureFreeSpace(workDir, bytes * (3 + 3 * opts.targets.length) + 2 ** 30)

  log(`creating ${opts.sizeMiB} MiB test file in ${filesDir}`)
  const src = path.join(filesDir, 'source.bin')
  const sha256 = await createTestFile(src, bytes)
  log(`sha256 ${sha256}`)

  const targets = []
  for (const name of opts.targets) {
    log(`starting ${name} server${name === 'webhdfs' ? ' (first start builds the harness with maven)' : ''}`)
    const target = await startTarget(name, { workDir, hdfsChecksum: opts.hdfsChecksum })
    onCleanup(() => target.stop())
    targets.push(target)
    log(`${name}: ${target.server}`)
  }

  if (opts.cpuProfDir) await fs.mkdir(opts.cpuProfDir, { recursive: true })
  const daemon = await startSidecar({
    workDir,
    roots: [filesDir],
    targets: Object.fromEntries(targets.map((t) => [t.sidecarName, t.sidecarConfig])),
    cpuProfDir: opts.cpuProfDir
  })
  onCleanup(() => daemon.stop())
  onExitKill(() => daemon.killNow())
  const idleRssMiB = statusKiB(daemon.pid, 'VmRSS') / 1024
  log(`daemon pid ${daemon.pid} at ${daemon.base}, idle RSS ${idleRssMiB.toFixed(1)} MiB`)

  if (opts.directions.includes('download')) {
    for (const target of targets) {
      await target.curlUpload(src, SEED)
      check(await target.remoteSize(SEED) === bytes, `${target.name}:${SEED} size after seeding`)
      log(`${target.name}: seeded ${SEED} for the downloads`)
    }
  }
  return { workDir, filesDir, src, sha256, bytes, targets, daemon, idleRssMiB, runs: opts.runs }
}

async function main () {
  let opts
  try {
    opts = parseCli(process.argv.slice(2))
  } catch (err) {
    console.error(`${err.message}\n\n${USAGE}`)
    process.exit(2)
  }
  if (opts.help) {
    console.log(USAGE)
    return
  }
  installCleanupHandlers()
  const startedAt = new Date()
  const loadAtStart = os.loadavg()[0]
  const machine = machineInfo()
  const ctx = await setup(opts)

  const records = []
  for (let run = 1; run <= opts.runs; run++) {
    await ensureFreeSpace(ctx.workDir, 2 * ctx.bytes + 2 ** 30)
    for (const target of ctx.targets) {
      for (const direction of opts.directions) {
        for (const competitor of competitorOrder(run, opts.competitors)) {
          records.push(await measure(ctx, { run, target, direction, competitor }))
        }
      }
    }
  }

  const hwmMiB = statusKiB(ctx.daemon.pid, 'VmHWM') / 1024
  // The machine is shared: other load during the run explains outliers, so it goes in the report.
  const loadAvg = { start: loadAtStart, end: os.loadavg()[0] }
  await ctx.daemon.stop() // before printing, so a --cpu-prof profile is complete
  if (opts.cpuProfDir) log(`CPU profile(s) written to ${opts.cpuProfDir}`)

  const summary = summarize(records)
  console.log(`\n${opts.sizeMiB} MiB, ${opts.runs} runs; daemon idle RSS ${ctx.idleRssMiB.toFixed(1)} MiB, VmHWM at end ${hwmMiB.toFixed(1)} MiB; ` +
    `load average ${loadAvg.start.toFixed(2)} at start, ${loadAvg.end.toFixed(2)} at end (${machine.nproc} CPUs)\n`)
  console.log(tableText(summary))

  if (opts.save) {
    const params = { sizeMiB: opts.sizeMiB, runs: opts.runs, targets: opts.targets, directions: opts.directions, competitors: opts.competitors }
    const report = { startedAt: startedAt.toISOString(), machine, params, sha256: ctx.sha256, idleRssMiB: ctx.idleRssMiB, hwmMiB, loadAvg, summary, records }
    const { jsonFile, mdFile } = await saveResults(path.join(RESULTS_DIR, today(startedAt)), RESULTS_NAME, {
      json: report,
      md: markdown({ ...report, startedAt: startedAt.toISOString() })
    })
    console.log(`\nwrote ${path.relative(process.cwd(), jsonFile)} and ${path.relative(process.cwd(), mdFile)}`)
  }
}

try {
  await main()
} catch (err) {
  if (!interruptedBy()) console.error(`bench failed: ${err.stack ?? err}`)
  process.exitCode = 1
} finally {
  await cleanup()
}
