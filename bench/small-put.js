#!/usr/bin/env node
// What a small upload's body costs in a bare node process, by the way it is written: N PUTs of a
// small file to a real httpd over a keep-alive agent, P at once, with nothing else around them (no
// hand-off, job, journal or hash). Variants, run in rotating order, each round on the same files:
//   end       http.request() then req.end(body): node's own floor
//   sink-end  the daemon's way for a file of at most 64 KiB: sendSmallFile() (one read(2), one
//             end(chunk)) into requestSink(), the sink the daemon's uploads write to
//   pipeline  the daemon's way for larger files: stream/promises.pipeline(fileSource(), requestSink())
//   raw       the daemon's way for a file of at most 64 KiB since small-put.js: sendSmallFile() into
//             requestSink() of src/backends/small-put.js's request (no node:http), its own
//             kept-alive connections
// Per variant and round: the process's CPU per request (all threads), requests/s, and the bytes V8
// allocated and promoted per request (from --trace-gc-nvp, in a child process per round).
//   node bench/small-put.js [--requests 3000] [--parallel 4] [--size 4096 (≤ 65536)] [--rounds 3]
// (--child JSON is internal: one round of one variant, in a child process.)
import { spawn } from 'node:child_process'
import { closeSync, fstatSync, openSync, readSync } from 'node:fs'
import fs from 'node:fs/promises'
import { pipeline } from 'node:stream/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { NODE_FLAGS } from './lib/sidecar.js'
import { timedParallel } from './lib/parallel.js'
import { startHttpd } from '../test/harness/httpd.js'
import { createSmallFiles } from './lib/testfile.js'
import { http } from '../src/node-http.js'
import { BufferPool, UPLOAD_MIN_BUFFERS, fileSource, requestSink, sendSmallFile } from '../src/datapath.js'
import { Meter } from '../src/transfer.js'
import { toolArgs } from './lib/tool-args.js'
import { createSmallPut } from '../src/backends/small-put.js'

const VARIANTS = ['end', 'sink-end', 'pipeline', 'raw']
const USAGE = 'usage: node bench/small-put.js [--requests 3000] [--parallel 4] [--size 4096 (≤ 65536)] [--rounds 3]\n(--child JSON is internal: one round of one variant, in a child process.)'
const { values: o } = toolArgs({
  options: {
    requests: { type: 'string', default: '3000' },
    parallel: { type: 'string', default: '4' },
    size: { type: 'string', default: '4096' },
    rounds: { type: 'string', default: '3' },
    child: { type: 'string' } // internal: one round of one variant, as JSON
  }
}, USAGE)

if (o.child) {
  await runRound(JSON.parse(o.child))
} else {
  await main()
}

async function main () {
  const N = Number(o.requests)
  if (!(N > 0) || !(Number(o.parallel) > 0) || !(Number(o.size) >= 0) || Number(o.size) > 64 * 1024) {
    console.error(USAGE)
    process.exit(2)
  }
  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'small-put-'))
  const files = await createSmallFiles(work, N, Number(o.size))
  const httpd = await startHttpd()
  try {
    for (let round = 0; round <= Number(o.rounds); round++) {
      // Round 0 warms httpd up; the order rotates so that no variant always runs first.
      const order = VARIANTS.map((_, k) => VARIANTS[(k + round) % VARIANTS.length])
      for (const variant of order) {
        const result = await child({ variant, files, url: `${httpd.uploadUrl}r${round}-${variant}-`, parallel: Number(o.parallel) })
        if (round > 0) console.log(JSON.stringify({ round, variant, ...result }))
      }
    }
  } finally {
    await httpd.stop()
    await fs.rm(work, { recursive: true, force: true })
  }
}

// One round in a fresh node process under the daemon's flags, its GC traced.
function child (spec) {
  const self = fileURLToPath(import.meta.url)
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [...NODE_FLAGS, '--trace-gc-nvp', self, '--child', JSON.stringify(spec)], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    p.stdout.setEncoding('utf8').on('data', (d) => { out += d })
    p.once('error', reject)
    p.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`round of ${spec.variant} exited with ${code}`))
      let allocated = 0
      let promoted = 0
      let result = null
      for (const line of out.split('\n')) {
        const gc = /GC: (\{.*\})/.exec(line)
        if (gc && result === null) { // the GCs of the timed part only
          const d = JSON.parse(gc[1])
          if (d.gc === 's') {
            allocated += d.allocated ?? 0
            promoted += d.promoted ?? 0
          }
        } else if (line.startsWith('{"done"')) {
          result = JSON.parse(line)
        } else if (line.startsWith('{"start"')) {
          allocated = promoted = 0
        }
      }
      const n = spec.files.length
      resolve({ cpuMsPerRequest: +(result.cpuMs / n).toFixed(3), requestsPerSecond: Math.round(n / result.seconds), allocatedKiBPerRequest: +(allocated / n / 1024).toFixed(1), promotedKiBPerRequest: +(promoted / n / 1024).toFixed(1), failed: result.failed })
    })
  })
}

async function runRound ({ variant, files, url, parallel }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: parallel })
  const raw = createSmallPut(new URL(url))
  let failed = 0

  async function put (i) {
    const fd = openSync(files[i], 'r')
    const size = fstatSync(fd).size
    const pool = BufferPool.forTransfer({ minBuffers: UPLOAD_MIN_BUFFERS })
    try {
      const status = variant === 'raw' ? await viaSmallPut(i, fd, size, pool) : await viaNodeHttp(i, fd, size, pool)
      if (status !== 201 && status !== 204) failed++
    } finally {
      pool.close()
      closeSync(fd)
    }
  }

  // The PUT through node:http; its answer's status.
  async function viaNodeHttp (i, fd, size, pool) {
    const req = http.request(`${url}${i}`, { method: 'PUT', agent, headers: { 'content-length': size } })
    const answered = new Promise((resolve, reject) => req.once('response', resolve).once('error', reject))
    if (variant === 'end') {
      const body = Buffer.allocUnsafe(size)
      readSync(fd, body, 0, size, 0)
      req.end(body)
    } else {
      const sink = requestSink(req, { pool, meter: new Meter(null, { hash: false }) })
      if (variant === 'sink-end') await sendSmallFile(fd, sink, { pool, size })
      else await pipeline(fileSource(fd, { pool, size }), sink)
    }
    const res = await answered
    res.resume()
    await new Promise((resolve) => res.once('end', resolve))
    return res.statusCode
  }

  // The PUT through small-put.js, as the daemon sends a small file; its answer's status.
  async function viaSmallPut (i, fd, size, pool) {
    const { stream, done } = raw.put(new URL(`${url}${i}`), { 'content-length': String(size) })
    await sendSmallFile(fd, requestSink(stream, { pool, meter: new Meter(null, { hash: false }) }), { pool, size })
    return (await done).statusCode
  }

  for (let i = 0; i < Math.min(200, files.length); i++) await put(i) // warm the code up, untimed
  console.log('{"start":true}')
  const { seconds, cpuMs } = await timedParallel(files.length, parallel, put)
  console.log(JSON.stringify({ done: true, seconds, cpuMs, failed }))
  agent.destroy()
  raw.close()
}
