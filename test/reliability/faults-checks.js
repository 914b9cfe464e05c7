// Checks shared by reliability.faults.test.js and reliability.soak.test.js: the job error codes the
// README documents, what a finished job must look like, leftovers (temp names, partial files) on
// the local roots, on httpd's DAV directory and in HDFS, and a process's RSS and open fds.
import fs from 'node:fs/promises'
import { readFileSync, readdirSync } from 'node:fs'
import path from 'node:path'
import http from 'node:http'
import { createHash } from 'node:crypto'
import { procMemory, walkFiles, TEMP_NAME } from './daemon.js'

export const FINAL_STATES = ['succeeded', 'failed', 'cancelled']

// The codes of the README table "Codes a job can end with" (not errors.js: the README is the contract).
export function readmeJobCodes () {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  const start = readme.indexOf('Codes a job can end with')
  if (start < 0) throw new Error('README: the table of job error codes is gone')
  const table = readme.slice(start, readme.indexOf('\n## ', start))
  const codes = [...table.matchAll(/^\| ((?:`[A-Z0-9_]+`(?:, )?)+) \|/gm)].flatMap((m) => m[1].match(/[A-Z0-9_]+/g))
  if (codes.length < 10) throw new Error(`README: only ${codes.length} job error codes found`)
  return new Set(codes)
}

// Why a finished job is not acceptable, or null: it must have ended, a success must carry the
// expected sha256 and size, a failure or cancel a documented code.
export function badOutcome (job, { sha256, size, codes }) {
  if (!job || !FINAL_STATES.includes(job.state)) return `not finished: ${job?.state}`
  if (job.state === 'succeeded') {
    if (job.sha256 !== sha256) return `succeeded with sha256 ${job.sha256}, expected ${sha256}`
    if (size !== undefined && job.bytes !== size) return `succeeded with ${job.bytes} bytes, expected ${size}`
    return null
  }
  if (!codes.has(job.error?.code)) return `${job.state} with an undocumented code: ${JSON.stringify(job.error)}`
  return null
}

// Files under `dir` whose names only a transfer in progress, or one that left debris, would have.
export async function leftovers (dir) {
  return (await walkFiles(dir)).filter((rel) => TEMP_NAME.test(rel))
}

// Every file under an httpd DAV directory (on disk) with its size; one that httpd removes while
// we look (its own temp file of a PUT ending) is left out.
export async function davFiles (dir) {
  const out = []
  for (const rel of await walkFiles(dir).catch(() => [])) {
    const st = await fs.stat(path.join(dir, rel)).catch((err) => { if (err.code !== 'ENOENT') throw err })
    if (st) out.push({ path: rel, length: st.size })
  }
  return out
}

// A GET or DELETE straight at a server (node:http, no keep-alive: nothing left open between checks).
function get (url, { method = 'GET' } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent: false, timeout: 20000 })
    req.once('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within 20 s`)))
    req.once('error', reject)
    req.once('response', (res) => resolve(res))
    req.end()
  })
}

// WebHDFS straight at a namenode (no proxy, no daemon).
async function hdfsCall (namenode, p, op, { method = 'GET', user = 'www-data', extra = '' } = {}) {
  const res = await get(`${namenode}/webhdfs/v1${p}?op=${op}&user.name=${user}${extra}`, { method })
  let text = ''
  for await (const chunk of res) text += chunk
  let json = null
  try { json = JSON.parse(text) } catch {}
  return { status: res.statusCode, json, text }
}

// The namenode that answers reads now (the active one of an HA pair).
export async function activeNamenode (namenodes) {
  for (const nn of namenodes) {
    const r = await hdfsCall(nn, '/', 'GETFILESTATUS').catch(() => null)
    if (r?.status === 200) return nn
  }
  throw new Error(`no namenode of ${namenodes.join(', ')} answers GETFILESTATUS`)
}

// Every file under an HDFS directory with its length (an empty list when it does not exist).
export async function hdfsFiles (namenodes, dir) {
  const nn = await activeNamenode(namenodes)
  const out = []
  async function walk (d, prefix) {
    const r = await hdfsCall(nn, d, 'LISTSTATUS')
    if (r.status === 404) return
    if (r.status !== 200) throw new Error(`LISTSTATUS ${d}: ${r.status} ${r.text.slice(0, 300)}`)
    for (const s of r.json.FileStatuses.FileStatus) {
      const rel = prefix ? `${prefix}/${s.pathSuffix}` : s.pathSuffix
      if (s.type === 'DIRECTORY') await walk(`${d}/${s.pathSuffix}`, rel)
      else out.push({ path: rel, length: s.length })
    }
  }
  await walk(dir, '')
  return out
}

export async function hdfsRemove (namenodes, p) {
  const nn = await activeNamenode(namenodes)
  const r = await hdfsCall(nn, p, 'DELETE', { method: 'DELETE', extra: '&recursive=true' })
  if (r.status !== 200) throw new Error(`DELETE ${p}: ${r.status} ${r.text.slice(0, 300)}`)
}

// sha256 and size of an HDFS file, read straight from the datanode (two-step OPEN).
export async function hdfsSha256 (namenodes, p) {
  const nn = await activeNamenode(namenodes)
  const r = await hdfsCall(nn, p, 'OPEN', { extra: '&noredirect=true' })
  if (!r.json?.Location) throw new Error(`OPEN ${p}: ${r.status} ${r.text.slice(0, 300)}`)
  const res = await get(r.json.Location)
  if (res.statusCode !== 200) {
    res.resume()
    throw new Error(`OPEN ${p} on the datanode: ${res.statusCode}`)
  }
  const hash = createHash('sha256')
  let size = 0
  for await (const chunk of res) {
    hash.update(chunk)
    size += chunk.length
  }
  return { sha256: hash.digest('hex'), size }
}

// RSS (bytes) and open file descriptors of a process; null once it has gone.
export function processSample (pid) {
  const mem = procMemory(pid)
  if (!mem) return null
  let fds
  try {
    fds = readdirSync(`/proc/${pid}/fd`).length
  } catch {
    return null
  }
  return { rss: mem.rss, fds }
}

export function median (values) {
  const s = [...values].sort((a, b) => a - b)
  if (s.length === 0) return NaN
  const mid = s.length >> 1
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}

// Least-squares slope of value over time (units per minute), for the summary line.
export function slopePerMinute (samples, key) {
  const n = samples.length
  if (n < 2) return 0
  const xs = samples.map((s) => s.t / 60000)
  const ys = samples.map((s) => s[key])
  const mx = xs.reduce((a, b) => a + b, 0) / n
  const my = ys.reduce((a, b) => a + b, 0) / n
  let num = 0
  let den = 0
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my)
    den += (xs[i] - mx) ** 2
  }
  return den ? num / den : 0
}
