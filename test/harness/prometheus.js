// Test harness: a private Prometheus server (Debian's /usr/bin/prometheus) scraping the given
// targets on loopback. Never touches the system service (:9090, /etc/prometheus,
// /var/lib/prometheus): the config and the TSDB live in a mkdtemp dir, the port is a free one.
//
//   const prom = await startPrometheus({ targets: ['127.0.0.1:8765'], scrapeIntervalMs: 1000, ruleFiles: ['deploy/prometheus/alerts.yml'] })
//   await prom.query('sum(rate(sidecar_transfers_total[1m]))')   // -> { resultType, result } of /api/v1/query
//   await prom.api('/api/v1/rules')                                // any GET of the HTTP API -> its `data`
//   await prom.stop()
//
// startPrometheus resolves once every target has been scraped once (up or down). A Prometheus that
// does not become ready fails loudly with the tail of its log.

import { spawn } from 'node:child_process'
import { mkdtemp, rm, writeFile, copyFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { freePort } from '../helpers/ports.js'
import { killOnExit } from './children.js'

const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN || '/usr/bin/prometheus'
const START_TIMEOUT_MS = 30_000
const STOP_GRACE_MS = 10_000
const MAX_START_ATTEMPTS = 3
const LOG_TAIL_LINES = 40

const duration = (ms) => `${Math.max(1, Math.round(ms))}ms`

// The config is JSON, which is valid YAML.
function configFor ({ targets, scrapeIntervalMs, evaluationIntervalMs, ruleFiles, jobName, bearerToken }) {
  return {
    global: {
      scrape_interval: duration(scrapeIntervalMs),
      scrape_timeout: duration(Math.min(scrapeIntervalMs, 10_000)),
      evaluation_interval: duration(evaluationIntervalMs)
    },
    rule_files: ruleFiles,
    scrape_configs: [{
      job_name: jobName,
      metrics_path: '/metrics',
      ...(bearerToken && { authorization: { type: 'Bearer', credentials: bearerToken } }),
      static_configs: [{ targets }]
    }]
  }
}

async function get (base, p, params = {}) {
  const url = new URL(p, base)
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, String(v))
  const res = await fetch(url)
  const text = await res.text()
  let body
  try { body = JSON.parse(text) } catch { throw new Error(`prometheus ${url.pathname} answered ${res.status}: ${text.slice(0, 500)}`) }
  if (body.status !== 'success') throw new Error(`prometheus ${url.pathname} ${JSON.stringify(params)}: ${body.errorType}: ${body.error}`)
  return body.data
}

/**
 * Start a private Prometheus.
 * @param {object} opts
 * @param {string[]} opts.targets host:port scrape targets (loopback)
 * @param {number} [opts.scrapeIntervalMs=1000]
 * @param {number} [opts.evaluationIntervalMs] defaults to the scrape interval
 * @param {string[]} [opts.ruleFiles] rule files; copied into the temp dir and loaded
 * @param {string} [opts.jobName='transfer-sidecar']
 * @param {string} [opts.bearerToken] sent as Authorization: Bearer when scraping
 */
export async function startPrometheus ({
  targets, scrapeIntervalMs = 1000, evaluationIntervalMs = scrapeIntervalMs, ruleFiles = [], jobName = 'transfer-sidecar', bearerToken
} = {}) {
  if (!Array.isArray(targets) || targets.length === 0) throw new Error('startPrometheus: targets must be a non-empty array of host:port')
  const dir = await mkdtemp(path.join(os.tmpdir(), 'prometheus-test-'))
  try {
    const rules = []
    for (const [i, file] of ruleFiles.entries()) {
      const copy = path.join(dir, `rules-${i}-${path.basename(file)}`)
      await copyFile(file, copy)
      rules.push(copy)
    }
    const configFile = path.join(dir, 'prometheus.yml')
    await writeFile(configFile, JSON.stringify(configFor({ targets, scrapeIntervalMs, evaluationIntervalMs, ruleFiles: rules, jobName, bearerToken }), null, 2))
    let lastError
    for (let attempt = 1; attempt <= MAX_START_ATTEMPTS; attempt++) {
      const port = await freePort()
      try {
        return await launch({ dir, configFile, port, jobName, expectTargets: targets.length })
      } catch (err) {
        lastError = err
        if (!/address already in use/i.test(err.message)) break
      }
    }
    throw lastError
  } catch (err) {
    await rm(dir, { recursive: true, force: true })
    throw err
  }
}

async function launch ({ dir, configFile, port, jobName, expectTargets }) {
  const storage = path.join(dir, `data-${port}`)
  const args = [
    `--config.file=${configFile}`,
    `--storage.tsdb.path=${storage}`,
    `--web.listen-address=127.0.0.1:${port}`,
    '--storage.tsdb.retention.time=1d',
    '--log.level=info'
  ]
  const child = spawn(PROMETHEUS_BIN, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  killOnExit(child)
  const log = []
  const onData = (d) => { log.push(...d.toString().split('\n').filter(Boolean)); if (log.length > 2000) log.splice(0, log.length - 1000) }
  child.stdout.on('data', onData)
  child.stderr.on('data', onData)
  let exited = null
  const exit = new Promise((resolve) => child.once('exit', (code, signal) => { exited = { code, signal }; resolve(exited) }))
  child.once('error', (err) => { log.push(`spawn ${PROMETHEUS_BIN}: ${err.message}`) })
  const tail = () => log.slice(-LOG_TAIL_LINES).join('\n')
  const url = `http://127.0.0.1:${port}`

  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (exited) throw new Error(`prometheus exited (${exited.code ?? exited.signal}) before it was ready:\n${tail()}`)
    try {
      const res = await fetch(`${url}/-/ready`)
      await res.arrayBuffer()
      if (res.status === 200) break
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      await exit
      throw new Error(`prometheus not ready on ${url} after ${START_TIMEOUT_MS} ms:\n${tail()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }

  // Service discovery hands targets to the scrape manager at most every 5 s: wait for the first
  // scrape of every target (up or down) so that callers start from a known state.
  for (;;) {
    if (exited) throw new Error(`prometheus exited (${exited.code ?? exited.signal}):\n${tail()}`)
    const { activeTargets } = await get(url, '/api/v1/targets', { state: 'active' })
    if (activeTargets.length >= expectTargets && activeTargets.every((t) => t.health !== 'unknown')) break
    if (Date.now() > deadline + 15_000) {
      child.kill('SIGKILL')
      await exit
      throw new Error(`prometheus on ${url} did not scrape its targets: ${JSON.stringify(activeTargets)}\n${tail()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }

  let stopping = null
  return {
    url,
    port,
    jobName,
    dir,
    log: () => log.slice(),
    // Instant query (GET /api/v1/query); `time` in seconds or RFC 3339, default now.
    query: (expr, { time } = {}) => get(url, '/api/v1/query', { query: expr, ...(time !== undefined && { time }) }),
    queryRange: (expr, { start, end, step }) => get(url, '/api/v1/query_range', { query: expr, start, end, step }),
    api: (p, params) => get(url, p, params),
    stop () {
      stopping ??= (async () => {
        if (!exited) {
          child.kill('SIGTERM')
          const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS)
          await exit
          clearTimeout(timer)
        }
        await rm(dir, { recursive: true, force: true })
      })()
      return stopping
    }
  }
}
