// Load: the daemon as a real child process under volumes PHP can produce, against real servers.
//  1. 100,000 acked hand-offs in a burst from 4 PHP processes over the unix socket, once per
//     journal.sync mode (each a loop of
//     Client::upload()) to a `file` target with a 100-byte file: none lost (every id PHP got back
//     is known to the daemon and succeeded, also in the journal after a kill -9 and restart).
//  2. 50,000 jobs pending behind a stalled target (a TCP proxy in front of httpd that forwards
//     nothing back): the daemon's RSS stays within a bound; past queue.limit a hand-off is answered
//     429 QUEUE_FULL with Retry-After, PHP spools it, and the spooled job is taken once there is room.
//  3. 64 transfers of 32 MiB at once (uploads and downloads, httpd mod_dav and WebHDFS, concurrency
//     64 per target): every file verified by sha256, the daemon's peak RSS within a budget that
//     does not depend on file size.
// The figures (µs per hand-off, calls/s, drain time, RSS, CPU) are printed as table rows at the end.
//
//   RELIABILITY_LONG=1   200,000 jobs in the burst and 100,000 pending instead of 100,000 and 50,000
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { Pool } from 'undici'
import { startHdfs } from './harness/hdfs.js'
import { startHttpd } from './harness/httpd.js'
import { startTcpProxy } from './harness/tcp-proxy.js'
import { tempDir, waitFor } from './helpers/sidecar.js'
import { connectInspector } from './helpers/inspector.js'
import { makeFile } from './helpers/files.js'
import {
  MiB, PRODUCTION_FLAGS, spawnDaemon, runPhp, procMemory, procCpuSeconds, memorySampler, sha256File, percentile, walkFiles, webhdfs, TEMP_NAME
} from './reliability/daemon.js'

const LONG = process.env.RELIABILITY_LONG === '1'
const BURST = LONG ? 200000 : 100000
const PENDING = LONG ? 100000 : 50000
const PHP_PROCS = 4
const LARGE = 64
const LARGE_SIZE = 32 * MiB

let hdfs, httpd, hd
const dirs = []
const daemons = []
const pools = []
const proxies = []
const inspectors = []
const figures = [] // scenario | what was tried | how many times | result

beforeAll(async () => {
  ;[hdfs, httpd] = await Promise.all([startHdfs(), startHttpd()])
  await hdfs.command('mkdir /data www-data 755')
  hd = webhdfs(hdfs.namenodes[0])
})

afterAll(async () => {
  for (const i of inspectors) i.close()
  await Promise.all(daemons.map((d) => d.kill('SIGKILL')))
  await Promise.all([...pools.map((p) => p.close()), ...proxies.map((p) => p.stop())])
  await Promise.all([hdfs?.stop(), httpd?.stop()])
  await Promise.all(dirs.map((d) => fs.rm(d, { recursive: true, force: true })))
  console.log(['reliability.load figures:', '| scenario | what was tried | how many times | result |', '|---|---|---|---|',
    ...figures.map((f) => `| ${f.join(' | ')} |`)].join('\n'))
})

async function dir (prefix) {
  const d = await tempDir(prefix)
  dirs.push(d)
  return d
}

async function start (config, stateDir, { inspect = false } = {}) {
  const logFile = path.join(stateDir, 'daemon.log')
  const d = await spawnDaemon(config, { dir: stateDir, logFile, nodeArgs: [...PRODUCTION_FLAGS, ...(inspect ? ['--inspect=127.0.0.1:0'] : [])] })
  const inspector = inspect ? await connectInspector(() => readFileSync(logFile, 'utf8')) : null
  if (inspector) inspectors.push(inspector)
  daemons.push(d)
  const pool = new Pool('http://localhost', { socketPath: config.listen[0].slice(5), connections: 8 })
  pools.push(pool)
  const call = async (method, p, body) => {
    const res = await pool.request({
      method,
      path: p,
      headers: body ? { 'content-type': 'application/json' } : {},
      body: body ? JSON.stringify(body) : undefined,
      headersTimeout: 320000
    })
    return { status: res.statusCode, headers: res.headers, json: await res.body.json() }
  }
  return { d, call, inspector, health: async () => (await call('GET', '/healthz')).json.jobs }
}

// Runs php-burst.php in `procs` processes at once, `count` hand-offs each.
async function phpBurst ({ socket, target, local, count, procs, out }) {
  const t0 = process.hrtime.bigint()
  const runs = await Promise.all(Array.from({ length: procs }, (_, k) => runPhp('php-burst.php', [
    `--socket=${socket}`, `--target=${target}`, `--local=${local}`, `--prefix=/burst/${k}`, `--count=${count}`,
    `--ids=${path.join(out, `ids-${k}`)}`, `--times=${path.join(out, `times-${k}`)}`
  ])))
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  for (const r of runs) if (r.code !== 0) throw new Error(`php-burst.php exited ${r.code}: ${r.stderr}`)
  const summaries = runs.map((r) => JSON.parse(r.stdout.trim().split('\n').pop()))
  const read = async (name) => (await Promise.all(Array.from({ length: procs }, (_, k) => fs.readFile(path.join(out, `${name}-${k}`), 'utf8'))))
    .flatMap((t) => t.split('\n').filter(Boolean))
  const ids = await read('ids')
  const times = (await read('times')).map(Number).sort((a, b) => a - b)
  return { seconds, summaries, ids, times }
}

// GET /v1/jobs/{id} for every id, `concurrency` at a time; counts the states seen.
async function statesOf (call, ids, concurrency = 16) {
  const states = {}
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < ids.length) {
      const r = await call('GET', `/v1/jobs/${ids[next++]}`)
      const key = r.status === 200 ? r.json.state : `HTTP ${r.status} ${r.json?.error?.code}`
      states[key] = (states[key] ?? 0) + 1
    }
  }))
  return states
}

const mib = (bytes) => `${(bytes / MiB).toFixed(0)} MiB`

describe('load', () => {
  it.each(['fsync', 'write'])(`${BURST} acked hand-offs from ${PHP_PROCS} PHP processes in a burst, journal.sync %s: none lost, all succeed, all in the journal after kill -9`, async (sync) => {
    const [root, stateDir, store, out] = await Promise.all(['burst-root-', 'burst-state-', 'burst-store-', 'burst-out-'].map(dir))
    const local = path.join(root, 'small.txt')
    await fs.writeFile(local, 'x'.repeat(99) + '\n')
    const socket = path.join(stateDir, 'sidecar.sock')
    // Every job of the burst may be unfinished at once, and all must stay queryable afterwards.
    const config = {
      listen: [`unix:${socket}`],
      stateDir,
      roots: [root],
      queue: { limit: 2 * BURST, retentionSeconds: 86400, keepFinished: BURST }, // every id stays queryable
      journal: { sync },
      logLevel: 'info',
      targets: { store: { type: 'file', dir: store, concurrency: 16 } }
    }
    const { d, call, health, inspector } = await start(config, stateDir, { inspect: true })
    const mem = memorySampler(d.pid, 250)
    const t0 = Date.now()
    const burst = await phpBurst({ socket, target: 'store', local, count: BURST / PHP_PROCS, procs: PHP_PROCS, out })
    const burstDone = Date.now()
    expect(burst.summaries.flatMap((s) => s.errors)).toEqual([])
    expect(burst.ids).toHaveLength(BURST)
    expect(new Set(burst.ids).size).toBe(BURST)
    const atBurstEnd = await health()
    await waitFor(async () => (await health()).unfinished === 0, { timeoutMs: 900000, intervalMs: 250 })
    const drained = Date.now()
    const peak = mem.stop()
    const cpu = procCpuSeconds(d.pid)
    // What the daemon holds once the burst is done, after full collections: its peak depends on
    // when V8 collects (node 24 lets the heap grow to ~3× what is reachable in a burst).
    const held = await inspector.collectedMemory()
    const heldRss = procMemory(d.pid).rss

    const t1 = Date.now()
    expect(await statesOf(call, burst.ids)).toEqual({ succeeded: BURST })
    const verifySeconds = (Date.now() - t1) / 1000
    const stored = await walkFiles(store)
    expect(stored).toHaveLength(BURST)
    expect(stored.filter((n) => TEMP_NAME.test(path.basename(n)))).toEqual([])
    const journalBefore = (await fs.stat(path.join(stateDir, 'jobs', 'jobs.journal'))).size

    // The journal holds them all: after kill -9 the restart replays and compacts it to one line per job.
    await d.kill('SIGKILL')
    const again = await start(config, stateDir)
    const lines = (await fs.readFile(path.join(stateDir, 'jobs', 'jobs.journal'), 'utf8')).split('\n').filter(Boolean)
    const journaled = new Map(lines.map((l) => JSON.parse(l)).map((e) => [e.job.id, e.job.state]))
    expect(journaled.size).toBe(BURST)
    expect(burst.ids.filter((id) => journaled.get(id) !== 'succeeded')).toEqual([])
    expect(await statesOf(again.call, burst.ids.filter((_, i) => i % 100 === 0))).toEqual({ succeeded: BURST / 100 })
    const restarted = procMemory(again.d.pid)

    const median = percentile(burst.times, 0.5)
    const p99 = percentile(burst.times, 0.99)
    console.log(`reliability.load burst (journal.sync ${sync}): ${BURST} hand-offs in ${burst.seconds.toFixed(1)} s (${(BURST / burst.seconds).toFixed(0)} calls/s), ` +
      `median ${median} µs, p99 ${p99} µs, max ${burst.times.at(-1)} µs; ${atBurstEnd.unfinished} unfinished at the end of the burst, ` +
      `drained ${((drained - burstDone) / 1000).toFixed(1)} s later (${((drained - t0) / 1000).toFixed(1)} s from the first hand-off); ` +
      `daemon CPU ${cpu.toFixed(0)} s, peak RSS ${mib(peak.hwm)}, after full GCs heap+external ${mib(held.heapUsed + held.external)} and RSS ${mib(heldRss)}; ${BURST} GETs in ${verifySeconds.toFixed(1)} s; ` +
      `journal ${mib(journalBefore)} before the restart, ${lines.length} lines after; restart ready in ${again.d.readyMs} ms with RSS ${mib(restarted.rss)}`)
    figures.push(
      [`burst, hand-off, ${sync}`, `acked upload() from ${PHP_PROCS} PHP processes over the unix socket, file target, concurrency 16`, `${BURST}`,
        `0 lost, 0 errors; median ${median} µs, p99 ${p99} µs per call; ${(BURST / burst.seconds).toFixed(0)} calls/s`],
      [`burst, drain, ${sync}`, 'from the first hand-off until no job is unfinished', '1', `${((drained - t0) / 1000).toFixed(1)} s (${((drained - burstDone) / 1000).toFixed(1)} s after the last hand-off); daemon CPU ${cpu.toFixed(0)} s`],
      [`burst, memory, ${sync}`, `daemon VmHWM with ${BURST} jobs retained (keepFinished ${BURST}; the default 10,000 bounds it)`, '1', `${mib(peak.hwm)} peak; after full GCs heap+external ${mib(held.heapUsed + held.external)}, RSS ${mib(heldRss)}; ${mib(restarted.rss)} after a restart`],
      [`burst, kill -9, ${sync}`, 'restart on the same journal', '1', `ready in ${again.d.readyMs} ms; ${lines.length} journal lines, all ${BURST} ids succeeded`]
    )
    // 100,000 finished jobs are kept for retentionSeconds, each as the job object plus its
    // serialised line in the journal's map (~2 KiB together measured), on ~70 MiB for the daemon:
    // what a restart holds (268–274 MiB measured on node 20, 239–261 on node 24). The peak during
    // the burst adds the garbage the collector has not freed yet, which varies from run to run
    // (314–474 MiB on node 20; 730–1000 MiB on node 24, whose heap grows to ~3× what is reachable
    // before a full collection), so the bounds apply to what the daemon holds after full
    // collections: heap and external memory (~2.2 KiB a job measured), and the RSS left, with the
    // margin the peak had; a leak of a few KiB per job still breaks them.
    expect(restarted.rss).toBeLessThan(70 * MiB + BURST * 3 * 1024)
    expect(held.heapUsed + held.external).toBeLessThan(30 * MiB + BURST * 3 * 1024)
    expect(heldRss).toBeLessThan(70 * MiB + BURST * 6 * 1024)
    await again.d.kill('SIGKILL')
  }, LONG ? 3600000 : 900000)

  it(`${PENDING} pending jobs: RSS bounded; past queue.limit 429 QUEUE_FULL with Retry-After, PHP spools, the spool is taken once there is room`, async () => {
    const [root, stateDir, out] = await Promise.all(['pending-root-', 'pending-state-', 'pending-out-'].map(dir))
    const local = path.join(root, 'small.txt')
    await fs.writeFile(local, 'y'.repeat(99) + '\n')
    // httpd behind a proxy that forwards nothing back: the one running job waits, the rest queue.
    const proxy = await startTcpProxy({ target: `127.0.0.1:${httpd.port}` })
    proxies.push(proxy)
    proxy.fault({ stallAfter: 0 })
    const socket = path.join(stateDir, 'sidecar.sock')
    const config = {
      listen: [`unix:${socket}`],
      stateDir,
      roots: [root],
      queue: { limit: PENDING, retentionSeconds: 86400 },
      spool: { intervalMs: 200 },
      logLevel: 'info',
      targets: { stalled: { type: 'http', url: `${proxy.url}/upload/`, concurrency: 1, timeouts: { idleMs: 600000 } } }
    }
    const { d, call, health } = await start(config, stateDir)
    const before = procMemory(d.pid)
    const burst = await phpBurst({ socket, target: 'stalled', local, count: PENDING / PHP_PROCS, procs: PHP_PROCS, out })
    expect(burst.summaries.flatMap((s) => s.errors)).toEqual([])
    expect(new Set(burst.ids).size).toBe(PENDING)
    expect(await health()).toMatchObject({ unfinished: PENDING, running: 1 })
    const full = procMemory(d.pid)

    // One more: refused with 429 and Retry-After, to Node and to PHP; PHP with a spool spools it.
    const extra = { direction: 'upload', target: 'stalled', local, remote: '/extra/node.txt' }
    const refused = await call('POST', '/v1/jobs', extra)
    expect(refused.status).toBe(429)
    expect(refused.json.error.code).toBe('QUEUE_FULL')
    expect(refused.headers['retry-after']).toBe('1')
    const args = [`--socket=${socket}`, '--target=stalled', `--local=${local}`]
    const direct = JSON.parse((await runPhp('php-one.php', [...args, '--remote=/extra/php.txt'])).stdout)
    expect(direct).toEqual({ exception: 'UnavailableException', status: 429, code: 'QUEUE_FULL', retryAfter: 1 })
    const spoolDir = path.join(stateDir, 'spool')
    const spooled = JSON.parse((await runPhp('php-one.php', [...args, '--remote=/extra/spooled.txt', `--spool=${spoolDir}`])).stdout)
    expect(spooled.id).toMatch(/^[A-Za-z0-9_-]{22}$/)
    // The daemon's spool scan meets the same full queue: it leaves the file for later, not rejected.
    await new Promise((resolve) => setTimeout(resolve, 5 * config.spool.intervalMs))
    expect(await fs.readdir(spoolDir)).toEqual([`${spooled.id}.json`])
    expect((await call('GET', `/v1/jobs/${spooled.id}`)).status).toBe(404)
    // Room for one: the spooled job is taken.
    expect((await call('DELETE', `/v1/jobs/${burst.ids[PENDING - 1]}`)).json.state).toBe('cancelled')
    await waitFor(async () => (await call('GET', `/v1/jobs/${spooled.id}`)).status === 200, { timeoutMs: 30000 })
    await waitFor(async () => (await fs.readdir(spoolDir)).length === 0)
    expect(await health()).toMatchObject({ unfinished: PENDING })
    const after = procMemory(d.pid)

    const perJob = (full.rss - before.rss) / PENDING
    console.log(`reliability.load pending: ${PENDING} queued in ${burst.seconds.toFixed(1)} s (${(PENDING / burst.seconds).toFixed(0)} calls/s, ` +
      `median ${percentile(burst.times, 0.5)} µs, p99 ${percentile(burst.times, 0.99)} µs); RSS ${mib(before.rss)} idle → ${mib(full.rss)} ` +
      `(${(perJob / 1024).toFixed(1)} KiB per pending job), VmHWM ${mib(Math.max(full.hwm, after.hwm))}`)
    figures.push(
      ['pending queue, memory', `${PENDING} jobs queued behind a stalled target (concurrency 1), VmRSS/VmHWM from /proc`, '1',
        `RSS ${mib(before.rss)} idle → ${mib(full.rss)} (${(perJob / 1024).toFixed(1)} KiB per job), VmHWM ${mib(Math.max(full.hwm, after.hwm))}`],
      ['pending queue, limit', `hand-off #${PENDING + 1} with queue.limit ${PENDING}: Node POST, PHP upload() without and with spool`, '3',
        '429 QUEUE_FULL + Retry-After: 1 each; PHP threw UnavailableException (retryAfter 1) / spooled; the spooled job was taken after one cancel']
    )
    // 50,000 queued jobs: the job object and its journal line (~2 KiB together) on ~70 MiB idle.
    expect(Math.max(full.hwm, after.hwm)).toBeLessThan(300 * MiB)
  }, 600000)

  it(`${LARGE} transfers of ${LARGE_SIZE / MiB} MiB at once, httpd and WebHDFS, up and down: all verified, peak RSS independent of file size`, async () => {
    const [root, stateDir] = await Promise.all(['large-root-', 'large-state-'].map(dir))
    await Promise.all(['src', 'down'].map((d) => fs.mkdir(path.join(root, d))))
    const contents = await Promise.all(Array.from({ length: 8 }, (_, k) => makeFile(path.join(root, 'src', `c${k}.bin`), LARGE_SIZE, 1000 + k)))
    const davSrc = path.join(httpd.davDir, 'load', 'src')
    await fs.mkdir(davSrc, { recursive: true })
    await hdfs.command('mkdir /data/load www-data 755')
    await hdfs.command('mkdir /data/load/src www-data 755')
    const jobs = []
    const share = { dav: [24, 24], hdfs: [8, 8] } // uploads, downloads per target: 64 in all
    for (const [target, [ups, downs]] of Object.entries(share)) {
      for (let k = 0; k < ups; k++) {
        jobs.push({ direction: 'upload', target, local: path.join(root, 'src', `c${k % 8}.bin`), remote: `/load/up/${target}-${k}.bin`, sha256: contents[k % 8] })
      }
      for (let k = 0; k < downs; k++) {
        const name = `${target}-${k}.bin`
        if (target === 'dav') await fs.copyFile(path.join(root, 'src', `c${k % 8}.bin`), path.join(davSrc, name))
        else await hd.put(`/data/load/src/${name}`, path.join(root, 'src', `c${k % 8}.bin`))
        jobs.push({ direction: 'download', target, local: path.join(root, 'down', name), remote: `/load/src/${name}`, sha256: contents[k % 8] })
      }
    }
    await httpd.chownToServer(path.join(httpd.davDir, 'load'))
    expect(jobs).toHaveLength(LARGE)

    const config = {
      listen: [`unix:${path.join(stateDir, 'sidecar.sock')}`],
      stateDir,
      roots: [root],
      logLevel: 'info',
      targets: {
        dav: { type: 'http', url: httpd.uploadUrl, concurrency: LARGE },
        hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data', concurrency: LARGE }
      }
    }
    const { d, call, health } = await start(config, stateDir)
    const idle = procMemory(d.pid)
    const mem = memorySampler(d.pid, 50)
    let mostRunning = 0
    const sampling = { on: true }
    const running = (async () => {
      while (sampling.on) {
        mostRunning = Math.max(mostRunning, (await health()).running)
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    })()
    const t0 = Date.now()
    const accepted = await Promise.all(jobs.map((j) => call('POST', '/v1/jobs', { ...j, overwrite: false })))
    expect(accepted.map((r) => r.status)).toEqual(jobs.map(() => 202))
    const results = await Promise.all(accepted.map((r) => call('GET', `/v1/jobs/${r.json.id}?wait=300`)))
    const seconds = (Date.now() - t0) / 1000
    sampling.on = false
    await running
    const peak = mem.stop()
    expect(results.map((r) => r.json.state === 'succeeded' ? 'ok' : r.json.error)).toEqual(jobs.map(() => 'ok'))
    results.forEach((r, i) => expect(r.json).toMatchObject({ bytes: LARGE_SIZE, sha256: jobs[i].sha256 }))

    // What the targets and the local disk hold, hashed again from there.
    const check = jobs.map((job, i) => ({ job, i }))
    await Promise.all(Array.from({ length: 4 }, async () => {
      for (let c = check.shift(); c; c = check.shift()) {
        const { job } = c
        let got
        if (job.direction === 'download') got = { sha256: await sha256File(job.local), size: (await fs.stat(job.local)).size }
        else if (job.target === 'dav') {
          const file = path.join(httpd.davDir, job.remote)
          got = { sha256: await sha256File(file), size: (await fs.stat(file)).size }
        } else got = await hd.sha256(`/data${job.remote}`)
        expect(got, `${job.direction} ${job.target} ${job.remote}`).toEqual({ sha256: job.sha256, size: LARGE_SIZE })
      }
    }))
    expect((await walkFiles(path.join(root, 'down'))).filter((n) => TEMP_NAME.test(n))).toEqual([])

    const moved = LARGE * LARGE_SIZE
    console.log(`reliability.load large: ${LARGE} × ${LARGE_SIZE / MiB} MiB in ${seconds.toFixed(1)} s (${(moved / MiB / seconds).toFixed(0)} MiB/s in all), ` +
      `at most ${mostRunning} running at once; RSS ${mib(idle.rss)} idle, VmHWM ${mib(peak.hwm)}`)
    figures.push(['large transfers', `${LARGE} × ${LARGE_SIZE / MiB} MiB at once (httpd 24 up + 24 down, WebHDFS 8 up + 8 down), concurrency ${LARGE}`, '1',
      `all sha256-equal; ${mostRunning} running at once at most; ${seconds.toFixed(1)} s; RSS ${mib(idle.rss)} idle, VmHWM ${mib(peak.hwm)} for ${mib(moved)} moved`])
    // The transfers' buffer pools share one 16 MiB budget (src/datapath.js); each transfer adds
    // socket and stream buffers, hash and HTTP state (2 MiB is generous), plus 32 MiB for the
    // garbage collector's slack, whatever the file size. Growing with file size would mean
    // gigabytes here (2 GiB moved); one 4 MiB pool per transfer, as before, ~330 MiB.
    expect(peak.hwm).toBeLessThan(idle.rss + 16 * MiB + LARGE * 2 * MiB + 32 * MiB)
  }, 600000)
})
