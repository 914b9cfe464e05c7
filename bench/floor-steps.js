#!/usr/bin/env node
// Where a hand-off's time goes when nothing else runs (issue #18): the hand-off section's
// acked-floor server (bench/lib/floor-server.js: the hand-off's own work with the daemon's
// functions, no job run) with each step timed, PHP's Client::upload() to it one call every 5 ms
// and back to back, per journal mode; beside it the whole call as PHP times it. Each round starts
// a fresh server and warms it with 300 untimed calls; rounds alternate the pace.
//   node bench/floor-steps.js [--calls 600] [--rounds 2]
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { randomFillSync } from 'node:crypto'
import { startFloor } from './lib/floor.js'
import { runPhp } from './lib/php.js'
import { median } from './lib/stats.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/floor-steps.js [--calls 600] [--rounds 2]'
const { values } = toolArgs({ options: { calls: { type: 'string', default: '600' }, rounds: { type: 'string', default: '2' } } }, USAGE)
const WARM_UP = 300
const TARGET = 'files'

const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'floor-steps-'))
const roots = [path.join(dir, 'files')]
await fs.mkdir(roots[0])
const file = path.join(roots[0], 'handoff.bin')
await fs.writeFile(file, randomFillSync(Buffer.alloc(4096)))
const rows = new Map() // "mode, pace" -> { calls: [µs], steps: { name: [µs] } }
try {
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const sync of ['write', 'fsync']) {
      for (const pauseUs of [5000, 0]) {
        const floor = await startFloor({ dir, name: `${round}-${sync}-${pauseUs}`, roots, targets: [TARGET], sync, steps: true })
        const args = { variant: 'acked-floor', socket: floor.socket, file, sidecarTarget: TARGET, remotePrefix: 'floor-steps' }
        let call
        let steps
        try {
          await runPhp('handoff.php', { ...args, count: WARM_UP, pauseUs: 0 })
          await floor.resetSteps()
          call = await runPhp('handoff.php', { ...args, count: Number(values.calls), pauseUs })
        } finally {
          steps = await floor.stop()
        }
        const key = `"${sync}", ${pauseUs ? 'one call every 5 ms' : 'back to back'}`
        const row = rows.get(key) ?? { calls: [], steps: {} }
        row.calls.push(call.medianUs)
        for (const [name, us] of Object.entries(steps)) (row.steps[name] ??= []).push(us)
        rows.set(key, row)
        console.log(`round ${round} ${key}: call median ${call.medianUs.toFixed(0)} µs; steps ${Object.entries(steps).map(([n, us]) => `${n} ${us.toFixed(1)}`).join(', ')}`)
      }
    }
  }
} finally {
  await fs.rm(dir, { recursive: true, force: true })
}
const names = Object.keys([...rows.values()][0].steps)
console.log(`\n# The hand-off's own work, step by step (median µs of the rounds' medians; node ${process.version})\n`)
console.log(`| journal.sync, pace | the call, as PHP times it | ${names.join(' | ')} | the steps together | the rest: the two wake-ups, the socket, PHP |`)
console.log(`|---|---|${names.map(() => '---|').join('')}---|---|`)
for (const [key, row] of rows) {
  const steps = names.map((n) => median(row.steps[n]))
  const sum = steps.reduce((a, b) => a + b, 0)
  const whole = median(row.calls)
  console.log(`| ${key} | ${whole.toFixed(0)} | ${steps.map((x) => x.toFixed(1)).join(' | ')} | ${sum.toFixed(0)} | ${(whole - sum).toFixed(0)} |`)
}
