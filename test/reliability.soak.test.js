// Soak: the daemon as a real process under SOAK_MINUTES (default 30) of mixed traffic, against the
// real servers (a MiniDFSCluster and Apache httpd mod_dav, each behind a fault-injecting TCP proxy):
// uploads and downloads on both targets, small and medium files, a one-shot fault injected through
// a proxy every few seconds (reset, stall, 503s, trickle), some cancels and some bad requests.
// Every few seconds its RSS (/proc/PID/status) and open fds (/proc/PID/fd) are sampled; neither may
// grow: the median of the last 20 % of the samples is compared with the median of 20–40 % (after
// warm-up), within a margin explained at MARGINS below. Every job must end succeeded with the right
// sha256, cancelled, or failed with a code from the README (at most 1 % failed: one-shot faults
// against 5 attempts should fail none, and each failure is printed). No temp or partial files may
// be left. The samples go to <temp dir>/soak-samples.json; a summary line is printed.
//
// SKIPPED unless SOAK=1 (the one flag of the reliability suites): it runs for half an hour.
//   SOAK=1 npx vitest run test/reliability.soak.test.js                  # 30 minutes
//   SOAK=1 SOAK_MINUTES=3 npx vitest run test/reliability.soak.test.js   # a quick check
// RELIABILITY_SEED replays the random choices of a run (its seed is printed).
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHdfs } from './harness/hdfs.js'
import { startHttpd } from './harness/httpd.js'
import { startTcpProxy, startHdfsProxies } from './harness/tcp-proxy.js'
import { client, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile, sha256File, exists } from './helpers/files.js'
import { freePort } from './helpers/ports.js'
import { seededRandom, runSeed, spawnDaemon, logTail } from './reliability/daemon.js'
import {
  readmeJobCodes, badOutcome, leftovers, davFiles, hdfsFiles, processSample, median, slopePerMinute
} from './reliability/faults-checks.js'

const SOAK = process.env.SOAK === '1'
const MINUTES = Number(process.env.SOAK_MINUTES ?? 30)
const KiB = 1 << 10
const MiB = 1 << 20
const LANES = 4 // jobs submitted and awaited at once
const SAMPLE_MS = 2000
const FAULT_EVERY_MS = 4000
const JOB_WAIT_S = 120
const NAMES_PER_LANE = 16 // uploads overwrite a rotating set of names: remote storage stays bounded
const FILES = { small: { size: 64 * KiB + 7 }, medium: { size: 4 * MiB + 3 } }
// How far the late median may exceed the early one before it counts as growth:
// - RSS: each running transfer holds at most its file's size in 1 MiB pool buffers (~4 MiB for a
//   medium one, less beside others: src/datapath.js), and how many of the LANES (plus a cancelled
//   one) run at a sampling instant varies; V8 also sizes its heap in steps of several MiB. So (LANES + 1) × 4 MiB, and no less than 10 % of the early median.
// - fds: a running transfer has a file and up to two sockets open, and keep-alive pools to the
//   namenode, httpd and the API client come and go: 3 per lane plus 8.
const MARGINS = { rss: (early) => Math.max((LANES + 1) * 4 * MiB, 0.1 * early), fds: () => 3 * LANES + 8 }

describe.skipIf(!SOAK)(`soak — skipped unless SOAK=1: ${MINUTES} min of mixed traffic with faults, RSS and fds must not grow`, () => {
  const seed = runSeed()
  const CODES = readmeJobCodes()
  let hdfs, httpd, proxies, davProxy, daemon, api, dir, root, samplesFile

  beforeAll(async () => {
    ;[hdfs, httpd] = await Promise.all([startHdfs(), startHttpd()])
    await hdfs.command('mkdir /data www-data 755')
    proxies = await startHdfsProxies(hdfs)
    davProxy = await startTcpProxy({ target: `127.0.0.1:${httpd.port}` })
    dir = await tempDir('soak-')
    root = path.join(dir, 'root')
    for (const d of ['src', 'dl']) await fs.mkdir(path.join(root, d), { recursive: true })
    for (const [kind, f] of Object.entries(FILES)) {
      f.local = path.join(root, 'src', `${kind}.bin`)
      f.sha256 = await makeFile(f.local, f.size, f.size)
    }
    const port = await freePort()
    const config = {
      listen: [`127.0.0.1:${port}`],
      stateDir: path.join(dir, 'state'),
      roots: [root],
      logLevel: 'warn',
      // Finished jobs leave memory after a minute (pruned every minute): a steady state to measure.
      queue: { retentionSeconds: 60 },
      retry: { attempts: 5, baseDelayMs: 100, maxDelayMs: 1000 },
      timeouts: { connectMs: 3000, idleMs: 5000 },
      targets: {
        hdfs: { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', concurrency: 4 },
        dav: { type: 'http', url: `${davProxy.url}/upload/`, concurrency: 4 }
      }
    }
    daemon = await spawnDaemon(config, { dir, logFile: path.join(dir, 'daemon.log') })
    api = client(`http://127.0.0.1:${port}`)
    samplesFile = path.join(dir, 'soak-samples.json')
    // What downloads fetch, put in place with no fault.
    for (const target of ['hdfs', 'dav']) {
      for (const [kind, f] of Object.entries(FILES)) {
        const job = await api.run({ direction: 'upload', target, local: f.local, remote: `/soak/src/${kind}.bin`, overwrite: true })
        if (job.state !== 'succeeded') throw new Error(`setup upload to ${target}: ${JSON.stringify(job)}`)
      }
    }
  })

  afterAll(async () => {
    await daemon?.kill('SIGKILL')
    await api?.close()
    await Promise.all([proxies?.stop(), davProxy?.stop()])
    await Promise.all([hdfs?.stop(), httpd?.stop()])
    if (dir) await fs.rm(root, { recursive: true, force: true }) // samples and the daemon's log stay
  })

  it(`runs ${MINUTES} min of uploads, downloads, cancels, bad requests and faults without growth or leftovers`, async () => {
    const start = Date.now()
    const deadline = start + MINUTES * 60000
    const samples = []
    const counts = { succeeded: 0, failed: 0, cancelled: 0, badRequests: 0, faults: 0 }
    const failures = []
    const ended = new Map() // id → how it ended, of jobs that did not succeed (to explain leftovers)

    const sample = () => {
      const s = processSample(daemon.pid)
      if (s) samples.push({ t: Date.now() - start, ...s })
    }
    sample()
    const sampler = setInterval(sample, SAMPLE_MS)

    // One one-shot fault at a time on a random proxy, taken by the next request it sees.
    const rand = seededRandom(seed) // the faults' choices; each lane has its own
    const proxyList = [...proxies.namenodes.map((p) => ['namenode', p]), ...proxies.datanodes.map((p) => ['datanode', p]), ['httpd', davProxy]]
    const faultKinds = [
      () => ({ resetAfter: rand.int(0, 2 * MiB), direction: rand.pick(['up', 'down']) }),
      () => ({ stallAfter: rand.int(0, 2 * MiB), direction: rand.pick(['up', 'down']) }),
      () => ({ status: 503, connections: 2 }),
      () => ({ rate: 4 * MiB, direction: rand.pick(['up', 'down']) })
    ]
    const faulter = setInterval(() => {
      for (const [, p] of proxyList) p.fault(null)
      const [, proxy] = rand.pick(proxyList)
      proxy.fault({ connections: 1, ...rand.pick(faultKinds)(), match: /^[A-Z]+ / })
      counts.faults++
    }, FAULT_EVERY_MS)

    async function transfer (rand, lane, n) {
      const target = rand.pick(['hdfs', 'dav'])
      const kind = rand() < 0.6 ? 'small' : 'medium'
      const spec = rand() < 0.5
        ? { direction: 'upload', target, local: FILES[kind].local, remote: `/soak/up/${lane}/${n % NAMES_PER_LANE}.bin`, overwrite: true }
        : { direction: 'download', target, local: path.join(root, 'dl', `${lane}-${n}.bin`), remote: `/soak/src/${kind}.bin` }
      const cancel = rand() < 0.1
      const r = await api.submit(spec)
      expect(r.status, r.text).toBe(202)
      if (cancel) {
        await new Promise((resolve) => setTimeout(resolve, rand.int(0, 300)))
        const c = await api.call('DELETE', `/v1/jobs/${r.json.id}`)
        expect([200, 409], c.text).toContain(c.status) // 409 JOB_FINISHED: it ended first
      }
      const job = (await api.job(r.json.id, JOB_WAIT_S)).json
      const bad = badOutcome(job, { ...FILES[kind], codes: CODES })
      expect(bad, JSON.stringify(job)).toBeNull()
      counts[job.state]++
      if (job.state === 'failed') failures.push(`${spec.direction} ${target} ${spec.remote}: ${job.error.code} ${job.error.message}`)
      if (job.state !== 'succeeded') ended.set(job.id, `${job.state} ${spec.direction}`)
      if (spec.direction === 'download') {
        if (job.state === 'succeeded') expect(await sha256File(spec.local)).toBe(FILES[kind].sha256)
        else expect(await exists(spec.local)).toBe(false)
        await fs.rm(spec.local, { force: true })
      }
    }

    // Each answered with its code; none creates a job.
    const badRequests = [
      () => [api.call('POST', '/v1/jobs', '{"direction": "upl'), 400, 'INVALID_JSON'],
      () => [api.submit({ direction: 'upload', target: 'nope', local: FILES.small.local, remote: '/x' }), 400, 'UNKNOWN_TARGET'],
      () => [api.submit({ direction: 'upload', target: 'dav', local: '/etc/passwd', remote: '/x' }), 403, 'PATH_NOT_ALLOWED'],
      () => [api.submit({ direction: 'upload', target: 'hdfs', local: FILES.small.local, remote: '/a/../../x' }), 400, 'INVALID_PATH'],
      () => [api.call('POST', '/v1/jobs', JSON.stringify({ pad: 'x'.repeat(70 * KiB) })), 413, 'PAYLOAD_TOO_LARGE'],
      () => [api.job('no-such-job-0000'), 404, 'JOB_NOT_FOUND']
    ]
    async function badRequest (rand) {
      const [call, status, code] = rand.pick(badRequests)()
      const r = await call
      expect({ status: r.status, code: r.json?.error?.code }).toEqual({ status, code })
      counts.badRequests++
    }

    async function lane (k) {
      const rand = seededRandom(seed + 1 + k)
      for (let n = 0; Date.now() < deadline; n++) {
        if (rand() < 0.1) await badRequest(rand)
        else await transfer(rand, k, n)
      }
    }

    try {
      await Promise.all(Array.from({ length: LANES }, (_, k) => lane(k)))
    } finally {
      clearInterval(faulter)
      clearInterval(sampler)
      for (const [, p] of proxyList) p.fault(null)
    }
    sample()
    const health = await api.call('GET', '/healthz')

    // Nothing left behind. Connections a stall kept open on the servers' side are closed first, so
    // that httpd drops its own temp files of PUTs that will never finish.
    for (const [, p] of proxyList) p.resetAll()
    const localLeft = [...await leftovers(root), ...(await fs.readdir(path.join(root, 'dl'))).map((n) => `dl/${n}`)]
    const remoteTemps = async () => [
      ...(await hdfsFiles(hdfs.namenodes, '/data/soak')).map((f) => `hdfs:${f.path}`),
      ...(await davFiles(path.join(httpd.davDir, 'soak'))).map((f) => `dav:${f.path}`)
    ].filter((p) => /(^|\/)\./.test(p.split(':')[1]) || p.includes('_COPYING_'))
    await waitFor(async () => (await remoteTemps()).length === 0, { timeoutMs: 20000, intervalMs: 250 }).catch(() => {})
    // Each with how its job ended (temp names carry the job id).
    const remoteLeft = (await remoteTemps()).map((p) => `${p} (${[...ended].find(([id]) => p.includes(`.${id}.`))?.[1] ?? 'job not seen ending'})`)

    // Growth: the median of the last 20 % of samples against that of 20–40 %.
    const span = samples.at(-1).t
    const within = (a, b) => samples.filter((s) => s.t >= a * span && s.t <= b * span)
    const early = within(0.2, 0.4)
    const late = within(0.8, 1)
    const stat = (key) => ({
      early: median(early.map((s) => s[key])),
      late: median(late.map((s) => s[key])),
      max: Math.max(...samples.map((s) => s[key])),
      slopePerMin: slopePerMinute(samples.filter((s) => s.t >= 0.2 * span), key)
    })
    const rss = stat('rss')
    const fds = stat('fds')
    const mib = (n) => +(n / MiB).toFixed(1)
    const jobs = counts.succeeded + counts.failed + counts.cancelled
    const summary = {
      seed,
      minutes: MINUTES,
      jobs,
      ...counts,
      samples: samples.length,
      rssMiB: { early: mib(rss.early), late: mib(rss.late), max: mib(rss.max), slopePerMin: +(rss.slopePerMin / MiB).toFixed(2), margin: mib(MARGINS.rss(rss.early)) },
      fds: { early: fds.early, late: fds.late, max: fds.max, slopePerMin: +fds.slopePerMin.toFixed(2), margin: MARGINS.fds() },
      left: { local: localLeft, remote: remoteLeft }
    }
    await fs.writeFile(samplesFile, JSON.stringify({ summary, failures, samples }, null, 1))
    console.log(`soak: ${MINUTES} min, seed ${seed}, ${jobs} jobs (${counts.succeeded} succeeded, ${counts.failed} failed, ${counts.cancelled} cancelled), ` +
      `${counts.badRequests} bad requests, ${counts.faults} faults; RSS median ${summary.rssMiB.early} → ${summary.rssMiB.late} MiB ` +
      `(max ${summary.rssMiB.max}, slope ${summary.rssMiB.slopePerMin} MiB/min, margin ${summary.rssMiB.margin}), fds ${fds.early} → ${fds.late} ` +
      `(max ${fds.max}); left behind: ${localLeft.length} local, ${remoteLeft.length} remote; samples in ${samplesFile}` +
      (failures.length ? `\nfailed jobs:\n${failures.join('\n')}` : '') + (remoteLeft.length ? `\nleft: ${remoteLeft.join(' ')}` : ''))

    expect(health.status).toBe(200)
    expect(health.json.jobs).toMatchObject({ running: 0 })
    expect(daemon.child.exitCode, await logTail(path.join(dir, 'daemon.log'))).toBeNull()
    expect(localLeft).toEqual([])
    expect(remoteLeft).toEqual([])
    expect(early.length).toBeGreaterThanOrEqual(3)
    expect(late.length).toBeGreaterThanOrEqual(3)
    expect(rss.late, `RSS grew: ${JSON.stringify(summary.rssMiB)}`).toBeLessThanOrEqual(rss.early + MARGINS.rss(rss.early))
    expect(fds.late, `fds grew: ${JSON.stringify(summary.fds)}`).toBeLessThanOrEqual(fds.early + MARGINS.fds())
    expect(counts.failed, failures.join('\n')).toBeLessThanOrEqual(Math.floor(0.01 * (counts.succeeded + counts.failed)))
    expect(counts.succeeded).toBeGreaterThan(0)
  }, (MINUTES * 60 + 600) * 1000)
})
