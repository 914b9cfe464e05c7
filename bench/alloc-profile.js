#!/usr/bin/env node
// Where the daemon's heap allocations come from, per small job: V8's sampling heap profiler,
// through the daemon's inspector, over N uploads handed off on the line protocol (as
// bench/job-cpu.js does), with the objects that the young and old generation's collections freed
// counted too (what the scavenges and the GC threads pay for). Round 0 warms the daemon up
// unprofiled; round 1 is sampled. Prints the bytes a job allocates (the sample's total / N, an
// estimate: one sample per --interval bytes on average), by function, and by the nearest frame in
// the daemon's own code (src/) on each allocation's stack, which names the step of a job that
// asked for it. --out FILE keeps the raw profile (.heapprofile, for Chrome's DevTools).
//   node bench/alloc-profile.js [--jobs 2000] [--window 1] [--sync write|fsync] [--target http|file]
//                               [--size 4096] [--interval 256] [--top 25] [--out FILE]
import fs from 'node:fs/promises'
import { startSmallJobs } from './lib/small-jobs.js'
import { handOffAndWait } from './lib/line-client.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = `usage: node bench/alloc-profile.js [--jobs 2000] [--window 1] [--sync write|fsync] [--target http|file]
                                  [--size 4096] [--interval 256] [--top 25] [--out FILE]`
const { values: o } = toolArgs({
  options: {
    jobs: { type: 'string', default: '2000' },
    window: { type: 'string', default: '1' },
    sync: { type: 'string', default: 'write' },
    target: { type: 'string', default: 'http' },
    size: { type: 'string', default: '4096' },
    interval: { type: 'string', default: '256' },
    top: { type: 'string', default: '25' },
    out: { type: 'string' }
  }
}, USAGE)
const N = Number(o.jobs)
if (!['http', 'file'].includes(o.target) || !['write', 'fsync'].includes(o.sync) || !(N > 0) || !(Number(o.window) > 0)) {
  console.error(USAGE)
  process.exit(2)
}

const { paths, daemon, socket, stop } = await startSmallJobs({
  name: 'alloc-profile',
  count: N,
  size: Number(o.size),
  target: o.target,
  sidecar: { nodeFlags: ['--inspect=127.0.0.1:0'], extra: { journal: { sync: o.sync } } }
})

try {
  const inspector = await connectInspector(daemon)
  const round = (r) => handOffAndWait(daemon, socket, {
    count: N,
    window: Number(o.window),
    job: (i) => ({ direction: 'upload', target: 't', local: paths[i], remote: `/alloc/r${r}/f${i}`, overwrite: true })
  })
  await round(0)
  await inspector.call('HeapProfiler.enable')
  await inspector.call('HeapProfiler.startSampling', {
    samplingInterval: Number(o.interval),
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true
  })
  await round(1)
  const { profile } = await inspector.call('HeapProfiler.stopSampling')
  inspector.close()
  if (o.out) await fs.writeFile(o.out, JSON.stringify(profile))
  report(profile, N, Number(o.top))
} finally {
  await stop()
}

// The daemon's inspector, found by the URL it printed, as a call(method, params) → result.
async function connectInspector (daemon) {
  let url
  for (let i = 0; i < 100 && !(url = /ws:\/\/\S+/.exec(daemon.outputTail())?.[0]); i++) await new Promise((resolve) => setTimeout(resolve, 20))
  if (!url) throw new Error(`the daemon printed no inspector URL:\n${daemon.outputTail()}`)
  const ws = new WebSocket(url)
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error(`cannot connect to ${url}`)) })
  const waiting = new Map()
  let next = 0
  ws.onmessage = ({ data }) => {
    const msg = JSON.parse(data)
    const w = waiting.get(msg.id)
    if (!w) return
    waiting.delete(msg.id)
    if (msg.error) w.reject(new Error(`${w.method}: ${msg.error.message}`))
    else w.resolve(msg.result)
  }
  return {
    call: (method, params = {}) => new Promise((resolve, reject) => {
      const id = ++next
      waiting.set(id, { resolve, reject, method })
      ws.send(JSON.stringify({ id, method, params }))
    }),
    close: () => ws.close()
  }
}

function report (profile, jobs, top) {
  const byFunction = new Map()
  const byOwnFrame = new Map()
  let total = 0
  const where = (f) => `${f.functionName || '(anonymous)'}  ${f.url ? f.url.replace(/^.*?\/(src|node_modules)\//, '$1/') : '(native/vm)'}${f.url ? ':' + (f.lineNumber + 1) : ''}`
  const walk = (node, own) => {
    const f = node.callFrame
    const mine = f.url.includes('/src/') && !f.url.includes('node_modules') ? where(f) : own
    if (node.selfSize) {
      total += node.selfSize
      const k = where(f)
      byFunction.set(k, (byFunction.get(k) ?? 0) + node.selfSize)
      const m = mine ?? '(no src/ frame: node internals, timers, sockets)'
      byOwnFrame.set(m, (byOwnFrame.get(m) ?? 0) + node.selfSize)
    }
    for (const child of node.children) walk(child, mine)
  }
  walk(profile.head, null)
  const perJob = (b) => (b / jobs / 1024).toFixed(2).padStart(8)
  const list = (title, map) => {
    console.log(`\n${title} (KiB a job, % of all)`)
    for (const [k, b] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${perJob(b)}  ${(100 * b / total).toFixed(1).padStart(5)}%  ${k}`)
  }
  console.log(`sampled allocations: ${(total / jobs / 1024).toFixed(1)} KiB a job over ${jobs} jobs (${(total / 2 ** 20).toFixed(1)} MiB)`)
  list('by function', byFunction)
  list('by the nearest src/ frame on the stack', byOwnFrame)
}
