// Helpers of the reliability suites: the daemon as a real child process whose logs go to a file
// (100,000 jobs make hundreds of MB of JSON lines; they must not pile up in the test's memory),
// its memory from /proc, a seeded random, PHP child processes and WebHDFS/WebDAV listings.
import fs from 'node:fs/promises'
import { openSync, closeSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { pipeline } from 'node:stream/promises'
import { createReadStream } from 'node:fs'
import http from 'node:http'
import { request, Agent } from 'undici'
import { killOnExit } from '../harness/children.js'

const BIN = new URL('../../bin/transfer-sidecar.js', import.meta.url).pathname
export { PRODUCTION_FLAGS } from '../helpers/node-flags.js'
export const PHP_DIR = new URL('./', import.meta.url).pathname
export const MiB = 1 << 20

// A small seeded PRNG (mulberry32), so a run's random choices can be replayed from its seed.
export function seededRandom (seed) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  next.int = (min, max) => min + Math.floor(next() * (max - min + 1)) // inclusive
  next.pick = (items) => items[Math.floor(next() * items.length)]
  return next
}

// The seed of this run: RELIABILITY_SEED to replay one, else a fresh one.
export function runSeed () {
  const fromEnv = process.env.RELIABILITY_SEED
  if (fromEnv !== undefined && fromEnv !== '') {
    const n = Number(fromEnv)
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`RELIABILITY_SEED must be a non-negative integer, got ${fromEnv}`)
    return n
  }
  return Math.floor(Math.random() * 2 ** 31)
}

// VmRSS and VmHWM (peak RSS) of a process, in bytes; null once it has gone.
export function procMemory (pid) {
  let text
  try {
    text = readFileSync(`/proc/${pid}/status`, 'utf8')
  } catch {
    return null
  }
  const kib = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024
  return { rss: kib('VmRSS'), hwm: kib('VmHWM') }
}

// CPU time (user + system) a process has used so far, in seconds.
export function procCpuSeconds (pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100 // utime, stime in clock ticks (USER_HZ = 100)
}

// Samples a process's RSS every `intervalMs` until stopped; keeps the highest VmRSS and VmHWM seen.
export function memorySampler (pid, intervalMs = 200) {
  const peak = { rss: 0, hwm: 0 }
  const take = () => {
    const m = procMemory(pid)
    if (m) {
      peak.rss = Math.max(peak.rss, m.rss)
      peak.hwm = Math.max(peak.hwm, m.hwm)
    }
  }
  take()
  const timer = setInterval(take, intervalMs)
  return { peak, stop () { clearInterval(timer); take(); return peak } }
}

async function healthy (dispatcher, url) {
  try {
    const res = await request(url, { dispatcher, headersTimeout: 2000, bodyTimeout: 2000 })
    await res.body.dump()
    return res.statusCode === 200
  } catch {
    return false
  }
}

// Starts bin/transfer-sidecar.js with `config` (written to `dir`/config.json); stdout and stderr
// go to `logFile`. Resolves once GET /healthz answers on the first listener, with the time that
// took (journal replay included). kill() sends a signal and resolves with how it exited.
export async function spawnDaemon (config, { dir, logFile, timeoutMs = 120000, env = {}, nodeArgs = [] }) {
  const file = path.join(dir, 'config.json')
  await fs.writeFile(file, JSON.stringify(config))
  const first = config.listen[0]
  const dispatcher = first.startsWith('unix:') ? new Agent({ connect: { socketPath: first.slice(5) } }) : undefined
  const healthUrl = first.startsWith('unix:') ? 'http://localhost/healthz' : `http://${first}/healthz`
  const fd = openSync(logFile, 'a')
  const started = Date.now()
  let child
  try {
    child = killOnExit(spawn(process.execPath, [...nodeArgs, BIN], { env: { ...process.env, ...env, SIDECAR_CONFIG: file }, stdio: ['ignore', fd, fd] }))
  } finally {
    closeSync(fd)
  }
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  let gone = null
  exited.then((how) => { gone = how })
  try {
    for (;;) {
      if (gone) throw new Error(`the daemon exited (${JSON.stringify(gone)}) before it was ready:\n${await logTail(logFile)}`)
      if (await healthy(dispatcher, healthUrl)) break
      if (Date.now() - started > timeoutMs) {
        child.kill('SIGKILL')
        throw new Error(`the daemon was not ready within ${timeoutMs} ms:\n${await logTail(logFile)}`)
      }
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  } finally {
    await dispatcher?.close()
  }
  return {
    child,
    pid: child.pid,
    readyMs: Date.now() - started,
    exited,
    kill (signal = 'SIGKILL') {
      if (!gone) child.kill(signal)
      return exited
    }
  }
}

export async function logTail (file, lines = 30) {
  const text = await fs.readFile(file, 'utf8').catch(() => '')
  return text.trimEnd().split('\n').slice(-lines).join('\n')
}

// The JSON log lines of a daemon log file whose `msg` is `msg`.
export async function logRecords (file, msg) {
  const text = await fs.readFile(file, 'utf8').catch(() => '')
  const out = []
  for (const line of text.split('\n')) {
    if (!line.includes(`"msg":"${msg}"`)) continue
    try { out.push(JSON.parse(line)) } catch { /* a line cut by kill -9 */ }
  }
  return out
}

// Runs `php script args…`; resolves with its exit code, stdout and stderr.
export function runPhp (script, args, { onLine } = {}) {
  return new Promise((resolve, reject) => {
    const child = killOnExit(spawn('php', ['-d', 'memory_limit=512M', path.join(PHP_DIR, script), ...args], { stdio: ['ignore', 'pipe', 'pipe'] }))
    let stdout = ''
    let stderr = ''
    let partial = ''
    child.stdout.on('data', (d) => {
      stdout += d
      if (!onLine) return
      const parts = (partial + d).split('\n')
      partial = parts.pop()
      for (const l of parts) if (l) onLine(l)
    })
    child.stderr.on('data', (d) => { stderr += d })
    child.once('error', reject)
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
}

export async function sha256File (file) {
  const hash = createHash('sha256')
  await pipeline(createReadStream(file, { highWaterMark: MiB }), hash)
  return hash.digest('hex')
}

export function percentile (sorted, p) {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]
}

// Every file under `dir`, as paths relative to it (directories are walked, not listed).
export async function walkFiles (dir, prefix = '') {
  const out = []
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name
    if (entry.isDirectory()) out.push(...await walkFiles(path.join(dir, entry.name), rel))
    else out.push(rel)
  }
  return out
}

// Names that only a transfer in progress (or one that left debris) would create.
export const TEMP_NAME = /(\.part|\._COPYING_|\.tmp|\.tmp-.*)$|^\.|\/\./

// WebHDFS, directly (not through the daemon): LISTSTATUS, a two-step CREATE, a hashed OPEN.
export function webhdfs (namenode, user = 'www-data') {
  const url = (p, op, extra = '') => `${namenode}/webhdfs/v1${p}?op=${op}&user.name=${user}${extra}`
  return {
    async list (dir) {
      const res = await request(url(dir, 'LISTSTATUS'))
      const body = await res.body.json()
      if (res.statusCode === 404) return null
      if (res.statusCode !== 200) throw new Error(`LISTSTATUS ${dir}: ${res.statusCode} ${JSON.stringify(body)}`)
      return body.FileStatuses.FileStatus.map((s) => ({ name: s.pathSuffix, type: s.type, length: s.length }))
    },
    async put (remote, file) {
      const res = await request(url(remote, 'CREATE', '&overwrite=true&noredirect=true'), { method: 'PUT' })
      const { Location } = await res.body.json()
      if (!Location) throw new Error(`CREATE ${remote}: ${res.statusCode}`)
      // node:http, not undici: the datanode sends an unasked-for "100 Continue" that undici refuses.
      const { size } = await fs.stat(file)
      const status = await new Promise((resolve, reject) => {
        const req = http.request(Location, { method: 'PUT', headers: { 'content-length': String(size) } }, (res) => {
          res.resume()
          res.once('end', () => resolve(res.statusCode))
        })
        req.once('error', reject)
        pipeline(createReadStream(file), req).catch(reject)
      })
      if (status !== 201) throw new Error(`CREATE ${remote} on the datanode: ${status}`)
    },
    async sha256 (remote) {
      const res = await request(url(remote, 'OPEN', '&noredirect=true'))
      const { Location } = await res.body.json()
      if (!Location) throw new Error(`OPEN ${remote}: ${res.statusCode}`)
      const data = await request(Location)
      if (data.statusCode !== 200) throw new Error(`OPEN ${remote} on the datanode: ${data.statusCode}`)
      const hash = createHash('sha256')
      let size = 0
      for await (const chunk of data.body) {
        hash.update(chunk)
        size += chunk.length
      }
      return { sha256: hash.digest('hex'), size }
    }
  }
}
