#!/usr/bin/env node
// The benchmark matrix of transfer-sidecar (issue #6): the daemon against the curl CLI and
// php-curl, on a real Apache httpd (mod_dav) and a real WebHDFS (MiniDFSCluster) on loopback.
//   1–2. download / upload throughput against file size, with peak RSS and CPU per GiB
//   1c.  the study's falling curve: php-curl RETURNTRANSFER with blocks grown as on Windows (alloc)
//   3.   hand-off cost from PHP, and a PHP endpoint under wrk (hand off vs upload directly)
//   4.   1, 4, 16, 64 concurrent transfers
//   4b.  16 PHP processes handing off at once (burst), per journal mode, against redis LPUSH
//   5.   connection reuse over 1000 small files
// `npm run bench` runs a quick matrix, `npm run bench -- --full` the whole one (options: --help).
// Results: bench/results/<date>/ (quick: …/<date>/quick/): JSON and CSV per section, SVG charts,
// REPORT.md. One module per section in bench/lib/, the PHP side in bench/php/.
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseCli, SECTIONS, USAGE } from './lib/cli.js'
import { cleanup, installCleanupHandlers, interruptedBy } from './lib/cleanup.js'
import { setupEnv } from './lib/env.js'
import { createProgress, formatSeconds } from './lib/progress.js'
import { estimateThroughput, runThroughput, summarizeThroughput, throughputSteps } from './lib/throughput.js'
import { estimateAlloc, requireCompiler, runAlloc, summarizeAlloc } from './lib/alloc.js'
import { estimateConcurrency, runConcurrency, summarizeConcurrency } from './lib/concurrency.js'
import { estimateReuse, runReuse, summarizeReuse } from './lib/reuse.js'
import { estimateHandoff, runHandoff } from './lib/handoff.js'
import { estimateBurst, runBurst } from './lib/burst.js'
import { requireRedis } from './lib/redis.js'
import { estimateWeb, requireWrk, runWeb } from './lib/web.js'
import { writeCharts } from './lib/charts.js'
import { goals, machineInfo, saveResults, today } from './lib/report.js'

const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url))

const SECTION = {
  throughput: { estimate: estimateThroughput, run: runThroughput, summarize: summarizeThroughput },
  alloc: { estimate: estimateAlloc, run: runAlloc, summarize: summarizeAlloc },
  concurrency: { estimate: estimateConcurrency, run: runConcurrency, summarize: summarizeConcurrency },
  reuse: { estimate: estimateReuse, run: runReuse, summarize: summarizeReuse },
  handoff: { estimate: estimateHandoff, run: runHandoff },
  burst: { estimate: estimateBurst, run: runBurst },
  web: { estimate: estimateWeb, run: runWeb }
}

function estimates (opts, sections) {
  const hdfs = sections.includes('throughput') && opts.targets.includes('webhdfs')
  const est = { setup: 3 + (hdfs || (sections.includes('concurrency') && opts.concTargets.includes('webhdfs')) ? 12 : 0) }
  for (const s of sections) est[s] = SECTION[s].estimate(opts)
  return est
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
  const sections = SECTIONS.filter((s) => opts.sections.includes(s))
  // Fail before the long part, not after it.
  if (sections.includes('web') && !opts.estimateOnly) requireWrk()
  if (sections.includes('alloc') && !opts.estimateOnly) requireCompiler()
  if ((sections.includes('burst') || (sections.includes('handoff') && opts.handoffVariants.some((v) => v.startsWith('redis')))) && !opts.estimateOnly) requireRedis()
  installCleanupHandlers()

  const startedAt = new Date()
  const loadStart = os.loadavg()[0]
  const machine = machineInfo()
  const outDir = opts.out ? path.resolve(opts.out) : path.join(RESULTS_DIR, today(startedAt), ...(opts.preset === 'full' ? [] : [opts.preset]))
  const est = estimates(opts, sections)
  const progress = createProgress(est)
  progress.log(`${opts.preset} matrix: ${sections.join(', ')}; estimated duration ${formatSeconds(progress.total)} ` +
    `(${Object.entries(est).map(([k, v]) => `${k} ${formatSeconds(v)}`).join(', ')})`)
  if (sections.includes('throughput')) {
    progress.log(`throughput: ${throughputSteps(opts)} timed transfers; sizes ${opts.sizes.join(',')} MiB, ${opts.runs} run(s)${opts.runsLarge !== opts.runs ? ` (${opts.runsLarge} from 1000 MiB)` : ''}, targets ${opts.targets.join(',')}, ${opts.directions.join(',')}, competitors ${opts.competitors.join(',')}`)
  }
  if (opts.estimateOnly) return
  progress.log(`machine: ${machine.nproc} CPUs, load average ${loadStart.toFixed(2)}; results ${opts.save ? `to ${path.relative(process.cwd(), outDir) || '.'}` : 'not saved (--no-save)'}`)

  progress.section('setup', 1)
  const env = await setupEnv(opts, progress)
  progress.step('servers up')

  // A failing section is reported and the others still run: a long run is not lost to its last part.
  const results = {}
  const failures = []
  for (const s of sections) {
    try {
      const r = await SECTION[s].run(env, opts, progress)
      results[s] = SECTION[s].summarize ? { ...r, summary: SECTION[s].summarize(r.records) } : r
    } catch (err) {
      if (interruptedBy()) throw err
      failures.push({ section: s, error: err.message })
      progress.log(`section ${s} FAILED: ${err.stack ?? err}`)
    }
  }
  if (env.daemon) await env.daemon.stop() // complete a --cpu-prof profile
  if (opts.cpuProfDir) progress.log(`CPU profile(s) written to ${opts.cpuProfDir}`)

  const seconds = progress.elapsed()
  const loadAvg = { start: loadStart, end: os.loadavg()[0] }
  progress.log(`done in ${formatSeconds(seconds)} (estimated ${formatSeconds(progress.total)}); load average ${loadAvg.start.toFixed(2)} → ${loadAvg.end.toFixed(2)}`)
  for (const g of goals(results)) console.log(`  ${g.met === null ? 'n/a   ' : g.met ? 'met   ' : 'MISSED'}  ${g.goal}: ${g.detail}`)
  if (failures.length) {
    process.exitCode = 1
    console.log(`failed sections: ${failures.map((f) => f.section).join(', ')}`)
  }
  if (!opts.save) return
  const params = { ...opts }
  delete params.help
  const meta = { startedAt: startedAt.toISOString(), seconds, machine, params, loadAvg, failures }
  await fs.mkdir(outDir, { recursive: true })
  const charts = await writeCharts(outDir, results)
  const files = await saveResults(outDir, { meta, results, charts })
  progress.log(`wrote ${[...files, ...charts].length} files to ${path.relative(process.cwd(), outDir)}: ${[...files, ...charts].join(' ')}`)
}

try {
  await main()
} catch (err) {
  if (!interruptedBy()) console.error(`bench failed: ${err.stack ?? err}`)
  process.exitCode = 1
} finally {
  await cleanup()
}
