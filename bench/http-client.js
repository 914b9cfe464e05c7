#!/usr/bin/env node
// The daemon's download client (src/backends/http-get.js: pooledGet, reading into the transfer's
// pool buffers) against undici 8 (`undici.request` on its own Agent), side by side in one run: the
// same file from the same Apache httpd (test/harness/httpd.js), into a file through the daemon's
// fileSink (counted, sha256-hashed, written) by stream/promises.pipeline. Each download runs in a
// child process of its own, so that its peak RSS (VmHWM) and CPU are its alone; the variants take
// turns, round after round. Then the two failures that took undici off the data path:
//   - a server that closes the connection while the request body is still being sent;
//   - an unsolicited `100 Continue` before the final answer of a PUT (as Hadoop datanodes send).
//   node bench/http-client.js [--mib 256] [--rounds 5]
// (--child JSON is internal: one download or failure case, in a child process.)
import fs from 'node:fs/promises'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fork } from 'node:child_process'
import { pipeline } from 'node:stream/promises'
import { Readable } from 'node:stream'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/http-client.js [--mib 256] [--rounds 5]\n(--child JSON is internal: one download or failure case, in a child process.)'
const { values } = toolArgs({ options: { mib: { type: 'string', default: '256' }, rounds: { type: 'string', default: '5' }, child: { type: 'string' } } }, USAGE)
const MiB = 2 ** 20
const peakRss = () => Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]) * 1024

if (values.child) {
  const { variant, url, out, port } = JSON.parse(values.child)
  const { BufferPool, fileSink } = await import('../src/datapath.js')
  const { Meter } = await import('../src/transfer.js')
  if (variant === 'close-under-body' || variant === 'interim-put' || variant === 'datanode-put') {
    const undici = await import('undici8')
    // A body larger than the socket buffers, so that undici is still sending when the answer comes.
    const body = Readable.from((function * () { for (let i = 0; i < 256; i++) yield Buffer.alloc(256 * 1024, i) })())
    let outcome
    try {
      const target = variant === 'datanode-put' ? url : `http://127.0.0.1:${port}/x`
      const res = await undici.request(target, { method: 'PUT', body, headers: { 'content-length': String(256 * 256 * 1024) } })
      outcome = `answered ${res.statusCode}`
      await res.body.dump()
    } catch (err) {
      outcome = `rejected: ${err.code ?? err.name}: ${err.message}`
    }
    await new Promise((resolve) => setTimeout(resolve, 500)) // an exception after the answer would come now
    process.send({ outcome })
    process.exit(0)
  }
  const undici = variant === 'undici' ? await import('undici8') : null
  const idleRss = peakRss()
  const pool = BufferPool.forTransfer()
  const meter = new Meter(undefined, { pool })
  const handle = await fs.open(out, 'w')
  const cpu0 = process.cpuUsage()
  const t0 = process.hrtime.bigint()
  if (variant === 'ours') {
    const { pooledGet } = await import('../src/backends/http-get.js')
    const res = await pooledGet(url, { pool })
    await pipeline(res.body, fileSink(handle.fd, { pool, meter }))
  } else {
    const agent = new undici.Agent({ connections: 1 })
    const res = await undici.request(url, { dispatcher: agent })
    await pipeline(res.body, fileSink(handle.fd, { pool, meter }))
    await agent.close()
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const cpu = process.cpuUsage(cpu0)
  await handle.close()
  const { sha256 } = await meter.digest()
  process.send({ seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6, bytes: meter.bytes, sha256, peakRss: peakRss(), idleRss })
  process.exit(0)
}

const child = (args) => new Promise((resolve, reject) => {
  const c = fork(new URL(import.meta.url).pathname, ['--child', JSON.stringify(args)], { execArgv: ['--max-semi-space-size=1'] })
  let result = null
  c.once('message', (m) => { result = m })
  c.once('exit', (code, signal) => result ? resolve({ ...result, code }) : reject(new Error(`child ${args.variant} exited ${code ?? signal} without a result`)))
})
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1] }

const { startHttpd } = await import('../test/harness/httpd.js')
const httpd = await startHttpd()
const work = await fs.mkdtemp(path.join(os.tmpdir(), 'http-client-bench-'))
try {
  const size = Number(values.mib) * MiB
  const file = path.join(httpd.davDir, 'bench.bin')
  const fh = await fs.open(file, 'w')
  const block = Buffer.alloc(MiB)
  for (let i = 0; i < size / MiB; i++) { block.fill(i & 255); await fh.write(block) }
  await fh.close()
  const results = { ours: [], undici: [] }
  for (let r = 0; r < Number(values.rounds); r++) {
    for (const variant of r % 2 ? ['undici', 'ours'] : ['ours', 'undici']) {
      const out = path.join(work, `${variant}.bin`)
      const m = await child({ variant, url: `${httpd.uploadUrl}bench.bin`, out })
      if (m.bytes !== size) throw new Error(`${variant}: ${m.bytes} bytes, expected ${size}`)
      results[variant].push(m)
      await fs.rm(out)
    }
  }
  const sums = new Set(Object.values(results).flat().map((m) => m.sha256))
  if (sums.size !== 1) throw new Error('the variants read different bytes')

  // The failures, against servers that really behave so.
  const failures = []
  for (const [name, behave] of [
    ['server closes the connection while the request body is being sent', (socket) => socket.once('data', () => { socket.write('HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'); socket.destroy() })],
    ['unsolicited 100 Continue, then the final answer after the whole body', (socket) => {
      let got = 0
      socket.once('data', () => socket.write('HTTP/1.1 100 Continue\r\n\r\n'))
      socket.on('data', (d) => { got += d.length; if (got >= 256 * 256 * 1024) socket.end('HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n') })
    }]
  ]) {
    const server = net.createServer((socket) => { socket.on('error', () => {}); behave(socket) })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const m = await child({ variant: name.startsWith('server closes') ? 'close-under-body' : 'interim-put', port: server.address().port }).catch((err) => ({ outcome: `CRASHED: ${err.message}` }))
    failures.push([name, m.outcome])
    server.close()
  }

  // And against a real datanode: WebHDFS CREATE, step 2 (the PUT of the body to the datanode).
  const { startHdfs } = await import('../test/harness/hdfs.js')
  const hdfs = await startHdfs()
  try {
    const create = await fetch(`${hdfs.namenodes[0]}/webhdfs/v1/tmp/bench-undici.bin?op=CREATE&user.name=bench&noredirect=true&overwrite=true`, { method: 'PUT' })
    const { Location } = await create.json()
    const m = await child({ variant: 'datanode-put', url: Location }).catch((err) => ({ outcome: `CRASHED: ${err.message}` }))
    failures.push(['a real Hadoop datanode (MiniDFSCluster 3.4): WebHDFS CREATE step 2, PUT of 64 MiB', m.outcome])
  } finally {
    await hdfs.stop()
  }

  const load = os.loadavg()[0].toFixed(2)
  const row = (v) => {
    const ms = results[v]
    return `| ${v === 'ours' ? 'http-get.js (pooledGet)' : `undici ${JSON.parse(readFileSync(new URL('../node_modules/undici8/package.json', import.meta.url))).version} request()`} | ${median(ms.map((m) => size / MiB / m.seconds)).toFixed(0)} | ${median(ms.map((m) => m.cpuSeconds / (size / 2 ** 30))).toFixed(2)} | ${(median(ms.map((m) => m.idleRss)) / MiB).toFixed(1)} | ${(median(ms.map((m) => m.peakRss)) / MiB).toFixed(1)} |`
  }
  const oursRate = median(results.ours.map((m) => m.seconds))
  const undiciRate = median(results.undici.map((m) => m.seconds))
  console.log([
    `# Download client: http-get.js against undici (node ${process.version}, ${values.mib} MiB from Apache httpd on loopback, ${values.rounds} rounds, medians; 1-min load ${load})`,
    '',
    '| client | MiB/s | CPU s/GiB (the process) | RSS before the download, MiB | peak RSS, MiB |',
    '|---|---|---|---|---|',
    row('ours'),
    row('undici'),
    '',
    `undici ÷ ours, throughput: ${(oursRate / undiciRate).toFixed(3)}; per-round pair ratios: ${results.ours.map((m, i) => (m.seconds / results.undici[i].seconds).toFixed(2)).join(', ')}`,
    '',
    '| failure that took undici off the data path | undici 8 now |',
    '|---|---|',
    ...failures.map(([n, o]) => `| ${n} | ${o} |`)
  ].join('\n'))
} finally {
  await httpd.stop()
  await fs.rm(work, { recursive: true, force: true })
}
