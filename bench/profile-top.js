#!/usr/bin/env node
// Top self-time functions of a V8 .cpuprofile (as written by node --cpu-prof), without DevTools.
//   node bench/profile-top.js FILE.cpuprofile [--top 25]
// Self time of a node = the sum of the sampling intervals whose sample landed on it; nodes of the
// same function (same name, file, line) are added up. "by file" groups the same times per source
// file (node internals, dependencies, src/), which is often the quicker read.
import fs from 'node:fs'
import path from 'node:path'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/profile-top.js FILE.cpuprofile [--top 25]'
const { values, positionals } = toolArgs({ allowPositionals: true, options: { top: { type: 'string', default: '25' } } }, USAGE)
if (positionals.length !== 1) {
  console.error(USAGE)
  process.exit(2)
}
const top = Number(values.top)
const profile = JSON.parse(fs.readFileSync(positionals[0], 'utf8'))

// Sample i lasted timeDeltas[i + 1] µs (the delta is recorded at the next sample).
const selfUs = new Map() // node id → µs
for (let i = 0; i < profile.samples.length; i++) {
  const us = profile.timeDeltas[i + 1] ?? 0
  selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + us)
}

function shortUrl (url) {
  if (!url) return ''
  const p = url.replace(/^file:\/\//, '')
  const nm = p.lastIndexOf('node_modules/')
  if (nm >= 0) return p.slice(nm + 'node_modules/'.length)
  const cwd = process.cwd() + path.sep
  return p.startsWith(cwd) ? p.slice(cwd.length) : p
}

const byFunction = new Map()
const byFile = new Map()
let totalUs = 0
for (const node of profile.nodes) {
  const us = selfUs.get(node.id) ?? 0
  if (!us) continue
  totalUs += us
  const { functionName, url, lineNumber } = node.callFrame
  const file = functionName === '(idle)' ? '(idle)' : shortUrl(url) || '(native/vm)'
  const key = `${functionName || '(anonymous)'}  ${file}${url ? `:${lineNumber + 1}` : ''}`
  byFunction.set(key, (byFunction.get(key) ?? 0) + us)
  byFile.set(file, (byFile.get(file) ?? 0) + us)
}

const wallUs = profile.endTime - profile.startTime
const idleUs = [...byFunction].filter(([k]) => k.startsWith('(idle)')).reduce((s, [, us]) => s + us, 0)
console.log(`${positionals[0]}\nprofile ${(wallUs / 1e6).toFixed(2)} s, sampled ${(totalUs / 1e6).toFixed(2)} s, idle ${(idleUs / 1e6).toFixed(2)} s, busy ${((totalUs - idleUs) / 1e6).toFixed(2)} s (main thread)\n`)

function print (title, map) {
  const busy = totalUs - idleUs
  console.log(`${title} (ms self, % of busy)`)
  const rows = [...map].filter(([k]) => !k.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, top)
  for (const [key, us] of rows) {
    console.log(`${(us / 1000).toFixed(0).padStart(8)}  ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${key}`)
  }
  console.log()
}
print('top functions', byFunction)
print('by file', byFile)
