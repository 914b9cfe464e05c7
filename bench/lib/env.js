// What every section works against: a scratch directory (the daemon's only root), the servers
// (Apache httpd mod_dav, MiniDFSCluster), and a daemon started fresh for each section, so that one
// section's job records and memory high-water mark do not spill into the next.
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { onCleanup, onExitKill } from './cleanup.js'
import { startTarget } from './targets.js'
import { startSidecar } from './sidecar.js'
import { startRedis } from './redis.js'
import { createTestFile } from './testfile.js'
import { handOffAndWait } from './line-client.js'
import { statusKiB } from './procfs.js'
import { GiB } from './stats.js'

// Targets whose name ends in -wide allow this many transfers at once (the concurrency section).
export const WIDE = '-wide'
// The warm-up jobs' file: large enough for the hashing thread (src/digest.js, 8 MiB and up).
const WARM_UP_BYTES = 16 << 20
// Then, for the small-job sections (startDaemon's `smallJobs`), small jobs one after the other, so
// that the small-job path is JIT-compiled before they time anything: WARM_UP_SMALL_JOBS over HTTP
// (POST /v1/jobs) and WARM_UP_LINE_JOBS over the line protocol, the PHP client's, one at a time.
// A fresh daemon's first thousands of small jobs cost it more CPU while V8 still compiles their
// code (bench/job-cpu.js --jobs 1000 --rounds 12, 2026-11-28: 0.84–0.94 ms a job for the first
// 1,000, 0.55–0.67 for the next, 0.44–0.55 from ~3,000 on), and a daemon in production has run
// far more; 300 over HTTP alone left the line protocol's code cold.
export const WARM_UP_SMALL_JOBS = 300
export const WARM_UP_LINE_JOBS = 3000
// As many uploads as a daemon's warm-up makes (a bare node PUT is warmed up by as many).
export const WARM_UP_UPLOADS = WARM_UP_SMALL_JOBS + WARM_UP_LINE_JOBS

export async function ensureFreeSpace (dir, needBytes) {
  const st = await fs.statfs(dir)
  const free = st.bavail * st.bsize
  if (free < needBytes) {
    throw new Error(`only ${(free / GiB).toFixed(1)} GiB free in ${dir}, need ${(needBytes / GiB).toFixed(1)} GiB`)
  }
}

// Flushes dirty pages so the writeback of one transfer is not billed to the next one.
export function syncDisks () {
  spawnSync('sync')
}

export async function setupEnv (opts, progress) {
  const workDir = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'sidecar-bench-')))
  onCleanup(() => fs.rm(workDir, { recursive: true, force: true }))
  const filesDir = path.join(workDir, 'files')
  await fs.mkdir(filesDir)

  // The first job of a fresh daemon is several times slower than the next ones (the hashing
  // thread's start, JIT, the first connections and journal writes: +60–180 ms at 10–128 MiB here), and
  // a daemon in production is not fresh. So each daemon gets an untimed upload and download first,
  // and, with `smallJobs`, WARM_UP_SMALL_JOBS small uploads over HTTP, then WARM_UP_LINE_JOBS over
  // the line protocol.
  async function warmUp (d, { smallJobs, digest }) {
    const target = Object.values(targets)[0]
    if (!target) return
    const local = path.join(filesDir, 'warm-up.bin')
    const back = path.join(filesDir, 'warm-up-back.bin')
    await createTestFile(local, WARM_UP_BYTES)
    const small = path.join(filesDir, 'warm-up-small.bin')
    await createTestFile(small, 4096)
    const jobs = [{ direction: 'upload', local, remote: '/warm-up.bin' }, { direction: 'download', local: back, remote: '/warm-up.bin' },
      ...Array.from({ length: smallJobs ? WARM_UP_SMALL_JOBS : 0 }, () => ({ direction: 'upload', local: small, remote: '/warm-up-small.bin' }))]
    try {
      for (const job of jobs) {
        const { id } = await d.submit({ ...job, target: target.sidecarName, overwrite: true, ...(digest && { digest }) })
        const end = await d.waitEnd(id)
        if (end.state !== 'succeeded') throw new Error(`warm-up ${job.direction}: job ${id} ${end.state} ${JSON.stringify(end.error)}`)
      }
      if (smallJobs) {
        // On the socket the section's clients hand off on (the hand-off thread's, if it has one).
        const { last } = await handOffAndWait(d, d.handoffSocket ?? d.socketPath, {
          count: WARM_UP_LINE_JOBS,
          window: 1,
          job: (i) => ({ direction: 'upload', target: target.sidecarName, local: small, remote: `/warm-up-small/s-${i}.bin`, overwrite: true, ...(digest && { digest }) })
        })
        if (last.state !== 'succeeded') throw new Error(`warm-up over the line protocol: job ${last.id} ${last.state} ${JSON.stringify(last.error)}`)
      }
    } finally {
      for (const file of [local, back, small]) await fs.rm(file, { force: true })
      await target.remove('warm-up.bin').catch(() => {})
      await target.remove('warm-up-small.bin').catch(() => {})
      await target.remove('warm-up-small').catch(() => {})
    }
  }

  const needed = new Set()
  if (opts.sections.includes('throughput')) opts.targets.forEach((t) => needed.add(t))
  if (opts.sections.includes('concurrency')) opts.concTargets.forEach((t) => needed.add(t))
  if (['alloc', 'reuse', 'handoff', 'burst', 'web'].some((s) => opts.sections.includes(s))) needed.add('http')

  const targets = {}
  for (const name of ['http', 'webhdfs'].filter((t) => needed.has(t))) {
    progress.log(`starting ${name} server${name === 'webhdfs' ? ' (MiniDFSCluster; the first start builds the harness with maven)' : ''}`)
    const target = await startTarget(name, { workDir, hdfsChecksum: opts.hdfsChecksum })
    onCleanup(() => target.stop())
    targets[name] = target
    progress.log(`${name}: ${target.server}`)
  }

  const maxConcurrency = Math.max(4, ...opts.concurrency)
  const daemonTargets = {}
  for (const t of Object.values(targets)) {
    daemonTargets[t.sidecarName] = t.sidecarConfig // default concurrency (4)
    daemonTargets[t.sidecarName + WIDE] = { ...t.sidecarConfig, concurrency: maxConcurrency }
  }

  let daemon = null
  let count = 0
  let redis = null
  const env = {
    workDir,
    filesDir,
    targets,
    get daemon () { return daemon },

    // Stops the previous daemon and starts a new one with an empty state directory, warmed up.
    // `journal`: the daemon's journal.sync mode ("fsync", the default, is left out of the config);
    // `queue` adds to the queue settings, `targets` adds targets (e.g. a file target); `smallJobs`:
    // the warm-up includes small uploads (the hand-off, burst, reuse and web sections); `digest`:
    // the warm-up's jobs carry it, so that a daemon measured with digest "none" has not started its
    // hashing thread for the warm-up (the concurrency section's sidecar-none); `handoff`: a
    // hand-off thread on a socket of its own (handoff.listen), as `d.handoffSocket`.
    async startDaemon (section, { quiet = false, journal = 'fsync', queue = {}, targets: more = {}, smallJobs = false, digest, handoff = false } = {}) {
      if (daemon) await daemon.stop()
      if (opts.cpuProfDir) await fs.mkdir(opts.cpuProfDir, { recursive: true })
      const name = `sidecar-${++count}-${section}`
      const handoffSocket = handoff ? path.join(workDir, `${name}-handoff.sock`) : null
      const d = await startSidecar({
        workDir,
        name,
        roots: [filesDir],
        targets: { ...daemonTargets, ...more },
        cpuProfDir: opts.cpuProfDir,
        // The hand-off sections queue tens of thousands of small jobs.
        extra: {
          queue: { limit: 1_000_000, ...queue },
          ...(journal !== 'fsync' && { journal: { sync: journal } }),
          ...(handoffSocket && { handoff: { listen: [`unix:${handoffSocket}`] } })
        }
      })
      d.handoffSocket = handoffSocket
      onCleanup(() => d.stop())
      onExitKill(() => d.killNow())
      daemon = d
      d.idleRssMiB = statusKiB(d.pid, 'VmRSS') / 1024
      await warmUp(d, { smallJobs, digest })
      d.journal = journal
      if (!quiet) progress.log(`daemon for ${section} (journal ${journal}): pid ${d.pid}, ${d.socketPath}, idle RSS ${d.idleRssMiB.toFixed(1)} MiB`)
      return d
    },

    // startDaemon for one journal mode of a small-job section (`handoff`: with a hand-off thread),
    // or null when it does not start (e.g. a daemon that does not know journal.sync yet): noted in
    // `skipped`, and the section's other mode still runs.
    async startModeDaemon (section, mode, { handoff = false, skipped }) {
      try {
        return await this.startDaemon(`${section}-${mode}${handoff ? '-thread' : ''}`, { journal: mode, smallJobs: true, handoff })
      } catch (err) {
        skipped.push({ mode, error: err.message.split('\n')[0] })
        progress.log(`${section}: journal mode ${mode} skipped, the daemon did not start: ${err.message.split('\n').slice(0, 3).join(' ')}`)
        return null
      }
    },

    // The redis anchor, started on first use and stopped at the end of the run.
    redis () {
      redis ??= startRedis({ workDir }).then((r) => {
        onCleanup(() => r.stop())
        onExitKill(() => r.killNow())
        progress.log(`redis-server ${r.version} (appendonly yes, appendfsync everysec) on 127.0.0.1:${r.port}, pid ${r.pid}`)
        return r
      })
      return redis
    },

    // A test file in the daemon's root: { path, bytes, sha256 }.
    async createSource (name, bytes) {
      const file = path.join(filesDir, name)
      const sha256 = await createTestFile(file, bytes)
      return { path: file, bytes, sha256 }
    }
  }
  return env
}
