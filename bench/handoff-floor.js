#!/usr/bin/env node
// The floor under an acked hand-off from PHP (issue #18): what a server that does no work at all
// costs, on one keep-alive unix-socket connection as the PHP client uses, paced (one call every
// 5 ms, the process idle in between) and back to back. Two servers answer the same 202 to the same
// request: node's `node:http` (what the daemon serves with) and a bare `net` server writing a fixed
// answer (what a lean protocol could get). Rounds alternate the two.
//   node bench/handoff-floor.js [--calls 300] [--rounds 3]
import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { median } from './lib/stats.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/handoff-floor.js [--calls 300] [--rounds 3]'
const { values } = toolArgs({ options: { calls: { type: 'string', default: '300' }, rounds: { type: 'string', default: '3' } } }, USAGE)
const PHP = fileURLToPath(new URL('./php/handoff-floor.php', import.meta.url))
const BODY = '{"id":"k3Jm5f7Q2xYb9Zc1","state":"queued"}'

// The two servers, each in a process of its own (as the daemon is).
const SERVERS = {
  'node:http': `import http from 'node:http'
    http.createServer((req, res) => { req.resume(); req.on('end', () => {
      res.writeHead(202, { 'content-type': 'application/json', 'content-length': ${BODY.length}, location: '/v1/jobs/x' }); res.end(${JSON.stringify(BODY)}) }) })
      .listen(process.argv[1], () => process.send('ready'))`,
  'bare net': `import net from 'node:net'
    const answer = 'HTTP/1.1 202 Accepted\\r\\ncontent-type: application/json\\r\\ncontent-length: ${BODY.length}\\r\\n\\r\\n' + ${JSON.stringify(BODY)}
    net.createServer((s) => s.on('data', () => s.write(answer))).listen(process.argv[1], () => process.send('ready'))`
}

async function start (name, socket) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', SERVERS[name], socket], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  await new Promise((resolve, reject) => { child.once('message', resolve); child.once('exit', (code) => reject(new Error(`${name} server exited ${code}`))) })
  return child
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'handoff-floor-'))
const results = {}
try {
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const name of Object.keys(SERVERS)) {
      const socket = path.join(dir, `${round}-${name.replace(/\W/g, '')}.sock`)
      const child = await start(name, socket)
      try {
        for (const [mode, pauseUs] of [['paced', 5000], ['back to back', 0]]) {
          const out = JSON.parse(execFileSync('php', [PHP, socket, values.calls, String(pauseUs)], { encoding: 'utf8' }))
          ;(results[`${name}, ${mode}`] ??= []).push(out.median)
          console.log(`round ${round} ${name.padEnd(9)} ${mode.padEnd(12)} median ${out.median.toFixed(0)} µs, p90 ${out.p90.toFixed(0)} µs`)
        }
      } finally {
        child.kill()
      }
    }
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
console.log('\nmedian of the rounds\' medians:')
for (const [k, v] of Object.entries(results)) console.log(`  ${k.padEnd(24)} ${median(v).toFixed(0)} µs`)
