#!/usr/bin/env node
// Re-summarizes a saved throughput run (throughput.json) with the current bench code and prints
// issue #19's table: per target, direction and size, each sidecar against its peers (median of
// paired ratios), the daemon's main-thread CPU per GiB against curl's, its other threads, and
// peak RSS; then the goals.   node bench/summarize.js bench/results/<run>/throughput.json
import fs from 'node:fs'
import { PEERS, summarizeThroughput, throughputTargets } from './lib/throughput.js'
import { GiB, median } from './lib/stats.js'

const file = process.argv[2]
if (!file) {
  console.error('usage: node bench/summarize.js DIR/throughput.json')
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
for (const row of summary.filter((r) => r.competitor === 'sidecar')) {
  const at = (c) => summary.find((r) => r.target === row.target && r.direction === row.direction && r.sizeMiB === row.sizeMiB && r.competitor === c)
  const recs = (c) => records.filter((r) => r.target === row.target && r.direction === row.direction && r.sizeMiB === row.sizeMiB && r.competitor === c)
  const none = at('sidecar-none')
  console.log(`| ${[row.target, row.direction, row.sizeMiB, ...pairs.map(([c, p]) => f2(at(c)?.vsPeers[p])),
    row.direction === 'download' ? f2(none?.vsCurlFsync) : '—', f2(at('curl')?.cpuSPerGiB), f2(row.mainCpuSPerGiB), f2(none?.mainCpuSPerGiB),
    `${threads(recs('sidecar'))}; ${threads(recs('sidecar-none'))}`,
    `${row.rssMiB?.toFixed(1)}; ${none?.rssMiB?.toFixed(1) ?? '—'}`].join(' | ')} |`)
}
console.log('')
for (const g of throughputTargets(summary)) console.log(`${g.met === null ? '  —   ' : g.met ? '  met ' : 'MISSED'}  ${g.goal}: ${g.detail}`)
