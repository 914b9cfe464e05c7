#!/usr/bin/env node
// The daemon's memory through a burst of small jobs and their drain (issue #18: "the daemon's
// RSS bounded by queue.keepFinished"): N uploads of one 4 KiB file to a `file` target, handed off
// over the line protocol on C connections with W unanswered each, then drained. Every second it
// prints the daemon's RSS, V8's heap (used and total, from the daemon's own /metrics) and the jobs
// left unfinished; at the end one SUMMARY line: the peak RSS (VmHWM), the RSS once idle, the
// daemon's CPU and GC pauses per job. Queued jobs are held in memory (up to `queue.limit`); the
// peak also holds the garbage V8 lets the heap grow by before a full collection.
//   node bench/queue-memory.js [--jobs 100000] [--connections 4] [--window 512] [--sync write|fsync]
//                              [--keep-finished 1000] [--idle-seconds 3] [--node-flag FLAG ...]
//                              [--heap-snapshot DIR] [--handoff] [--quiet]
// --handoff hands off on a socket of handoff.listen (the hand-off thread) instead of one of listen.
// --idle-seconds: how long it watches the daemon once drained (the RSS once idle is its last sample).
// --node-flag adds a node/V8 flag to the production ones (e.g. --heap-growing-percent=50), to try one.
// --heap-snapshot DIR: a heap snapshot of the idle daemon and one once every job is acked (all of
// them queued or running), written to DIR; the live heap of each (V8 collects the garbage before it
// takes one) gives what a queued job holds, a figure that does not move with the GC's timing as the
// peak RSS does; and one once drained, which should hold no more than keepFinished jobs. (The main
// thread's heap only: a hand-off thread's is not in them.)
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startSidecar } from './lib/sidecar.js'
import { handOffLines } from './lib/line-client.js'
import { cpuSeconds, statusKiB } from './lib/procfs.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = `usage: node bench/queue-memory.js [--jobs 100000] [--connections 4] [--window 512] [--sync write|fsync]
                                  [--keep-finished 1000] [--idle-seconds 3] [--node-flag FLAG ...]
                                  [--heap-snapshot DIR] [--handoff] [--quiet]`
const { values: o } = toolArgs({
  options: {
    jobs: { type: 'string', default: '100000' },
    connections: { type: 'string', default: '4' },
    window: { type: 'string', default: '512' },
    sync: { type: 'string', default: 'write' },
    'keep-finished': { type: 'string', default: '1000' },
    'idle-seconds': { type: 'string', default: '3' },
    'node-flag': { type: 'string', multiple: true, default: [] },
    'heap-snapshot': { type: 'string' },
    handoff: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false }
  }
}, USAGE)
const N = Number(o.jobs)
const C = Number(o.connections)
const W = Number(o.window)
if (!(N > 0) || !(C > 0) || !(W > 0) || !['write', 'fsync'].includes(o.sync) || !(Number(o['idle-seconds']) >= 1)) {
  console.error(USAGE)
  process.exit(2)
}

const work = await fs.mkdtemp(path.join(os.tmpdir(), 'queue-memory-'))
const files = path.join(work, 'files')
await fs.mkdir(files)
const source = path.join(files, 'f')
await fs.writeFile(source, Buffer.alloc(4096, 7))
const nodeFlags = [...o['node-flag'], ...(o['heap-snapshot'] ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${path.resolve(o['heap-snapshot'])}`] : [])]
// --handoff: the hand-off thread's socket, where the jobs are handed off.
const handoffSocket = path.join(work, 'handoff.sock')
const daemon = await startSidecar({
  workDir: work,
  roots: [files],
  targets: { t: { type: 'file', dir: path.join(work, 'store') } },
  nodeFlags,
  extra: {
    journal: { sync: o.sync },
    queue: { keepFinished: Number(o['keep-finished']), limit: Math.max(N, 10000) },
    ...(o.handoff && { handoff: { listen: [`unix:${handoffSocket}`] } })
  }
})
const MiB = (kib) => Math.round(kib / 1024)

// A heap snapshot of the daemon (SIGUSR2, see --heapsnapshot-signal), then its live bytes: the sum
// of its nodes' self sizes. The daemon writes it on its main thread: once /healthz answers, it is done.
async function liveHeapBytes () {
  const dir = path.resolve(o['heap-snapshot'])
  const before = new Set(await fs.readdir(dir))
  process.kill(daemon.pid, 'SIGUSR2')
  let file
  while (!file) {
    await sleep(200)
    file = (await fs.readdir(dir)).find((f) => f.endsWith('.heapsnapshot') && !before.has(f))
  }
  await fetch(`${daemon.base}/healthz`).then((r) => r.arrayBuffer())
  const snapshot = JSON.parse(await fs.readFile(path.join(dir, file), 'utf8'))
  const fields = snapshot.snapshot.meta.node_fields
  const self = fields.indexOf('self_size')
  let bytes = 0
  for (let i = self; i < snapshot.nodes.length; i += fields.length) bytes += snapshot.nodes[i]
  return bytes
}
const t0 = performance.now()

async function sample (phase) {
  const [metrics, health] = await Promise.all([
    fetch(`${daemon.base}/metrics`).then((r) => r.text()),
    fetch(`${daemon.base}/healthz`).then((r) => r.json())
  ])
  const gauge = (name) => Math.round(Number(metrics.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1]) / 1048576)
  const s = {
    t: +((performance.now() - t0) / 1000).toFixed(1),
    phase,
    rssMiB: MiB(statusKiB(daemon.pid, 'VmRSS')),
    heapUsedMiB: gauge('nodejs_heap_size_used_bytes'),
    heapTotalMiB: gauge('nodejs_heap_size_total_bytes'),
    unfinished: health.jobs.unfinished
  }
  if (!o.quiet) console.log(JSON.stringify(s))
  return s
}

try {
  const cpu0 = cpuSeconds(daemon.pid)
  const gc0 = await daemon.metric('nodejs_gc_duration_seconds_sum')
  const idleMiB = MiB(statusKiB(daemon.pid, 'VmRSS'))
  if (o['heap-snapshot']) await fs.mkdir(o['heap-snapshot'], { recursive: true })
  const idleHeap = o['heap-snapshot'] ? await liveHeapBytes() : null
  const timer = setInterval(() => sample('burst').catch(() => {}), 1000)
  const shares = Array.from({ length: C }, (_, c) => Math.floor(N / C) + (c < N % C ? 1 : 0))
  try {
    await Promise.all(shares.map((count, c) => handOffLines(o.handoff ? handoffSocket : daemon.socketPath, {
      count,
      window: W,
      job: (i) => ({ direction: 'upload', target: 't', local: source, remote: `/c${c}/f${i}`, overwrite: true })
    })))
  } finally {
    clearInterval(timer)
  }
  const acked = await sample('acked')
  const queuedHeap = o['heap-snapshot'] ? await liveHeapBytes() : null
  const queued = o['heap-snapshot'] ? (await sample('snapshot')).unfinished : null
  let last = acked
  while (last.unfinished > 0) {
    await sleep(1000)
    last = await sample('drain')
  }
  const seconds = (performance.now() - t0) / 1000
  const cpuMsPerJob = (cpuSeconds(daemon.pid) - cpu0) * 1000 / N
  const gcMsPerJob = (await daemon.metric('nodejs_gc_duration_seconds_sum') - gc0) * 1000 / N
  const peakMiB = MiB(statusKiB(daemon.pid, 'VmHWM'))
  let after
  for (let s = 0; s < Number(o['idle-seconds']); s++) {
    await sleep(1000)
    after = await sample('idle')
  }
  // Once drained: what the main thread still holds (keepFinished jobs, and nothing of the others).
  const drainedHeap = o['heap-snapshot'] ? await liveHeapBytes() : null
  const stored = (await fs.readdir(path.join(work, 'store'), { recursive: true })).filter((f) => f.includes('/f')).length
  console.log('SUMMARY', JSON.stringify({
    jobs: N,
    sync: o.sync,
    handoff: o.handoff,
    keepFinished: Number(o['keep-finished']),
    nodeFlags,
    seconds: +seconds.toFixed(1),
    handOffSeconds: acked.t,
    filesStored: stored,
    idleBeforeMiB: idleMiB,
    peakMiB,
    idleAfterMiB: after.rssMiB,
    heapUsedAfterMiB: after.heapUsedMiB,
    ...(o['heap-snapshot'] && {
      liveHeapIdleMiB: +(idleHeap / 1048576).toFixed(1),
      liveHeapQueuedMiB: +(queuedHeap / 1048576).toFixed(1),
      liveHeapDrainedMiB: +(drainedHeap / 1048576).toFixed(1),
      jobsUnfinishedAtSnapshot: queued,
      liveBytesPerUnfinishedJob: Math.round((queuedHeap - idleHeap) / queued)
    }),
    cpuMsPerJob: +cpuMsPerJob.toFixed(3),
    gcPauseMsPerJob: +gcMsPerJob.toFixed(3)
  }))
} finally {
  await daemon.stop()
  await fs.rm(work, { recursive: true, force: true })
}
