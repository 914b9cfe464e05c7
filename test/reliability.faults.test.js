// Backend faults through the daemon, against the real servers: a MiniDFSCluster with two namenodes
// (HA) and Apache httpd mod_dav, with a fault-injecting TCP proxy (harness/tcp-proxy.js) in front of
// every namenode, the datanode and httpd, so that every byte of a transfer, data and control calls
// alike, passes a proxy that can be told to misbehave. Uploads and downloads on both targets meet:
// connection resets at seeded offsets (both directions of the stream, data and control calls),
// stalls longer than timeouts.idleMs, a slow trickle, bursts of 503 answers, faults that never
// stop, cancels mid-transfer, a namenode failover while uploads are mid-body, an upload failing
// while no namenode answers, and a full local disk (an 8 MiB tmpfs mounted as a root; if it cannot
// be mounted the suite fails, it is never skipped).
//
// Every job must end (bounded waits) succeeded with the right sha256 and size, or failed with a
// code from the README's table; and nothing partial may be left: no temp or .part names on the
// local roots, in httpd's DAV directory or in HDFS, no final file of a failed upload or download,
// and every published file whole (hashed again at the end, straight from the servers).
// The offsets come from a fixed seed (SEED below), so a failure can be replayed.
// A table of what was tried is printed at the end (`scenario | what was tried | jobs | result`).
// CI budget: under 5 minutes.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { startHdfs } from './harness/hdfs.js'
import { startHttpd } from './harness/httpd.js'
import { startTcpProxy, startHdfsProxies } from './harness/tcp-proxy.js'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile, sha256File, exists } from './helpers/files.js'
import { seededRandom } from './reliability/daemon.js'
import {
  readmeJobCodes, badOutcome, leftovers, davFiles, hdfsFiles, hdfsSha256, activeNamenode
} from './reliability/faults-checks.js'

const MiB = 1 << 20
const SEED = 7707
const MEDIUM = 6 * MiB + 5 // what most jobs move
const BIG = 12 * MiB // more than the 8 MiB tmpfs root; and what the trickled jobs move
const FULL_SIZE = '8m'
const IDLE_MS = 2000 // timeouts.idleMs of the daemon: every stall below lasts longer
const ATTEMPTS = 5
const JOB_WAIT_S = 90 // no job may take longer than this to end
const TARGETS = ['hdfs', 'dav']
const DIRECTIONS = ['upload', 'download']
const CODES = readmeJobCodes()

const rand = seededRandom(SEED)
let hdfs, httpd, proxies, davProxy, sc, root, fullDir, mounted
const FILES = { medium: { size: MEDIUM }, big: { size: BIG } } // + local path and sha256 (beforeAll)
const published = new Map() // 'target:remote' of each succeeded upload → which file it sent
const results = [] // one row per job: what the table at the end sums up
let seq = 0

beforeAll(async () => {
  ;[hdfs, httpd] = await Promise.all([startHdfs({ ha: true }), startHttpd()])
  await hdfs.command('mkdir /data www-data 755')
  proxies = await startHdfsProxies(hdfs)
  davProxy = await startTcpProxy({ target: `127.0.0.1:${httpd.port}` })
  root = await tempDir('faults-root-')
  await fs.mkdir(path.join(root, 'src'))
  await fs.mkdir(path.join(root, 'dl'))
  fullDir = path.join(root, 'full')
  await fs.mkdir(fullDir)
  // Root is needed; a failure here fails the suite (never a skip).
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${FULL_SIZE},mode=0755`, 'tmpfs', fullDir], { stdio: 'pipe' })
  mounted = true
  for (const [kind, f] of Object.entries(FILES)) {
    f.local = path.join(root, 'src', `${kind}.bin`)
    f.sha256 = await makeFile(f.local, f.size, f.size)
  }
  sc = await startTestSidecar({
    roots: [root],
    extra: {
      timeouts: { connectMs: 2000, idleMs: IDLE_MS },
      retry: { attempts: ATTEMPTS, baseDelayMs: 50, maxDelayMs: 400 }
    },
    targets: {
      hdfs: { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', concurrency: 4 },
      dav: { type: 'http', url: `${davProxy.url}/upload/`, concurrency: 4 }
    }
  })
  // What downloads fetch, put in place through the daemon with no fault.
  for (const target of TARGETS) {
    for (const kind of Object.keys(FILES)) {
      const job = await sc.api.run({ direction: 'upload', target, local: FILES[kind].local, remote: `/faults/src/${kind}.bin`, overwrite: true }, JOB_WAIT_S)
      if (job.state !== 'succeeded') throw new Error(`setup upload to ${target}: ${JSON.stringify(job)}`)
    }
  }
  // httpd sends no ETag; a Last-Modified of the current second is too weak for If-Range, so age
  // the files to let broken downloads resume (as they would in production).
  const then = new Date(Date.now() - 100_000)
  for (const name of ['medium.bin', 'big.bin']) await fs.utimes(path.join(httpd.davDir, 'faults', 'src', name), then, then)
})

afterAll(async () => {
  try {
    printTable()
  } finally {
    await sc?.stop({ graceMs: 0 })
    await Promise.all([proxies?.stop(), davProxy?.stop()])
    if (mounted) unmount(fullDir)
    await Promise.all([hdfs?.stop(), httpd?.stop()])
    if (root) await fs.rm(root, { recursive: true, force: true })
  }
})

afterEach(() => {
  for (const p of allProxies()) p.fault(null)
})

function unmount (dir) {
  try {
    execFileSync('umount', [dir], { stdio: 'pipe' })
  } catch {
    execFileSync('umount', ['-l', dir], { stdio: 'pipe' }) // something still holds it: detach now, freed when released
  }
}

const allProxies = () => [...(proxies?.namenodes ?? []), ...(proxies?.datanodes ?? []), ...(davProxy ? [davProxy] : [])]
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

// A job of this suite: uploads send a file (medium or big) to /faults/up/<name>.bin; downloads
// fetch one into <dir>/<name>.bin. Nothing is ever overwritten.
function jobSpec (target, direction, name, { file = 'medium', dir = path.join(root, 'dl') } = {}) {
  if (direction === 'upload') return { direction, target, local: FILES[file].local, remote: `/faults/up/${name}.bin`, overwrite: false, file }
  return { direction, target, local: path.join(dir, `${name}.bin`), remote: `/faults/src/${file}.bin`, overwrite: false, file }
}
const body = ({ file, ...spec }) => spec // what is POSTed

// Where a fault goes: `where` is 'data' (the connection carrying the body) or the control call
// (a WebHDFS op on the active namenode, a WebDAV method on httpd); `match` picks this job's request.
function hopOf (target, direction, where, name) {
  const mine = direction === 'upload' ? `/faults/up/\\.?${esc(name)}\\.bin` : '/faults/src/(medium|big)\\.bin'
  if (target === 'hdfs') {
    if (where === 'data') {
      return direction === 'upload'
        ? { proxies: proxies.datanodes, match: new RegExp(`^PUT \\S*${mine}\\S*[?&]op=CREATE[& ]`) }
        : { proxies: proxies.datanodes, match: new RegExp(`^GET \\S*${mine}\\S*[?&]op=OPEN[& ]`) }
    }
    return { proxies: [proxies.namenodes[0]], match: new RegExp(`^[A-Z]+ \\S*${mine}\\S*[?&]op=${where}[& ]`) }
  }
  if (where === 'data') return { proxies: [davProxy], match: new RegExp(`^${direction === 'upload' ? 'PUT' : 'GET'} /upload${mine}`) }
  return { proxies: [davProxy], match: new RegExp(`^${where} /upload${mine}`) }
}

// A job's attempts as the daemon logged them (state, attempt, error code), for failure messages.
const history = (id) => sc.logs.records().filter((r) => r.job === id && r.msg === 'job state')
  .map((r) => `${r.state}#${r.attempts}${r.error ? ` ${r.error.code}: ${r.error.message}` : ''}`).join(' → ')

function record (job, { scenario, tried }) {
  const { target, direction, state, attempts } = job
  results.push({ scenario, tried, target, direction, state, attempts, code: job.error?.code ?? null })
  if (state !== 'succeeded') results.at(-1).history = `${job.remote}: ${history(job.id)}`
}

// Submits, waits (bounded) for the end, and checks what every job must satisfy; returns the job.
async function runJob (spec, meta) {
  return (await runJobs([spec], meta))[0]
}

// Several jobs at once; each is checked once all have ended (a running download's temp file is
// not a leftover).
async function runJobs (specs, { scenario, tried, local = true }) {
  const ids = []
  for (const spec of specs) {
    const r = await sc.api.submit(body(spec))
    expect(r.status, r.text).toBe(202)
    ids.push(r.json.id)
  }
  const jobs = await Promise.all(ids.map(async (id) => (await sc.api.job(id, JOB_WAIT_S)).json))
  for (const [i, job] of jobs.entries()) await checkJob(specs[i], job, { scenario, tried, local })
  return jobs
}

// What every job must satisfy once it has ended.
async function checkJob (spec, job, { scenario, tried, local = true }) {
  record(job, { scenario, tried })
  expect(badOutcome(job, { ...FILES[spec.file], codes: CODES }), history(job.id)).toBeNull()
  if (spec.direction === 'upload' && job.state === 'succeeded') published.set(`${spec.target}:${spec.remote}`, spec.file)
  await expectNoPartials(spec, job, { local })
}

// Nothing partial: the final file exists (and is whole) exactly when the job succeeded, and no
// temp names are left on the local roots or in the remote directory.
async function expectNoPartials (spec, job, { local = true } = {}) {
  const { sha256, size } = FILES[spec.file]
  if (local) expect(await leftovers(root)).toEqual([])
  if (spec.direction === 'download') {
    if (job.state === 'succeeded') {
      expect(await sha256File(spec.local)).toBe(sha256)
      await fs.rm(spec.local)
    } else {
      expect(await exists(spec.local)).toBe(false)
    }
    return
  }
  const name = path.posix.basename(spec.remote)
  const list = () => spec.target === 'dav'
    ? davFiles(path.join(httpd.davDir, 'faults', 'up'))
    : hdfsFiles(hdfs.namenodes, '/data/faults/up')
  let files = await list()
  // A datanode may still create the temp file of a PUT cut under it after the job's own DELETE:
  // the failed job sweeps its temp name again 1 and 5 s later (transfer.js, discardPartial).
  for (const end = Date.now() + 7000; job.state !== 'succeeded' && files.some((f) => f.path.includes(`.${job.id}.`)) && Date.now() < end;) {
    await new Promise((resolve) => setTimeout(resolve, 250))
    files = await list()
  }
  // This job's temp name (it carries the job id); everyone's are checked at the end, and httpd's
  // own `.davfs.tmp*` by expectNoDavTemp.
  expect(files.filter((f) => f.path.includes(`.${job.id}.`)), history(job.id)).toEqual([])
  const final = files.find((f) => f.path === name)
  if (job.state === 'succeeded') expect(final, history(job.id)).toEqual({ path: name, length: size })
  else expect(final, history(job.id)).toBeUndefined()
  if (job.state === 'succeeded' && spec.target === 'dav') expect(await sha256File(path.join(httpd.davDir, 'faults', 'up', name))).toBe(sha256)
}

// One row: `fault` on the hop, taken by this job's matching connections (`connections` of them, or
// all until cleared), then the job; the fault must have been taken at least once.
async function faultRow (row) {
  const name = `${row.slug}-${row.target}-${row.direction}-${++seq}`
  const hop = hopOf(row.target, row.direction, row.where, name)
  const taken = () => hop.proxies.reduce((n, p) => n + p.stats.faulted, 0)
  const before = taken()
  for (const p of hop.proxies) p.fault({ ...row.fault, match: hop.match })
  let job
  try {
    job = await runJob(jobSpec(row.target, row.direction, name, { file: row.file }), { scenario: row.scenario, tried: row.tried })
  } finally {
    for (const p of hop.proxies) p.fault(null)
    // A stalled connection stays open on the server's side; the daemon gave up on it long ago, so
    // let the server know (as it would without a proxy between them).
    if (row.fault.stallAfter !== undefined) for (const p of hop.proxies) p.resetAll()
  }
  expect(taken() - before, 'the fault was never applied').toBeGreaterThan(0)
  if (row.want === 'succeeded') {
    expect(job.state, history(job.id)).toBe('succeeded')
    if (row.attempts) expect(job.attempts, history(job.id)).toBe(row.attempts)
    if (row.minAttempts) expect(job.attempts, history(job.id)).toBeGreaterThanOrEqual(row.minAttempts)
  } else {
    expect(job, history(job.id)).toMatchObject({ state: 'failed', attempts: ATTEMPTS, error: { code: row.want } })
  }
  if (row.target === 'dav' && row.direction === 'upload') await expectNoDavTemp()
  return job
}

// mod_dav_fs writes a PUT body to its own `.davfs.tmp*` file and removes it when the PUT ends,
// also when the client went away; after a stall that happens once the connection is closed.
async function expectNoDavTemp () {
  const dir = path.join(httpd.davDir, 'faults', 'up')
  const temps = async () => (await davFiles(dir)).filter((f) => f.path.startsWith('.'))
  await waitFor(async () => (await temps()).length === 0, { timeoutMs: 10000, intervalMs: 100 }).catch(() => {})
  expect(await temps()).toEqual([])
}

// The table of rows, built once from the seed (same seed, same offsets).
const combos = TARGETS.flatMap((target) => DIRECTIONS.map((direction) => ({ target, direction })))
const bodyFlow = (direction) => direction === 'upload' ? 'up' : 'down' // where the file's bytes go
const otherFlow = (direction) => direction === 'upload' ? 'down' : 'up' // the request or the answer
const label = (r) => `${r.target} ${r.direction}: ${r.what}`
const rows = []
const add = (scenario, tried, list) => { for (const r of list) rows.push({ scenario, tried, ...r, label: label(r) }) }

// Offsets past the first 4 KiB, so the cut falls in the body, not in the answer's head.
add('reset mid-body', 'RST at 3 seeded body offsets, once', combos.flatMap(({ target, direction }) =>
  [0, 1, 2].map(() => {
    const at = rand.int(4096, MEDIUM - 1)
    return { target, direction, slug: 'rst', where: 'data', fault: { resetAfter: at, direction: bodyFlow(direction), connections: 1 }, want: 'succeeded', minAttempts: 2, what: `RST after ${at} body-stream bytes` }
  })))
add('reset of the request or answer', 'RST at 2 seeded offsets < 64 of the other stream, once', combos.flatMap(({ target, direction }) =>
  [0, 1].map(() => {
    const at = rand.int(0, 63)
    return { target, direction, slug: 'rsth', where: 'data', fault: { resetAfter: at, direction: otherFlow(direction), connections: 1 }, want: 'succeeded', what: `RST after ${at} bytes of the ${direction === 'upload' ? 'answer' : 'request'}` }
  })))
const controlCalls = [
  ['hdfs', 'upload', ['CREATE', 'GETFILESTATUS', 'RENAME']],
  ['hdfs', 'download', ['GETFILESTATUS', 'OPEN', 'GETFILECHECKSUM']],
  ['dav', 'upload', ['GET', 'MOVE']] // GET: the first byte, whether the final and the temp name exist
]
add('reset on a control call', 'RST at a seeded offset < 64 in a seeded direction, once', controlCalls.flatMap(([target, direction, calls]) =>
  calls.map((where) => {
    const flow = rand.pick(['up', 'down'])
    const at = rand.int(0, 63)
    return { target, direction, slug: 'rstc', where, fault: { resetAfter: at, direction: flow, connections: 1 }, want: 'succeeded', what: `${where} ${flow === 'up' ? 'request' : 'answer'} cut after ${at} bytes` }
  })))
add('answer of the publish lost', 'RENAME/MOVE done by the server, its answer cut at byte 0', [
  { target: 'hdfs', direction: 'upload', slug: 'lost', where: 'RENAME', fault: { resetAfter: 0, connections: 1 }, want: 'succeeded', what: 'RENAME answer lost' },
  { target: 'dav', direction: 'upload', slug: 'lost', where: 'MOVE', fault: { resetAfter: 0, connections: 1 }, want: 'succeeded', what: 'MOVE answer lost' }
])
add('stall mid-body', `body stops at a seeded offset for longer than idleMs (${IDLE_MS} ms), once`, combos.map(({ target, direction }) => {
  const at = rand.int(4096, MEDIUM - 1)
  return { target, direction, slug: 'stall', where: 'data', fault: { stallAfter: at, direction: bodyFlow(direction), connections: 1 }, want: 'succeeded', minAttempts: 2, what: `stall after ${at} bytes` }
}))
add('stall on a control call', 'no answer at all, longer than idleMs, once', [
  { target: 'hdfs', direction: 'upload', slug: 'stallc', where: 'RENAME', fault: { stallAfter: 0, connections: 1 }, want: 'succeeded', what: 'RENAME unanswered' },
  { target: 'hdfs', direction: 'download', slug: 'stallc', where: 'GETFILESTATUS', fault: { stallAfter: 0, connections: 1 }, want: 'succeeded', what: 'GETFILESTATUS unanswered' },
  { target: 'dav', direction: 'upload', slug: 'stallc', where: 'GET', fault: { stallAfter: 0, connections: 1 }, want: 'succeeded', what: 'first-byte GET unanswered' },
  { target: 'dav', direction: 'upload', slug: 'stallc', where: 'MOVE', fault: { stallAfter: 0, connections: 1 }, want: 'succeeded', what: 'MOVE unanswered' }
])
// 4 MiB/s, not slower: an upload's last bytes wait in socket buffers (~4.7 MB measured here) after
// the daemon's last write, and must drain within idleMs (see the report: at 1 MiB/s they do not).
add('slow trickle', `${BIG / MiB} MiB at 4 MiB/s: ~3 s in all, more than idleMs, but never idle`, combos.map(({ target, direction }) =>
  ({ target, direction, file: 'big', slug: 'slow', where: 'data', fault: { rate: 4 * MiB, direction: bodyFlow(direction), connections: 1 }, want: 'succeeded', attempts: 1, what: 'trickled at 4 MiB/s' })))
add('503 burst', 'the proxy answers 503 to 3 requests, then passes', [
  ...combos.map(({ target, direction }) => ({ target, direction, slug: 'busy', where: 'data', fault: { status: 503, connections: 3 }, want: 'succeeded', minAttempts: 2, what: `${direction === 'upload' ? 'PUT' : 'GET'} of the body` })),
  { target: 'hdfs', direction: 'upload', slug: 'busyc', where: 'CREATE', fault: { status: 503, connections: 3 }, want: 'succeeded', what: 'namenode CREATE' },
  { target: 'hdfs', direction: 'download', slug: 'busyc', where: 'OPEN', fault: { status: 503, connections: 3 }, want: 'succeeded', what: 'namenode OPEN' },
  { target: 'dav', direction: 'upload', slug: 'busyc', where: 'GET', fault: { status: 503, connections: 3 }, want: 'succeeded', what: 'first-byte GET' },
  { target: 'dav', direction: 'upload', slug: 'busyc', where: 'MOVE', fault: { status: 503, connections: 3 }, want: 'succeeded', what: 'MOVE' }
])
add('fault that never stops', `every attempt meets it: the job fails after ${ATTEMPTS} attempts with a coded reason`, [
  { target: 'hdfs', direction: 'upload', slug: 'dead', where: 'data', fault: { resetAfter: rand.int(4096, MEDIUM - 1), direction: 'up' }, want: 'NETWORK_ERROR', what: 'every body PUT reset' },
  { target: 'hdfs', direction: 'download', slug: 'dead', where: 'data', fault: { status: 503 }, want: 'REMOTE_UNAVAILABLE', what: 'every datanode GET answered 503' },
  { target: 'dav', direction: 'upload', slug: 'dead', where: 'data', fault: { stallAfter: rand.int(4096, MEDIUM - 1), direction: 'up' }, want: 'TIMEOUT', what: 'every body PUT stalls' },
  { target: 'dav', direction: 'download', slug: 'dead', where: 'data', fault: { resetAfter: rand.int(4096, MEDIUM - 1) }, want: 'NETWORK_ERROR', what: 'every GET reset' }
])

describe(`faults between the daemon and the servers (seed ${SEED})`, () => {
  it.each(rows)('$scenario — $label', async (row) => {
    await faultRow(row)
  })
})

// Not a server fault, but the same promise: a cancelled upload leaves no temp file, also when the
// cancel lands while the server is still setting the file up (a datanode creates it on receiving
// the PUT, possibly after the daemon's DELETE of the temp name).
describe('cancelled mid-transfer', () => {
  it.each(TARGETS)('%s: 12 uploads cancelled 0–165 ms after submission: no temp file, no file published by a cancelled job', async (target) => {
    const scenario = 'cancel mid-transfer'
    const tried = 'DELETE /v1/jobs/{id} 0–165 ms after submission (medium file)'
    for (let i = 0; i < 12; i++) {
      const spec = jobSpec(target, 'upload', `cancel-${target}-${++seq}`)
      const r = await sc.api.submit(body(spec))
      await new Promise((resolve) => setTimeout(resolve, i * 15))
      const c = await sc.api.call('DELETE', `/v1/jobs/${r.json.id}`)
      expect([200, 409], c.text).toContain(c.status) // 409: it had ended already
      const job = (await sc.api.job(r.json.id, JOB_WAIT_S)).json
      record(job, { scenario, tried })
      expect(badOutcome(job, { ...FILES.medium, codes: CODES }), history(job.id)).toBeNull()
      if (job.state === 'succeeded') published.set(`${target}:${spec.remote}`, 'medium')
      // Published exactly when it says it succeeded: a cancel that lands during the publish must
      // not report "cancelled" for a file the server has renamed into place.
      const final = (target === 'dav' ? await davFiles(path.join(httpd.davDir, 'faults', 'up')) : await hdfsFiles(hdfs.namenodes, '/data/faults/up'))
        .find((f) => f.path === path.posix.basename(spec.remote))
      expect({ state: job.state, published: Boolean(final) }, history(job.id)).toEqual({ state: job.state, published: job.state === 'succeeded' })
    }
    const temps = async () => (target === 'dav' ? await davFiles(path.join(httpd.davDir, 'faults', 'up')) : await hdfsFiles(hdfs.namenodes, '/data/faults/up'))
      .filter((f) => f.path.startsWith('.'))
    await waitFor(async () => (await temps()).length === 0, { timeoutMs: 15000, intervalMs: 250 }).catch(() => {})
    expect(await temps()).toEqual([])
  })

  // The same race made certain: the server has renamed the file into place but its answer is held
  // back when the cancel arrives. The job must then not end "cancelled" with its file published.
  it.each([['hdfs', 'RENAME'], ['dav', 'MOVE']])('%s: a cancel while the %s answer is on its way does not report a published file as cancelled', async (target, call) => {
    const scenario = 'cancel during publish'
    const tried = 'RENAME/MOVE done by the server, its answer held back; DELETE /v1/jobs/{id} meanwhile'
    const spec = jobSpec(target, 'upload', `cancelpub-${target}-${++seq}`)
    const hop = hopOf(target, 'upload', call, path.posix.basename(spec.remote, '.bin'))
    const taken = () => hop.proxies.reduce((n, p) => n + p.stats.faulted, 0)
    const before = taken()
    for (const p of hop.proxies) p.fault({ stallAfter: 0, connections: 1, match: hop.match })
    let job, cancel
    try {
      const r = await sc.api.submit(body(spec))
      await waitFor(() => taken() > before, { timeoutMs: 30000 })
      await new Promise((resolve) => setTimeout(resolve, 300)) // the server does the rename
      cancel = await sc.api.call('DELETE', `/v1/jobs/${r.json.id}`)
      job = (await sc.api.job(r.json.id, JOB_WAIT_S)).json
    } finally {
      for (const p of hop.proxies) {
        p.fault(null)
        p.resetAll()
      }
    }
    record(job, { scenario, tried })
    expect([200, 409], cancel.text).toContain(cancel.status)
    expect(badOutcome(job, { ...FILES.medium, codes: CODES }), history(job.id)).toBeNull()
    const final = (target === 'dav' ? await davFiles(path.join(httpd.davDir, 'faults', 'up')) : await hdfsFiles(hdfs.namenodes, '/data/faults/up'))
      .find((f) => f.path === path.posix.basename(spec.remote))
    expect({ state: job.state, published: Boolean(final) }, history(job.id)).toEqual({ state: job.state, published: job.state === 'succeeded' })
    if (job.state === 'succeeded') published.set(`${target}:${spec.remote}`, 'medium')
  })
})

describe(`local disk full (an ${FULL_SIZE} tmpfs as a root)`, () => {
  it.each(TARGETS)('a %s download bigger than the disk fails with LOCAL_IO, leaves nothing, and the daemon goes on', async (target) => {
    const tried = `${BIG / MiB} MiB download into the ${FULL_SIZE} tmpfs, an upload beside it`
    const name = `full-${target}-${++seq}`
    const [big, beside] = await runJobs([
      jobSpec(target, 'download', name, { file: 'big', dir: fullDir }),
      jobSpec(target, 'upload', `beside-${name}`)
    ], { scenario: 'disk full', tried })
    expect(big).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'LOCAL_IO' } })
    expect(big.error.message).toMatch(/ENOSPC/)
    expect(beside.state).toBe('succeeded')
    expect(await fs.readdir(fullDir)).toEqual([]) // no .part, no truncated file
    const st = await fs.statfs(fullDir)
    expect(st.bfree).toBe(st.blocks) // every block given back
    // The space really is back, and the daemon takes the next job into the same root.
    const after = await runJob(jobSpec(target, 'download', `after-${name}`, { dir: fullDir }), { scenario: 'disk full', tried })
    expect(after.state).toBe('succeeded')
  })
})

// webhdfs.ha.test.js runs streams of fast jobs through a graceful transition and a crash; here a
// couple of uploads are in the middle of their bodies (trickled) when the active namenode crashes
// (as clients see it: its proxy resets open connections and refuses new ones) and the standby is
// made active; then jobs follow. Each must end cleanly, and nothing partial may remain.
// (MiniDFSCluster's shutdownNameNode blocks for 60 s here when WebHDFS requests are in flight at
// the namenode, longer than the jobs' retries; the proxy plays the crash instead.)
describe('namenode failover during transfers', () => {
  it('the active namenode crashes mid-upload and the standby is made active: every job ends cleanly', async () => {
    const scenario = 'namenode failover'
    const tried = 'active namenode crashes mid-upload (proxy refuses), standby made active; jobs right after'
    for (const p of proxies.datanodes) p.fault({ rate: 3 * MiB, direction: 'up', match: /[?&]op=CREATE[& ]/ }) // ~4 s per upload
    const specs = [0, 1].map((i) => jobSpec('hdfs', 'upload', `failover-${i}-${++seq}`, { file: 'big' }))
    const ids = []
    for (const spec of specs) ids.push((await sc.api.submit(body(spec))).json.id)
    await waitFor(async () => (await Promise.all(ids.map((id) => sc.api.job(id)))).every((j) => j.json.bytes > 2 * MiB), { timeoutMs: 30000 })
    const failovers = () => sc.logs.records().filter((r) => r.msg === 'namenode failover').length
    const before = failovers()
    await proxies.namenodes[0].refuse()
    await hdfs.command('transition-to-standby 0')
    await hdfs.command('transition-to-active 1')
    for (const p of proxies.datanodes) p.fault(null)
    const ended = await Promise.all(ids.map(async (id) => (await sc.api.job(id, JOB_WAIT_S)).json))
    for (const [i, job] of ended.entries()) await checkJob(specs[i], job, { scenario, tried })
    // Jobs submitted right after go to the new active namenode.
    const after = await runJobs([
      jobSpec('hdfs', 'download', `failover-dl-${++seq}`),
      jobSpec('hdfs', 'download', `failover-dl-${++seq}`),
      jobSpec('hdfs', 'upload', `failover-up-${++seq}`)
    ], { scenario, tried })
    expect(after.map((j) => j.state)).toEqual(['succeeded', 'succeeded', 'succeeded'])
    expect(failovers()).toBeGreaterThan(before)
    expect(await activeNamenode(hdfs.namenodes)).toBe(hdfs.namenodes[1])
  })

  // A failed upload removes its temp file, also when the namenodes could not be reached at the
  // moment it failed: the removal must happen once they answer again.
  it('an upload that fails while no namenode answers leaves no temp file once they are back', async () => {
    const scenario = 'namenodes unreachable at clean-up'
    const tried = 'upload fails (wrong sha256) while both namenode proxies refuse; then they accept again'
    const spec = jobSpec('hdfs', 'upload', `cleanup-${++seq}`, { file: 'big' })
    for (const p of proxies.datanodes) p.fault({ rate: 4 * MiB, direction: 'up', match: /[?&]op=CREATE[& ]/, connections: 1 })
    const r = await sc.api.submit({ ...body(spec), sha256: '0'.repeat(64) })
    await waitFor(async () => (await sc.api.job(r.json.id)).json.bytes > 2 * MiB, { timeoutMs: 30000 })
    // The datanode finishes the file through its own RPC connection; the daemon then finds the
    // sha256 wrong and tries to delete the temp file through the (refusing) proxies.
    for (const p of proxies.namenodes) await p.refuse()
    let job
    try {
      job = (await sc.api.job(r.json.id, JOB_WAIT_S)).json
    } finally {
      for (const p of proxies.namenodes) await p.accept()
    }
    expect(job, history(job.id)).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'SHA256_MISMATCH' } })
    record(job, { scenario, tried })
    const temps = async () => (await hdfsFiles(hdfs.namenodes, '/data/faults/up')).filter((f) => f.path.includes('_COPYING_'))
    await waitFor(async () => (await temps()).length === 0, { timeoutMs: 30000, intervalMs: 250 }).catch(() => {})
    expect(await temps()).toEqual([])
  })
})

describe('at the end', () => {
  it('every published file on both servers is whole, and nothing temporary is left anywhere', async () => {
    expect(await leftovers(root)).toEqual([])
    expect(await fs.readdir(path.join(root, 'dl'))).toEqual([])
    const dav = await davFiles(path.join(httpd.davDir, 'faults'))
    const hdfsUp = await hdfsFiles(hdfs.namenodes, '/data/faults')
    for (const list of [dav, hdfsUp]) {
      expect(list.filter((f) => /(^|\/)\./.test(f.path) || f.path.includes('_COPYING_'))).toEqual([])
    }
    // Exactly the succeeded uploads are there, each whole.
    for (const [target, list] of [['dav', dav], ['hdfs', hdfsUp]]) {
      const want = [...published.keys()].filter((k) => k.startsWith(`${target}:`)).map((k) => k.slice(target.length + 1)).sort()
      expect(list.filter((f) => f.path.startsWith('up/')).map((f) => `/faults/${f.path}`).sort()).toEqual(want)
    }
    for (const f of hdfsUp.filter((x) => x.path.startsWith('up/'))) {
      const { sha256, size } = FILES[published.get(`hdfs:/faults/${f.path}`)]
      expect(await hdfsSha256(hdfs.namenodes, `/data/faults/${f.path}`), f.path).toEqual({ sha256, size })
    }
    for (const f of dav.filter((x) => x.path.startsWith('up/'))) {
      expect(await sha256File(path.join(httpd.davDir, 'faults', f.path)), f.path).toBe(FILES[published.get(`dav:/faults/${f.path}`)].sha256)
    }
  })
})

// scenario | what was tried | jobs | result, one line per scenario (copied into RELIABILITY.md).
function printTable () {
  const by = new Map()
  for (const r of results) {
    const key = `${r.scenario} | ${r.tried}`
    by.set(key, [...(by.get(key) ?? []), r])
  }
  const lines = ['| scenario | what was tried | jobs | result |', '|---|---|---|---|']
  for (const [key, list] of by) {
    const outcomes = new Map()
    for (const r of list) {
      const k = r.state === 'succeeded' ? 'succeeded' : `${r.state} ${r.code}`
      outcomes.set(k, [...(outcomes.get(k) ?? []), r.attempts])
    }
    const result = [...outcomes].map(([k, att]) => `${att.length} ${k} (attempts ${Math.min(...att)}–${Math.max(...att)})`).join(', ')
    const targets = [...new Set(list.map((r) => `${r.target} ${r.direction}`))].join(', ')
    lines.push(`| ${key} (${targets}) | ${list.length} | ${result} |`)
  }
  const failed = results.filter((r) => r.history).map((r) => `${r.scenario}: ${r.target} ${r.direction} ${r.history}`)
  console.log(`reliability.faults seed ${SEED}\n${lines.join('\n')}\njobs that did not succeed:\n${failed.join('\n')}`)
}
