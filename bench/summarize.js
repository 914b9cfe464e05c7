#!/usr/bin/env node
// Re-summarizes a saved throughput run (throughput.json) with the current bench code and prints
// issue #19's table: per target, direction and size, each sidecar against its peers (median of
// paired ratios), the daemon's main-thread CPU per GiB against curl's, its other threads, and
// peak RSS; then the goals.
//   node bench/summarize.js bench/results/<run>/throughput.json
import fs from 'node:fs'
import { PEERS, summarizeThroughput, throughputTargets } from './lib/throughput.js'
import { GiB, median } from './lib/stats.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/summarize.js bench/results/<run>/throughput.json'
const file = toolArgs({ allowPositionals: true }, USAGE).positionals[0]
if (!file) {
  console.error(USAGE)
  process.exit(2)
}
const { records } = JSON.parse(fs.readFileSync(file, 'utf8'))
const summary = summarizeThroughput(records)
const f2 = (x) => (x === null || x === undefined ? '—' : x.toFixed(2))
const pairs = Object.entries(PEERS).flatMap(([c, peers]) => peers.map(({ peer }) => [c, peer]))
  .filter(([c, peer]) => summary.some((r) => r.competitor === c && r.vsPeers[peer] !== undefined))
const head = ['target', 'direction', 'MiB', ...pairs.map(([c, p]) => `${c} ÷ ${p}`), 'sidecar-none ÷ (curl+fsync)',
  'curl CPU s/GiB', 'sidecar main s/GiB', 'sidecar-none main s/GiB', 'other threads s/GiB (sidecar; -none)', 'peak RSS MiB']
console.log(`| ${head.join(' | ')} |\n|${head.map(() => '---').join('|')}|`)
// Median CPU per GiB of the daemon's other threads, by name, over a competitor's runs at one point.
const threads = (rs) => {
  const names = [...new Set(rs.flatMap((r) => Object.keys(r.threadCpuS ?? {})))]
  return names.map((n) => [n, median(rs.map((r) => (r.threadCpuS?.[n] ?? 0) / (r.bytes / GiB)))])
    .filter(([, v]) => v >= 0.02).map(([n, v]) => `${n.replace('libuv-worker', 'libuv').replace('WorkerThread', 'hashing')} ${v.toFixed(2)}`).join(', ')
}
const points = summary.filter((r) => r.competitor.startsWith('sidecar'))
  .filter((r, i, all) => all.findIndex((o) => o.target === r.target && o.direction === r.direction && o.sizeMiB === r.sizeMiB) === i)
for (const point of points) {
  const at = (c) => summary.find((r) => r.target === point.target && r.direction === point.direction && r.sizeMiB === point.sizeMiB && r.competitor === c)
  const recs = (c) => records.filter((r) => r.target === point.target && r.direction === point.direction && r.sizeMiB === point.sizeMiB && r.competitor === c)
  const [side, none] = [at('sidecar'), at('sidecar-none')]
  console.log(`| ${[point.target, point.direction, point.sizeMiB, ...pairs.map(([c, p]) => f2(at(c)?.vsPeers[p])),
    point.direction === 'download' ? f2(none?.vsCurlFsync) : '—', f2(at('curl')?.cpuSPerGiB), f2(side?.mainCpuSPerGiB), f2(none?.mainCpuSPerGiB),
    `${threads(recs('sidecar'))}; ${threads(recs('sidecar-none'))}`,
    `${side?.rssMiB?.toFixed(1) ?? '—'}; ${none?.rssMiB?.toFixed(1) ?? '—'}`].join(' | ')} |`)
}
console.log('')
for (const g of throughputTargets(summary)) console.log(`${g.met === null ? '  —   ' : g.met ? '  met ' : 'MISSED'}  ${g.goal}: ${g.detail}`)
