#!/usr/bin/env node
// The floor of a Node daemon's small upload (bench section "reuse", variant node-put): what a bare
// node process spends to upload each file with nothing else around it: open, fstat and read the
// file on the main thread (as the daemon does), PUT it over node:http with a keep-alive agent,
// `parallel` at once, after `warmUp` untimed PUTs; no job, journal, hashing, metrics or hand-off. Run
// with the daemon's node flags. Argument: {"files": [paths], "url" (httpd collection, ends in /),
// "remotePrefix", "parallel", "warmUp" (as many PUTs as the daemon's warm-up has uploads), "pauseUs"
// (optional: one file at a time, with a pause of so many µs after each)}
// Prints {"seconds", "ok", "failed", "firstErrors", "cpuS", "peakRssKiB"} as bench/php/reuse.php does.
import http from 'node:http'
import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { timedParallel } from './lib/parallel.js'

const { files, url, remotePrefix, parallel, warmUp, pauseUs = 0 } = JSON.parse(process.argv[2])
const agent = new http.Agent({ keepAlive: true, maxSockets: parallel })
const errors = []
let ok = 0

function readSmall (file) {
  const fd = openSync(file, 'r')
  try {
    const buf = Buffer.allocUnsafe(fstatSync(fd).size)
    readSync(fd, buf, 0, buf.length, 0)
    return buf
  } finally {
    closeSync(fd)
  }
}

function put (i) {
  const body = readSmall(files[i])
  const target = `${url}${remotePrefix}-${String(i).padStart(5, '0')}.bin`
  return new Promise((resolve) => {
    const req = http.request(target, { method: 'PUT', agent, headers: { 'content-length': body.length } }, (res) => {
      res.resume()
      res.once('end', () => {
        if (res.statusCode === 201 || res.statusCode === 204) ok++
        else if (errors.length < 5) errors.push(`${target}: HTTP ${res.statusCode}`)
        resolve()
      })
    })
    req.once('error', (err) => {
      if (errors.length < 5) errors.push(`${target}: ${err.message}`)
      resolve()
    })
    req.end(body)
  })
}

// Warmed up first, as the daemon is before the sections (its JIT, the agent's connection): the first
// file PUT to its own name, which the timed loop then writes again.
for (let i = 0; i < warmUp; i++) await put(0)
ok = 0
errors.length = 0
const { seconds, cpuMs } = pauseUs > 0
  ? await timedParallel(files.length, 1, async (i) => { await put(i); await sleep(pauseUs / 1000) })
  : await timedParallel(files.length, parallel, put)
agent.destroy()
const peakRssKiB = Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'latin1'))?.[1] ?? 0)
console.log(JSON.stringify({ seconds, pauseUs, ok, failed: files.length - ok, firstErrors: errors, cpuS: cpuMs / 1000, peakRssKiB }))
