// Starts the daemon for tests: in-process (startTestSidecar) or as a child process (spawnSidecar,
// for kill -9 and signal tests). Each gets its own temp state dir and loopback port.
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { Writable } from 'node:stream'
import { request, Agent } from 'undici'
import { startSidecar, validateConfig } from '../../src/index.js'
import { createLogger } from '../../src/logger.js'
import { PRODUCTION_FLAGS } from '../reliability/daemon.js'

const BIN = new URL('../../bin/transfer-sidecar.js', import.meta.url).pathname

// Temp dirs made by a test file are removed after it (test/setup.js), unless KEEP_TEST_DIRS=1:
// a suite run leaves nothing in /tmp, which repeated runs had filled.
const made = []

export async function tempDir (prefix = 'sidecar-test-') {
  const dir = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), prefix)))
  made.push(dir)
  return dir
}

export async function removeTempDirs () {
  if (process.env.KEEP_TEST_DIRS) return
  for (const dir of made.splice(0)) await fs.rm(dir, { recursive: true, force: true })
}

// Captures pino's JSON lines in memory.
export function captureLogs () {
  const lines = []
  const stream = new Writable({
    write (chunk, enc, cb) {
      lines.push(...chunk.toString().split('\n').filter(Boolean))
      cb()
    }
  })
  return { stream, lines, records: () => lines.map((l) => JSON.parse(l)) }
}

export function client (base, { socketPath, token } = {}) {
  const dispatcher = socketPath ? new Agent({ connect: { socketPath } }) : undefined
  async function call (method, p, body, headers = {}) {
    const res = await request(new URL(p, base), {
      method,
      dispatcher,
      headers: { ...(body !== undefined && { 'content-type': 'application/json' }), ...(token && { authorization: `Bearer ${token}` }), ...headers },
      body: body === undefined ? undefined : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body)
    })
    const text = await res.body.text()
    let json = null
    try { json = JSON.parse(text) } catch {}
    return { status: res.statusCode, headers: res.headers, json, text }
  }
  return {
    call,
    submit: (job) => call('POST', '/v1/jobs', job),
    job: (id, wait) => call('GET', `/v1/jobs/${id}${wait ? `?wait=${wait}` : ''}`),
    // Submits and waits for the end; fails the test if it was not accepted.
    async run (job, wait = 120) {
      const r = await call('POST', '/v1/jobs', job)
      if (r.status !== 202) throw new Error(`submit answered ${r.status}: ${r.text}`)
      return (await call('GET', `/v1/jobs/${r.json.id}?wait=${wait}`)).json
    },
    close: () => dispatcher?.close()
  }
}

export async function startTestSidecar ({ targets, roots, token = null, extra = {}, stateDir, lineTimeouts, handoffPostDelayMs } = {}) {
  stateDir ??= await tempDir('sidecar-state-')
  const socket = path.join(stateDir, 'sidecar.sock')
  const config = validateConfig({
    listen: ['127.0.0.1:0', `unix:${socket}`],
    stateDir,
    roots,
    token,
    retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 200 },
    logLevel: 'debug',
    targets,
    ...extra
  })
  const logs = captureLogs()
  const sidecar = await startSidecar(config, { logger: createLogger({ level: 'debug', destination: logs.stream }), lineTimeouts, handoffPostDelayMs })
  const port = sidecar.servers.find((s) => s.listen.type === 'tcp').address.port
  const url = `http://127.0.0.1:${port}`
  return { ...sidecar, url, socket, stateDir, logs, api: client(url, { token }) }
}

// The daemon as a real process, configured by a file; `ready` resolves on its "listening" line.
// `env` is added to this process's environment.
export async function spawnSidecar (rawConfig, { dir, nodeArgs = [], env = {} } = {}) {
  dir ??= await tempDir('sidecar-proc-')
  const file = path.join(dir, 'config.json')
  await fs.writeFile(file, JSON.stringify(rawConfig))
  const child = spawn(process.execPath, [...PRODUCTION_FLAGS, ...nodeArgs, BIN], { env: { ...process.env, ...env, SIDECAR_CONFIG: file }, stdio: ['ignore', 'pipe', 'pipe'] })
  const output = []
  const ready = new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      output.push(d.toString())
      if (output.join('').includes('transfer-sidecar listening')) resolve()
    })
    child.stderr.on('data', (d) => output.push(d.toString()))
    child.once('exit', (code) => reject(new Error(`sidecar exited ${code} before it was ready:\n${output.join('')}`)))
  })
  await ready
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  return { child, output, exited, kill: (sig = 'SIGKILL') => { child.kill(sig); return exited } }
}

// Resolves once `child` has printed `text` on its stdout; rejects with all it printed (stdout and
// stderr) if it exits first.
export function printed (child, text, what) {
  return new Promise((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (d) => { out += d; if (out.includes(text)) resolve() })
    child.stderr.on('data', (d) => { out += d })
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`${what} exited ${code}: ${out}`)))
  })
}

// Puts a job in a running daemon's spool as the PHP client does: written under a temp name, then
// renamed. A file written in place can be scanned while still empty, and is then rejected as invalid.
export async function spoolJob (dir, body) {
  const temp = path.join(dir, `.tmp-${body.id}-${Math.random().toString(16).slice(2, 14).padEnd(12, '0')}`)
  await fs.writeFile(temp, JSON.stringify(body))
  await fs.rename(temp, path.join(dir, `${body.id}.json`))
}

export async function waitFor (fn, { timeoutMs = 30000, intervalMs = 20 } = {}) {
  const end = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error('waitFor timed out')
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}
