// Section 5: connection reuse. 1000 small files (4 KiB) uploaded to httpd by the sidecar (handed
// over one by one from PHP, or all in one handOffAll() call, then waited for: pooled keep-alive
// connections, `concurrency` jobs at once), and by php-curl with a new handle per file, one reused handle, and curl_multi with as many
// transfers in flight as the sidecar runs (4). Every file is then compared on httpd's disk.
// Once per journal mode (issue #18), each on a fresh daemon, the php-curl variants run beside it
// again, so that every mode's ratio pairs figures measured minutes apart at most. Beside them
// `node-put` (bench/node-put.js): a bare node process reading each file and PUTting it over a
// keep-alive node:http agent, `concurrency` at once: the floor a Node daemon's small job starts
// from, with no job machinery at all. And `sidecar-paced`, `php-new-handle-paced` and `node-put-paced`: one file every
// PAUSE_US (a pause after each), as uploads come from a web page's users, not back to back: on this
// machine the same work costs every process more CPU when it is done in short bursts between idle
// times, so the CPU per file of a paced hand-off is compared with php-curl's paced too.
import fs from 'node:fs/promises'
import path from 'node:path'
import { randomFillSync } from 'node:crypto'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { runPhp } from './php.js'
import { NODE_FLAGS } from './sidecar.js'
import { cpuSeconds } from './procfs.js'
import { check } from './verify.js'
import { distinct, median, pairedRatio, spread } from './stats.js'
import { rotate } from './throughput.js'
import { WARM_UP_UPLOADS } from './env.js'

export const REUSE_VARIANTS = ['sidecar', 'sidecar-thread', 'sidecar-batch', 'php-new-handle', 'php-reused-handle', 'php-multi', 'node-put', 'sidecar-paced', 'php-new-handle-paced', 'node-put-paced']
// The daemon's variants: one hand-off per file (on the API's socket, or on the hand-off thread's:
// handoff.listen, on a daemon of its own), or all in one Client::handOffAll().
const isSidecar = (variant) => variant.startsWith('sidecar')
const FILE_BYTES = 4096
const PARALLEL = 4 // the sidecar's default per-target concurrency
const NODE_PUT = fileURLToPath(new URL('../node-put.js', import.meta.url))
export const isPaced = (variant) => variant.endsWith('-paced')
export const PAUSE_US = 5000 // as the hand-off section's paced calls: one every 5 ms
const PACED_FILES = 400 // the paced variants upload the first 400 files (~3 s each)
export const pacedFiles = (opts) => Math.min(opts.reuseFiles, PACED_FILES)

export const estimateReuse = (opts) => opts.journalModes.length * (3 + opts.reuseRuns * (2 + opts.reuseFiles * (0.004 + 0.003 + 0.0015 + 0.001 + 0.001 + 0.0005 + 0.0015) + pacedFiles(opts) * 3 * (PAUSE_US / 1e6 + 0.002)))

async function makeFiles (dir, count) {
  await fs.mkdir(dir, { recursive: true })
  const files = []
  for (let i = 0; i < count; i++) {
    const file = path.join(dir, `f-${String(i).padStart(5, '0')}.bin`)
    await fs.writeFile(file, randomFillSync(Buffer.alloc(FILE_BYTES)))
    files.push(file)
  }
  return files
}

// Remote name of file i, as bench/php/reuse.php builds it.
const remoteName = (prefix, i) => `${prefix}-${String(i).padStart(5, '0')}.bin`

export async function runReuse (env, opts, progress) {
  progress.section('reuse', REUSE_VARIANTS.length * opts.reuseRuns * opts.journalModes.length)
  const http = env.targets.http
  const files = await makeFiles(path.join(env.filesDir, 'small'), opts.reuseFiles)
  const records = []
  const skippedModes = []
  try {
    for (const mode of opts.journalModes) {
      // sidecar-thread on a daemon of its own with handoff.listen (whose journal is then the thread's
      // for every submission), the rest on one as configured by default.
      for (const [variants, handoff] of [[REUSE_VARIANTS.filter((v) => v !== 'sidecar-thread'), false], [['sidecar-thread'], true]]) {
        const daemon = await env.startModeDaemon('reuse', mode, { handoff, skipped: skippedModes })
        if (!daemon) break
        records.push(...await reuseRuns({ env, opts, progress, daemon, mode, http, files, variants }))
      }
    }
  } finally {
    await fs.rm(path.join(env.filesDir, 'small'), { recursive: true, force: true })
  }
  return { records, skippedModes }
}

async function reuseRuns ({ opts, progress, daemon, mode, http, files: allFiles, variants }) {
  const records = []
  for (let run = 1; run <= opts.reuseRuns; run++) {
    for (const variant of rotate(variants, run - 1)) {
      const files = isPaced(variant) ? allFiles.slice(0, pacedFiles(opts)) : allFiles
      const pauseUs = isPaced(variant) ? PAUSE_US : 0
      const prefix = `reuse-${variant}-${mode}-${run}`
      const cpu0 = cpuSeconds(daemon.pid)
      // The daemon's GC pauses (its own nodejs_gc_duration_seconds), a figure far less noisy than
      // whole-CPU ones from run to run on a shared machine.
      const gc0 = isSidecar(variant) ? await daemon.metric('nodejs_gc_duration_seconds_sum') : 0
      const r = variant.startsWith('node-put')
        ? await runNodePut({ files, url: http.uploadUrl, remotePrefix: prefix, parallel: PARALLEL, pauseUs, warmUp: WARM_UP_UPLOADS })
        : await runPhp('reuse.php', {
          variant, files, url: http.uploadUrl, remotePrefix: prefix, socket: daemon.socketPath, handoffSocket: daemon.handoffSocket, daemonPid: daemon.pid, protocol: opts.protocol, sidecarTarget: http.sidecarName, parallel: PARALLEL, pauseUs
        })
      // The sidecar's: until its jobs were done (reuse.php), and with the check of each job's end.
      const daemonCpuS = isSidecar(variant) ? r.daemonCpuS : 0
      const checkedDaemonCpuS = isSidecar(variant) ? cpuSeconds(daemon.pid) - cpu0 : 0
      const daemonGcS = isSidecar(variant) ? await daemon.metric('nodejs_gc_duration_seconds_sum') - gc0 : 0
      check(r.failed === 0, `${variant}: ${r.failed} uploads failed: ${r.firstErrors.join('; ')}`)
      for (let i = 0; i < files.length; i++) {
        const [copy, original] = await Promise.all([fs.readFile(http.localPath(remoteName(prefix, i))), fs.readFile(files[i])])
        check(copy.equals(original), `${variant}: ${remoteName(prefix, i)} differs from ${files[i]}`)
      }
      for (let i = 0; i < files.length; i++) await http.remove(remoteName(prefix, i))
      const record = {
        run,
        mode, // the journal mode of the daemon of this run (php-curl: ran beside it)
        variant,
        files: files.length,
        fileBytes: FILE_BYTES,
        seconds: r.seconds,
        filesPerSecond: files.length / r.seconds,
        pauseUs: r.pauseUs ?? 0, // after each file (the -paced variants)
        phpCpuS: r.cpuS,
        daemonCpuS,
        cpuMsPerFile: (r.cpuS + daemonCpuS) * 1000 / files.length,
        phpCpuMsPerFile: r.cpuS * 1000 / files.length,
        daemonCpuMsPerFile: daemonCpuS * 1000 / files.length,
        // Up to Client::wait() on every job in turn (the only figures before this run's change).
        ...(isSidecar(variant) && { checkedSeconds: r.checkedSeconds, checkedDaemonCpuS, daemonGcMsPerFile: daemonGcS * 1000 / files.length }),
        phpPeakRssMiB: r.peakRssKiB / 1024,
        verified: 'every file byte for byte on httpd'
      }
      records.push(record)
      progress.step(`${mode.padEnd(5)} ${variant.padEnd(18)} ${files.length} files in ${r.seconds.toFixed(2)} s (${record.filesPerSecond.toFixed(0)} files/s), ` +
        `cpu ${record.cpuMsPerFile.toFixed(2)} ms/file` + (isSidecar(variant) ? ` (daemon ${record.daemonCpuMsPerFile.toFixed(2)})` : '') +
        (record.checkedSeconds ? ` (with a wait() on each job after: ${record.checkedSeconds.toFixed(2)} s, daemon cpu ${(checkedDaemonCpuS * 1000 / files.length).toFixed(2)} ms/file, of it GC pauses ${record.daemonGcMsPerFile.toFixed(3)} ms/file)` : '') +
        `  ok (${record.verified})`)
    }
  }
  return records
}

// bench/node-put.js under the daemon's node flags; its JSON result as runPhp gives PHP's.
function runNodePut (args) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [...NODE_FLAGS, NODE_PUT, JSON.stringify(args)], { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`node-put: ${err.message} ${stderr.slice(-2000)}`))
      try {
        resolve(JSON.parse(stdout.trim().split('\n').at(-1)))
      } catch {
        reject(new Error(`node-put printed no JSON result: ${stdout.slice(-2000)} ${stderr.slice(-2000)}`))
      }
    })
  })
}

export function summarizeReuse (all) {
  return distinct(all, 'mode').flatMap((mode) => summarizeMode(all.filter((r) => r.mode === mode)))
}

function summarizeMode (records) {
  return distinct(records, 'variant').map((variant) => {
    const mine = records.filter((r) => r.variant === variant)
    // A paced variant against php-curl paced alike.
    const newHandle = records.filter((r) => r.variant === (isPaced(variant) ? 'php-new-handle-paced' : 'php-new-handle'))
    return {
      mode: mine[0].mode,
      variant,
      runs: mine.length,
      files: mine[0].files,
      seconds: spread(mine.map((r) => r.seconds)),
      filesPerSecond: spread(mine.map((r) => r.filesPerSecond)),
      pauseUs: mine[0].pauseUs ?? 0,
      cpuMsPerFile: median(mine.map((r) => r.cpuMsPerFile)),
      // (runs saved before 2026-11-27 have neither)
      ...(mine[0].phpCpuMsPerFile !== undefined && { phpCpuMsPerFile: median(mine.map((r) => r.phpCpuMsPerFile)) }),
      ...(isSidecar(variant) && mine[0].daemonCpuMsPerFile !== undefined && { daemonCpuMsPerFile: median(mine.map((r) => r.daemonCpuMsPerFile)) }),
      ...(mine[0].checkedSeconds && { checkedFilesPerSecond: spread(mine.map((r) => r.files / r.checkedSeconds)) }),
      ...(mine[0].daemonGcMsPerFile !== undefined && { daemonGcMsPerFile: median(mine.map((r) => r.daemonGcMsPerFile)) }),
      vsNewHandle: pairedRatio(mine, newHandle, 'filesPerSecond')
    }
  })
}
