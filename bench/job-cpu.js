#!/usr/bin/env node
// What one small job costs the daemon, by thread: N uploads of a small file handed off over the
// line protocol (W in flight, as PHP clients would keep them; --connect-each: a connection per
// job, W at once, as PHP pages without `persistent`), to a real httpd (`--target http`,
// atomicPut) or a `file` target, timed until the daemon has no job left unfinished. Per job: the
// daemon's CPU (whole, main thread, its kernel share, the other threads by name), its GC pauses
// (the daemon's own nodejs_gc_duration_seconds, which moves far less from run to run than CPU
// figures on a shared machine; and the round's count of scavenges and full collections) and the
// hand-off's acknowledgement time; the daemon's peak RSS.
// The daemon runs with the bin's node flags. Round 0 warms it up; every round prints one JSON line.
// To compare two checkouts, run it from each in turn, a few times over (the spread between two
// identical runs here is ±20 %).
//   node bench/job-cpu.js [--jobs 2000] [--rounds 2] [--window 16] [--sync write|fsync]
//                         [--target http|file] [--size 4096] [--keep-finished 1000] [--httpd-dir DIR]
//                         [--log-level warn] [--node-flag FLAG ...]
//                         [--connect-each] [--handoff] [--pause-ms N] [--cpu-prof DIR [--cpu-prof-interval US]]
//                         [--strace] [--perf FILE]
// --handoff hands off on a socket of handoff.listen (the hand-off thread) instead of one of listen.
// --pause-ms N: N ms after each answer before the next line (with --window 1: paced hand-offs).
// --node-flag adds a node/V8 flag to the production ones, to try one against them.
// --strace: the system calls of the last round, every thread, counted (strace -c -f, attached to the
// daemon; it slows the daemon down, so that round's other figures do not count). --perf FILE: that
// round sampled by `perf record -g` into FILE, every thread (`perf report -i FILE --sort comm`).
// --httpd-dir puts httpd's files elsewhere (e.g. a tmpfs), as a remote server's would be: on one
// disk, a journal sync in "fsync" mode also commits what httpd wrote since the last one.
import { spawn } from 'node:child_process'
import { startSmallJobs } from './lib/small-jobs.js'
import { handOffAndWait } from './lib/line-client.js'
import { statusKiB, threadCpuDelta, threadCpuSeconds } from './lib/procfs.js'
import { median } from './lib/stats.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = `usage: node bench/job-cpu.js [--jobs 2000] [--rounds 2] [--window 16] [--sync write|fsync]
                             [--target http|file] [--size 4096] [--keep-finished 1000] [--httpd-dir DIR]
                             [--log-level warn] [--node-flag FLAG ...]
                             [--connect-each] [--handoff] [--pause-ms N] [--cpu-prof DIR [--cpu-prof-interval US]]
                             [--strace] [--perf FILE]`
const { values: o } = toolArgs({
  options: {
    jobs: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '2' },
    window: { type: 'string', default: '16' },
    sync: { type: 'string', default: 'write' },
    target: { type: 'string', default: 'http' },
    size: { type: 'string', default: '4096' },
    'httpd-dir': { type: 'string' },
    'keep-finished': { type: 'string', default: '1000' },
    'log-level': { type: 'string', default: 'warn' },
    'node-flag': { type: 'string', multiple: true, default: [] },
    'connect-each': { type: 'boolean', default: false },
    handoff: { type: 'boolean', default: false },
    'pause-ms': { type: 'string', default: '0' },
    'cpu-prof': { type: 'string' },
    'cpu-prof-interval': { type: 'string' },
    strace: { type: 'boolean', default: false },
    perf: { type: 'string' }
  }
}, USAGE)
const N = Number(o.jobs)
const W = Number(o.window)
if (!['http', 'file'].includes(o.target) || !['write', 'fsync'].includes(o.sync) || !(N > 0) || !(W > 0)) {
  console.error(USAGE)
  process.exit(2)
}

const { paths, daemon, socket, stop } = await startSmallJobs({
  name: 'job-cpu',
  count: N,
  size: Number(o.size),
  target: o.target,
  httpdDir: o['httpd-dir'],
  handoff: o.handoff,
  sidecar: {
    cpuProfDir: o['cpu-prof'],
    cpuProfIntervalUs: o['cpu-prof-interval'],
    nodeFlags: o['node-flag'],
    extra: { journal: { sync: o.sync }, queue: { keepFinished: Number(o['keep-finished']) }, logLevel: o['log-level'] }
  }
})

try {
  for (let round = 0; round <= Number(o.rounds); round++) {
    const tracer = round === Number(o.rounds) ? await attachTracer(daemon.pid) : null
    const gc0 = await daemon.metric('nodejs_gc_duration_seconds_sum')
    const scavenges0 = await daemon.metric('nodejs_gc_duration_seconds_count', 'kind="minor"')
    const full0 = await daemon.metric('nodejs_gc_duration_seconds_count', 'kind="major"')
    const threads0 = threadCpuSeconds(daemon.pid)
    const t0 = performance.now()
    // N jobs over one connection, W unanswered at most (--connect-each: a connection per job, W at
    // once), then until the daemon has none left unfinished.
    const { acks } = await handOffAndWait(daemon, socket, {
      each: o['connect-each'],
      count: N,
      window: W,
      job: (i) => ({ direction: 'upload', target: 't', local: paths[i], remote: `/job-cpu/r${round}/f${i}`, overwrite: true }),
      pauseMs: Number(o['pause-ms'])
    })
    await tracer?.stop()
    const seconds = (performance.now() - t0) / 1000
    const threads = threadCpuDelta(threads0, threadCpuSeconds(daemon.pid))
    const gc = await daemon.metric('nodejs_gc_duration_seconds_sum') - gc0
    const scavenges = await daemon.metric('nodejs_gc_duration_seconds_count', 'kind="minor"') - scavenges0
    const full = await daemon.metric('nodejs_gc_duration_seconds_count', 'kind="major"') - full0
    const perJob = (s) => +(s * 1000 / N).toFixed(3) // ms
    const others = Object.values(threads.byName).reduce((a, b) => a + b, 0)
    acks.sort((a, b) => a - b)
    console.log(JSON.stringify({
      round: round === 0 ? 'warm-up' : round,
      jobs: N,
      window: W,
      connectEach: o['connect-each'],
      handoff: o.handoff,
      sync: o.sync,
      target: o.target,
      jobsPerSecond: Math.round(N / seconds),
      cpuMsPerJob: perJob(threads.main + others),
      mainMsPerJob: perJob(threads.main),
      mainSysMsPerJob: perJob(threads.mainSys),
      threadsMsPerJob: Object.fromEntries(Object.entries(threads.byName).filter(([, s]) => s > 0).map(([name, s]) => [name, perJob(s)])),
      gcPauseMsPerJob: perJob(gc),
      scavenges,
      fullGcs: full,
      ackMedianUs: Math.round(median(acks)),
      ackP90Us: Math.round(acks[Math.floor(acks.length * 0.9)]),
      peakRssMiB: +(statusKiB(daemon.pid, 'VmHWM') / 1024).toFixed(1)
    }))
  }
} finally {
  await stop()
}

// --strace / --perf: a tracer attached to the daemon, every thread, until stop() (SIGINT: strace
// then prints its counts, perf writes its file).
async function attachTracer (pid) {
  const argv = o.strace
    ? ['strace', ['-f', '-c', '-S', 'calls', '-p', String(pid)]]
    : o.perf ? ['perf', ['record', '-g', '-F', '2000', '-o', o.perf, '-p', String(pid)]] : null
  if (!argv) return null
  const child = spawn(...argv, { stdio: ['ignore', 'inherit', 'pipe'] })
  let err = ''
  child.stderr.setEncoding('utf8').on('data', (d) => { err += d })
  const exited = new Promise((resolve) => child.once('close', resolve))
  // Attached once it says so (strace) or after a moment (perf says nothing until it stops).
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 1000))])
  if (child.exitCode !== null) throw new Error(`${argv[0]} could not attach: ${err.trim()}`)
  return {
    async stop () {
      child.kill('SIGINT')
      await exited
      // strace's table comes on stderr, among its attach/detach lines.
      const table = err.split('\n').filter((l) => !/^strace: Process \d+ (attached|detached)/.test(l)).join('\n').trim()
      if (table) console.log(table)
    }
  }
}
