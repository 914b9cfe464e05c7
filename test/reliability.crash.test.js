// Crash recovery under load: the daemon (a real child process, journal.sync "fsync" and "write"
// turn about) is killed with SIGKILL at seeded random moments while 200 uploads and downloads (empty, small, a few MiB, tens of MiB) to a real
// MiniDFSCluster (WebHDFS) and a real Apache httpd mod_dav are queued or running, and restarted
// on the same state directory each time. A quarter of the jobs is handed over by Node over TCP,
// three quarters by PHP (the acked TransferSidecar\Client, one process over the unix socket, one over
// TCP, one over the hand-off thread's socket, handoff.listen) with the spool fallback: while the daemon is down PHP spools, and those jobs must run too.
// Every job has overwrite=false and (but for the httpd uploads that take the direct PUT, see
// bodyOf) its expected sha256, so a double publish or a corrupt file fails the job. Afterwards: every job succeeded exactly once, every remote and local file is
// there once with the right size and sha256, no other name (no temp, no partial) on any target or
// in the local root, the spool is empty, and every id PHP got back is known to the daemon.
// The kills are counted: how many transfers were running at each (GET /healthz just before it)
// and how many the restart found running in the journal. A second group rebuilds, one at a time,
// the kill moments these rounds ran into and that once failed jobs.
//
//   RELIABILITY_SEED=<n>   replay the kill moments and the job mix of a run (the seed is printed)
//   RELIABILITY_LONG=1     60 rounds and 600 jobs instead of 20 and 200
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { startHdfs } from './harness/hdfs.js'
import { startHttpd } from './harness/httpd.js'
import { tempDir } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'
import { freePort } from './helpers/ports.js'
import {
  MiB, seededRandom, runSeed, spawnDaemon, runPhp, sha256File, walkFiles, webhdfs, logRecords, TEMP_NAME
} from './reliability/daemon.js'

const LONG = process.env.RELIABILITY_LONG === '1'
const ROUNDS = LONG ? 60 : 20
const JOBS = LONG ? 600 : 200
const SEED = runSeed()
const VIAS = ['node', 'php-unix', 'php-tcp', 'php-handoff']

let hdfs, httpd, hd, root, stateDir, scratch, logDir, config, daemon, tcpBase
let passed = false
const dirs = []
const starts = [] // one entry per daemon start: { n, readyMs }

beforeAll(async () => {
  console.log(`reliability.crash: seed ${SEED} (replay with RELIABILITY_SEED=${SEED}), ${ROUNDS} rounds, ${JOBS} jobs`)
  ;[hdfs, httpd] = await Promise.all([startHdfs(), startHttpd()])
  await hdfs.command('mkdir /data www-data 755')
  hd = webhdfs(hdfs.namenodes[0])
  for (const p of ['crash-root-', 'crash-state-', 'crash-scratch-', 'crash-logs-']) dirs.push(await tempDir(p))
  ;[root, stateDir, scratch, logDir] = dirs
  const port = await freePort()
  tcpBase = `http://127.0.0.1:${port}`
  config = {
    listen: [`127.0.0.1:${port}`, `unix:${path.join(stateDir, 'sidecar.sock')}`],
    handoff: { listen: [`unix:${path.join(stateDir, 'handoff.sock')}`] },
    stateDir,
    roots: [root],
    spool: { dir: path.join(stateDir, 'spool'), intervalMs: 200 },
    // A transfer cut by a kill counts as an attempt, so a job can use many across 20 (60) kills; a
    // job found cut after its last one ends INTERRUPTED (restart.test.js), which is not this test.
    retry: { attempts: 100, baseDelayMs: 100, maxDelayMs: 1000 },
    shutdownGraceMs: 0,
    logLevel: 'info',
    targets: {
      hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data', concurrency: 4 },
      dav: { type: 'http', url: httpd.uploadUrl, concurrency: 4, atomicPut: true }
    }
  }
  await fs.mkdir(config.spool.dir, { recursive: true })
})

afterAll(async () => {
  await daemon?.kill('SIGKILL')
  await Promise.all([hdfs?.stop(), httpd?.stop()])
  // After a failure the daemon logs and the journal stay, for the post-mortem.
  const keep = passed ? [] : [stateDir, logDir]
  if (keep.length) console.log(`reliability.crash: failed; daemon logs kept in ${logDir}, state in ${stateDir}`)
  await Promise.all(dirs.filter((d) => !keep.includes(d)).map((d) => fs.rm(d, { recursive: true, force: true })))
})

const startDaemon = async () => {
  const n = starts.length
  // Both journal.sync modes, turn about: a job acknowledged in "write" mode is in the journal file
  // when the 202 goes out, so a kill -9 (which leaves the page cache alone) must not lose it either.
  const sync = n % 2 ? 'write' : 'fsync'
  daemon = await spawnDaemon({ ...config, journal: { sync } }, { dir: stateDir, logFile: path.join(logDir, `daemon-${n}.log`) })
  starts.push({ n, sync, readyMs: daemon.readyMs })
}

async function api (method, p, body) {
  const res = await request(tcpBase + p, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
    headersTimeout: 320000
  })
  const text = await res.body.text()
  let json = null
  try { json = JSON.parse(text) } catch {}
  return { status: res.statusCode, json, headers: res.headers }
}

// The jobs of this run, their content and their expected results, all from the seed.
function planJobs (rand) {
  const jobs = []
  for (let i = 0; i < JOBS; i++) {
    const c = rand()
    const size = c < 0.15 ? 0 : c < 0.55 ? rand.int(1, 64 * 1024) : c < 0.85 ? rand.int(MiB, 4 * MiB) : rand.int(10 * MiB, 50 * MiB)
    const direction = rand() < 0.5 ? 'upload' : 'download'
    const target = rand() < 0.5 ? 'hdfs' : 'dav'
    const name = `j${String(i).padStart(4, '0')}-${size}.bin`
    const via = VIAS[i % VIAS.length]
    jobs.push({
      i,
      size,
      direction,
      target,
      name,
      via,
      contentSeed: (SEED + i * 7919) % 2 ** 31 + 1,
      local: path.join(root, direction === 'upload' ? 'src' : 'down', name),
      remote: `/crash/${direction === 'upload' ? 'up' : 'src'}/${name}`,
      delayMs: 0
    })
  }
  // Per submitter, 60 % of the hand-offs in the first ~5 s (a backlog that the kills cut into),
  // the rest trickled over ~25 s more (hand-offs keep coming while the daemon is down); longer
  // with more rounds.
  const scale = ROUNDS / 20
  for (const via of VIAS) {
    const mine = jobs.filter((j) => j.via === via)
    const burst = Math.round(mine.length * 0.6)
    mine.forEach((j, k) => {
      j.delayMs = k < burst ? rand.int(0, Math.round(2 * 5000 * scale / burst)) : rand.int(0, Math.round(2 * 25000 * scale / (mine.length - burst)))
    })
  }
  return jobs
}

// Upload sources in the local root; download sources on their target (httpd: written to its
// document root on disk; HDFS: a direct two-step CREATE), never through the daemon.
async function prepare (jobs) {
  await fs.mkdir(path.join(root, 'src'))
  await fs.mkdir(path.join(root, 'down'))
  const davSrc = path.join(httpd.davDir, 'crash', 'src')
  await fs.mkdir(davSrc, { recursive: true })
  await hdfs.command('mkdir /data/crash www-data 755')
  await hdfs.command('mkdir /data/crash/src www-data 755')
  const queue = [...jobs]
  await Promise.all(Array.from({ length: 4 }, async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      if (job.direction === 'upload') {
        job.sha256 = await makeFile(job.local, job.size, job.contentSeed)
        continue
      }
      const file = path.join(scratch, job.name)
      job.sha256 = await makeFile(file, job.size, job.contentSeed)
      if (job.target === 'dav') await fs.rename(file, path.join(davSrc, job.name))
      else {
        await hd.put(`/data${job.remote}`, file)
        await fs.rm(file)
      }
    }
  }))
  await httpd.chownToServer(path.join(httpd.davDir, 'crash'))
}

// Every other small upload to httpd goes without its expected sha256, so that it takes the target's
// direct PUT (`atomicPut`): a kill between the server storing it and the journal recording it must
// end in one success too (the next attempt reads the name back), checked by the sha256 the daemon
// reports and the file on disk.
const direct = (job) => job.target === 'dav' && job.direction === 'upload' && job.size <= MiB && job.i % 2 === 1
const bodyOf = (job, id) => ({
  ...(id && { id }), direction: job.direction, target: job.target, local: job.local, remote: job.remote, overwrite: false, ...(!direct(job) && { sha256: job.sha256 })
})

// Node's hand-offs over TCP with its own ids: retried with the same id until answered 2xx, as a
// careful client would (the id makes a retry of a job the daemon took before dying harmless).
async function submitFromNode (jobs) {
  const refused = []
  for (const job of jobs) {
    await sleep(job.delayMs)
    job.id = `crash-${SEED}-${job.i}`
    for (;;) {
      const r = await api('POST', '/v1/jobs', bodyOf(job, job.id)).catch(() => null)
      if (r?.status === 202 || r?.status === 200) break
      if (r && r.status < 500 && r.status !== 429) {
        refused.push({ i: job.i, status: r.status, body: r.json })
        break
      }
      await sleep(50)
    }
  }
  return refused
}

async function submitFromPhp (jobs, client, name) {
  const planFile = path.join(scratch, `${name}.json`)
  await fs.writeFile(planFile, JSON.stringify({
    client,
    spool: config.spool.dir,
    jobs: jobs.map((j) => ({ ...bodyOf(j), delayMs: j.delayMs }))
  }))
  const { code, stdout, stderr } = await runPhp('php-handoff.php', [planFile])
  if (code !== 0) throw new Error(`php-handoff.php (${name}) exited ${code}: ${stderr}`)
  const lines = stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l))
  const errors = lines.filter((l) => l.error)
  for (const l of lines) if (l.id) Object.assign(jobs[l.i], { id: l.id, spooled: l.spooled, handoffMs: l.ms })
  return { errors, lines }
}

async function health () {
  try {
    const res = await request(`${tcpBase}/healthz`, { headersTimeout: 1000, bodyTimeout: 1000 })
    return (await res.body.json()).jobs
  } catch {
    return null
  }
}

async function hdfsWalk (dir) {
  const out = []
  for (const s of await hd.list(dir) ?? []) {
    if (s.type === 'DIRECTORY') out.push(...await hdfsWalk(`${dir}/${s.name}`))
    else out.push({ path: `${dir}/${s.name}`, length: s.length })
  }
  return out
}

describe(`kill -9 in ${ROUNDS} rounds under ${JOBS} transfers`, () => {
  it('runs every job exactly once, leaves no partial or duplicate file anywhere, loses nothing PHP handed over', async () => {
    const rand = seededRandom(SEED)
    const jobs = planJobs(rand)
    const t0 = Date.now()
    await prepare(jobs)
    const prepared = Date.now()
    const bytes = jobs.reduce((n, j) => n + j.size, 0)
    console.log(`reliability.crash: ${jobs.length} jobs, ${(bytes / MiB).toFixed(0)} MiB, prepared in ${((prepared - t0) / 1000).toFixed(1)} s`)

    await startDaemon()
    const submitting = Promise.all([
      submitFromNode(jobs.filter((j) => j.via === 'node')),
      submitFromPhp(jobs.filter((j) => j.via === 'php-unix'), { socket: config.listen[1].slice(5) }, 'php-unix'),
      submitFromPhp(jobs.filter((j) => j.via === 'php-tcp'), { host: '127.0.0.1', port: Number(tcpBase.split(':').pop()) }, 'php-tcp'),
      submitFromPhp(jobs.filter((j) => j.via === 'php-handoff'), { socket: config.listen[1].slice(5), handoff_socket: config.handoff.listen[0].slice(5) }, 'php-handoff')
    ])
    const progress = { submitted: false }
    submitting.finally(() => { progress.submitted = true }).catch(() => {})

    // Each round: up for a random time, but killed only while jobs are unfinished (waiting up to
    // 3 s for the next hand-off if the daemon has caught up), then down for a random time.
    const rounds = []
    for (let r = 1; r <= ROUNDS; r++) {
      const upMs = rand.int(200, 1500)
      const downMs = rand.int(50, 700)
      await sleep(upMs)
      let at = await health()
      for (const until = Date.now() + 3000; at?.unfinished === 0 && !progress.submitted && Date.now() < until;) {
        await sleep(20)
        at = await health()
      }
      await daemon.kill('SIGKILL')
      rounds.push({ round: r, upMs, downMs, running: at?.running ?? null, unfinished: at?.unfinished ?? null, submitted: progress.submitted })
      await sleep(downMs)
      await startDaemon()
    }
    const killsDone = Date.now()
    const [nodeRefused, phpUnix, phpTcp, phpHandoff] = await submitting
    expect(nodeRefused).toEqual([])
    expect([...phpUnix.errors, ...phpTcp.errors, ...phpHandoff.errors]).toEqual([])
    expect(jobs.every((j) => typeof j.id === 'string')).toBe(true)

    // Every job ends, once: the daemon knows exactly these ids, each succeeded.
    const ended = []
    const pending = [...jobs]
    await Promise.all(Array.from({ length: 16 }, async () => {
      for (let job = pending.shift(); job; job = pending.shift()) {
        let r
        do r = await api('GET', `/v1/jobs/${job.id}?wait=300`)
        while (r.status === 200 && !['succeeded', 'failed', 'cancelled'].includes(r.json.state))
        ended.push(r)
        job.result = r.json
      }
    }))
    const drained = Date.now()
    const notOk = jobs.filter((j) => j.result?.state !== 'succeeded')
      .map((j) => ({ i: j.i, via: j.via, target: j.target, direction: j.direction, size: j.size, id: j.id, state: j.result?.state ?? null, error: j.result?.error ?? null }))
    expect(notOk).toEqual([])
    for (const job of jobs) expect(job.result).toMatchObject({ bytes: job.size, sha256: job.sha256 })
    const listed = (await api('GET', '/v1/jobs?limit=10000')).json.jobs
    expect(listed.map((j) => j.id).sort()).toEqual(jobs.map((j) => j.id).sort())
    expect(listed.every((j) => j.state === 'succeeded')).toBe(true)

    // The targets hold exactly the expected files, each with the right content.
    const ups = jobs.filter((j) => j.direction === 'upload')
    const downs = jobs.filter((j) => j.direction === 'download')
    const expectedOn = (target, kind) => jobs.filter((j) => j.target === target && j.remote.startsWith(`/crash/${kind}/`))
    const hdfsFiles = await hdfsWalk('/data')
    expect(hdfsFiles.map((f) => f.path).sort()).toEqual(
      [...expectedOn('hdfs', 'up'), ...expectedOn('hdfs', 'src')].map((j) => `/data${j.remote}`).sort())
    const davFiles = await walkFiles(httpd.davDir)
    expect(davFiles.sort()).toEqual([...expectedOn('dav', 'up'), ...expectedOn('dav', 'src')].map((j) => j.remote.slice(1)).sort())
    const localFiles = await walkFiles(root)
    expect(localFiles.sort()).toEqual([...ups.map((j) => `src/${j.name}`), ...downs.map((j) => `down/${j.name}`)].sort())
    for (const name of [...hdfsFiles.map((f) => f.path), ...davFiles, ...localFiles]) expect(path.basename(name)).not.toMatch(TEMP_NAME)
    expect(await walkFiles(config.spool.dir)).toEqual([])

    const check = [...jobs]
    await Promise.all(Array.from({ length: 4 }, async () => {
      for (let job = check.shift(); job; job = check.shift()) {
        let got
        if (job.direction === 'download') {
          got = { sha256: await sha256File(job.local), size: (await fs.stat(job.local)).size }
        } else if (job.target === 'dav') {
          const file = path.join(httpd.davDir, job.remote)
          got = { sha256: await sha256File(file), size: (await fs.stat(file)).size }
        } else {
          got = await hd.sha256(`/data${job.remote}`)
        }
        expect(got, `job ${job.i} ${job.direction} ${job.target} ${job.name}`).toEqual({ sha256: job.sha256, size: job.size })
      }
    }))

    // What the kills hit, and how the PHP jobs arrived.
    const recovered = []
    const ingested = []
    for (const s of starts) {
      const file = path.join(logDir, `daemon-${s.n}.log`)
      recovered.push(...(await logRecords(file, 'recovered jobs from the journal')).map((r) => ({ n: s.n, requeued: r.requeued, unfinished: r.unfinished })))
      ingested.push(...await logRecords(file, 'spooled job ingested'))
    }
    const phpJobs = jobs.filter((j) => j.via !== 'node')
    const spooledIds = new Set(ingested.filter((r) => r.created).map((r) => r.job))
    const duplicates = new Set(ingested.filter((r) => !r.created).map((r) => r.job))
    const attempts = jobs.map((j) => j.result.attempts).sort((a, b) => a - b)
    console.log('reliability.crash: round | journal.sync | up ms | down ms | running at kill | unfinished at kill | requeued at restart | restart ms')
    for (const r of rounds) {
      const rec = recovered.find((x) => x.n === r.round)
      console.log(`  ${r.round} | ${starts[r.round].sync} | ${r.upMs} | ${r.downMs} | ${r.running} | ${r.unfinished} | ${rec?.requeued} | ${starts[r.round].readyMs}${r.submitted ? ' (hand-offs done)' : ''}`)
    }
    // Each mode was killed with jobs it had acknowledged and not finished.
    expect(new Set(rounds.filter((r) => r.unfinished > 0).map((r) => starts[r.round].sync))).toEqual(new Set(['fsync', 'write']))
    const hit = rounds.filter((r) => r.running > 0)
    console.log(`reliability.crash: ${ROUNDS} kills, ${hit.length} with transfers running (${hit.reduce((n, r) => n + r.running, 0)} transfers cut), ` +
      `requeued at restarts: ${recovered.slice(1).reduce((n, r) => n + r.requeued, 0)}`)
    console.log(`reliability.crash: PHP ${phpJobs.length} jobs, ${phpJobs.filter((j) => j.spooled).length} seen in the spool after the call, ` +
      `${spooledIds.size} created from the spool, ${duplicates.size} both acked and spooled (ran once); acked by the daemon, by client: ` +
      VIAS.filter((v) => v !== 'node').map((v) => `${v} ${phpJobs.filter((j) => j.via === v && !j.spooled).length}`).join(', '))
    // Each PHP client handed jobs to the daemon itself, not only to the spool.
    for (const v of VIAS.filter((v) => v !== 'node')) expect(phpJobs.filter((j) => j.via === v && !j.spooled).length).toBeGreaterThan(0)
    console.log(`reliability.crash: attempts per job median ${attempts[attempts.length >> 1]}, max ${attempts.at(-1)}; ` +
      `kills ${((killsDone - prepared) / 1000).toFixed(1)} s, drain after the last restart ${((drained - killsDone) / 1000).toFixed(1)} s, ` +
      `total ${((Date.now() - t0) / 1000).toFixed(1)} s`)

    // The test must have hit something: most kills cut running transfers, and PHP had to spool.
    expect(hit.length).toBeGreaterThanOrEqual(Math.ceil(ROUNDS / 2))
    expect(phpJobs.filter((j) => j.spooled).length).toBeGreaterThan(0)
    expect(spooledIds.size + duplicates.size).toBeGreaterThan(0)
    for (const j of phpJobs.filter((x) => x.spooled)) expect(spooledIds.has(j.id) || duplicates.has(j.id)).toBe(true)
    passed = true
  }, LONG ? 1800000 : 330000)
})

// Moments of a kill the rounds above ran into, rebuilt one at a time: a job is run to success,
// the daemon killed, and the journal and files put back as a kill -9 at that moment leaves them
// (the journal is "last line per id wins", so one appended line rewinds the job). The restarted
// daemon must finish the job, not fail it.
describe('crash states the kill rounds ran into', () => {
  let sroot, sstate, store, sconfig, sdaemon, sbase

  beforeAll(async () => {
    for (const p of ['states-root-', 'states-state-', 'states-store-']) dirs.push(await tempDir(p))
    ;[sroot, sstate, store] = dirs.slice(-3)
    const port = await freePort()
    sbase = `http://127.0.0.1:${port}`
    sconfig = {
      listen: [`127.0.0.1:${port}`],
      stateDir: sstate,
      roots: [sroot],
      retry: { attempts: 2, baseDelayMs: 50, maxDelayMs: 100 },
      targets: { dav: { type: 'http', url: httpd.uploadUrl }, store: { type: 'file', dir: store } }
    }
    await fs.mkdir(path.join(httpd.davDir, 'states'), { recursive: true })
  })

  afterAll(async () => { await sdaemon?.kill('SIGKILL') })

  const call = async (method, p, body) => {
    const res = await request(sbase + p, { method, headers: { 'content-type': 'application/json' }, body: body && JSON.stringify(body) })
    return { status: res.statusCode, json: await res.body.json() }
  }
  const restart = async () => {
    await sdaemon?.kill('SIGKILL')
    sdaemon = await spawnDaemon(sconfig, { dir: sstate, logFile: path.join(sstate, 'daemon.log') })
  }

  // Runs `job` to success, kills the daemon, lets `rewind` put the files back, appends the job's
  // record with `fields` to the journal, restarts; returns the job as it ends then.
  async function rewound (job, fields, rewind) {
    await restart()
    expect((await call('POST', '/v1/jobs', job)).status).toBe(202)
    const done = (await call('GET', `/v1/jobs/${job.id}?wait=60`)).json
    expect(done.state).toBe('succeeded')
    await sdaemon.kill('SIGKILL')
    await rewind(done)
    const record = { ...done, state: 'running', finishedAt: null, error: null, ...fields }
    await fs.appendFile(path.join(sstate, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job: record }) + '\n')
    await restart()
    return (await call('GET', `/v1/jobs/${job.id}?wait=60`)).json
  }

  it('a download killed between link() and unlink() of its publish (overwrite false) ends succeeded, without its temp file', async () => {
    const remote = '/states/linked.bin'
    const sha256 = await makeFile(path.join(httpd.davDir, remote), 3 * MiB, 11)
    await httpd.chownToServer(path.join(httpd.davDir, 'states'))
    const local = path.join(sroot, 'linked.bin')
    const id = 'state-linked-download'
    // The verified download is journaled as "publishing"; its temp name was linked to the final one.
    const end = await rewound({ id, direction: 'download', target: 'dav', local, remote, overwrite: false, sha256 }, { phase: 'publishing' },
      () => fs.link(local, path.join(sroot, `.linked.bin.${id}.part`)))
    expect(end).toMatchObject({ state: 'succeeded', error: null, sha256 })
    expect((await fs.readdir(sroot)).filter((n) => n.includes('linked'))).toEqual(['linked.bin'])
  })

  it('an upload to a file target killed between link() and unlink() of its publish (overwrite false) ends succeeded, without its temp file', async () => {
    const local = path.join(sroot, 'up.bin')
    const sha256 = await makeFile(local, MiB, 12)
    const id = 'state-linked-upload'
    const end = await rewound({ id, direction: 'upload', target: 'store', local, remote: '/linked/up.bin', overwrite: false, sha256 }, { phase: 'publishing' },
      () => fs.link(path.join(store, 'linked', 'up.bin'), path.join(store, 'linked', `.up.bin.${id}._COPYING_`)))
    expect(end).toMatchObject({ state: 'succeeded', error: null, sha256 })
    expect(await fs.readdir(path.join(store, 'linked'))).toEqual(['up.bin'])
  })

  it('an httpd upload killed after its MOVE (temp gone, its file under the final name) ends succeeded', async () => {
    const local = path.join(sroot, 'moved.bin')
    const sha256 = await makeFile(local, MiB, 14)
    const end = await rewound({ id: 'state-moved-upload', direction: 'upload', target: 'dav', local, remote: '/states/moved.bin', overwrite: false, sha256 }, { phase: 'publishing' }, () => {})
    expect(end).toMatchObject({ state: 'succeeded', error: null, sha256 })
  })

  // Its MOVE refused (overwrite false) because another writer's file of the very same size took the
  // name first, and the temp removed, then the kill before "failed" was journaled: the restart must
  // not take that file for its own.
  it('an httpd upload killed after its publish was refused by a file of the same size does not end succeeded', async () => {
    const local = path.join(sroot, 'taken.bin')
    const sha256 = await makeFile(local, MiB, 15)
    const theirs = path.join(httpd.davDir, 'states', 'taken.bin')
    const end = await rewound({ id: 'state-taken-upload', direction: 'upload', target: 'dav', local, remote: '/states/taken.bin', overwrite: false, sha256 }, { phase: 'publishing' },
      () => makeFile(theirs, MiB, 16))
    expect(end).toMatchObject({ state: 'failed', error: { code: 'REMOTE_EXISTS' } })
    expect(await sha256File(theirs)).not.toBe(sha256)
  })

  it('an httpd download killed with every byte in its temp file, before it was verified, ends succeeded', async () => {
    const remote = '/states/whole.bin'
    const file = path.join(httpd.davDir, remote)
    const sha256 = await makeFile(file, 2 * MiB, 13)
    await httpd.chownToServer(path.join(httpd.davDir, 'states'))
    const past = new Date(Date.now() - 60000)
    await fs.utimes(file, past, past) // an ETag Apache calls strong, so the resume asks with If-Range
    const local = path.join(sroot, 'whole.bin')
    const id = 'state-whole-download'
    // The journal has the remote version (written when the body started) and nothing after it;
    // the temp file holds the whole body. Resuming asks for the range from its very end.
    const end = await rewound({ id, direction: 'download', target: 'dav', local, remote, overwrite: false, sha256 }, { bytes: 0, sha256: null },
      (done) => {
        expect(done.remoteVersion).toMatch(/^"/)
        return fs.rename(local, path.join(sroot, `.whole.bin.${id}.part`))
      })
    expect(end).toMatchObject({ state: 'succeeded', error: null, sha256, bytes: 2 * MiB })
    expect((await fs.readdir(sroot)).filter((n) => n.includes('whole'))).toEqual(['whole.bin'])
  })
})
