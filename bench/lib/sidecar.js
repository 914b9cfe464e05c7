// The daemon under test, started as a child process exactly as in production
// (SIDECAR_CONFIG=... node bin/transfer-sidecar.js), listening on loopback TCP and on a unix
// socket (the PHP scripts use the socket), and a minimal client for its job API.
import { spawn } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../test/helpers/ports.js'
import { PRODUCTION_FLAGS as NODE_FLAGS } from '../../test/helpers/node-flags.js'

const BIN = fileURLToPath(new URL('../../bin/transfer-sidecar.js', import.meta.url))
// The node flags production runs the daemon with (the bin's shebang's), so the bench cannot drift from them.
export { NODE_FLAGS }
const START_TIMEOUT_MS = 20_000
const STOP_TIMEOUT_MS = 20_000
const LONG_POLL_SECONDS = 60
const OUTPUT_TAIL = 16 * 1024

function hasExited (child) {
  return child.exitCode !== null || child.signalCode !== null
}

/**
 * Writes the config, starts the daemon and waits until /healthz answers. logLevel is "warn"
 * so per-request logging stays out of the measurement; therefore readiness is polled rather
 * than read from the (info-level) "listening" log line.
 */
export async function startSidecar ({ workDir, name = 'sidecar', roots, targets, cpuProfDir, cpuProfIntervalUs, nodeFlags = [], extra = {} }) {
  const port = await freePort()
  const stateDir = path.join(workDir, `state-${name}`)
  const socketPath = path.join(workDir, `${name}.sock`)
  const configFile = path.join(workDir, `${name}.json`)
  const config = { listen: [`127.0.0.1:${port}`, `unix:${socketPath}`], stateDir, roots, logLevel: 'warn', targets, ...extra }
  await fs.writeFile(configFile, JSON.stringify(config, null, 2))

  const profile = cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfDir, ...(cpuProfIntervalUs ? [`--cpu-prof-interval=${cpuProfIntervalUs}`] : [])] : []
  const nodeArgs = [...NODE_FLAGS, ...nodeFlags, ...profile] // nodeFlags: a probe's, beside production's
  const child = spawn(process.execPath, [...nodeArgs, BIN], {
    env: { ...process.env, SIDECAR_CONFIG: configFile },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  const keep = (d) => {
    output += d
    if (output.length > 2 * OUTPUT_TAIL) output = output.slice(-OUTPUT_TAIL)
  }
  child.stdout.setEncoding('utf8').on('data', keep)
  child.stderr.setEncoding('utf8').on('data', keep)
  const exited = new Promise((resolve) => child.once('exit', resolve))

  const base = `http://127.0.0.1:${port}`
  const daemon = {
    pid: child.pid,
    base,
    port,
    socketPath,
    config,
    outputTail: () => output.slice(-4096),
    alive: () => !hasExited(child),

    async submit (job) {
      const res = await fetch(`${base}/v1/jobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(job)
      })
      const body = await res.json()
      if (res.status !== 202) throw new Error(`POST /v1/jobs: HTTP ${res.status} ${JSON.stringify(body)}`)
      return body
    },

    // Long-polls until the job is in a final state.
    async waitEnd (id) {
      for (;;) {
        const res = await fetch(`${base}/v1/jobs/${id}?wait=${LONG_POLL_SECONDS}`)
        const job = await res.json()
        if (res.status !== 200) throw new Error(`GET /v1/jobs/${id}: HTTP ${res.status} ${JSON.stringify(job)}`)
        if (['succeeded', 'failed', 'cancelled'].includes(job.state)) return job
        if (!daemon.alive()) throw new Error(`daemon exited during job ${id}:\n${daemon.outputTail()}`)
      }
    },

    // The job as the daemon shows it, or null when it does not know the id (a lost hand-off).
    async job (id) {
      const res = await fetch(`${base}/v1/jobs/${id}`)
      const body = await res.json()
      if (res.status === 404) return null
      if (res.status !== 200) throw new Error(`GET /v1/jobs/${id}: HTTP ${res.status} ${JSON.stringify(body)}`)
      return body
    },

    // Resolves once no job is queued or running, asking every `intervalMs`; returns the seconds it took.
    // Asks /healthz (its count of unfinished jobs is kept, not counted): a list filtered by state
    // walks every job the daemon holds, CPU the measured daemon would spend on the bench.
    async drained ({ timeoutMs = 600_000, intervalMs = 100 } = {}) {
      const t0 = Date.now()
      for (;;) {
        const res = await fetch(`${base}/healthz`)
        const busy = (await res.json()).jobs.unfinished > 0
        if (!busy) return (Date.now() - t0) / 1000
        if (!daemon.alive()) throw new Error(`daemon exited with jobs pending:\n${daemon.outputTail()}`)
        if (Date.now() - t0 > timeoutMs) throw new Error(`jobs still pending after ${timeoutMs / 1000} s`)
        await sleep(intervalMs)
      }
    },

    // Counters of GET /metrics, summed over their labels when `labels` is a prefix filter.
    async metric (name, labels = '') {
      const text = await (await fetch(`${base}/metrics`)).text()
      let sum = 0
      for (const line of text.split('\n')) {
        if (line.startsWith(`${name}{${labels}`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(' ') + 1))
      }
      return sum
    },

    // SIGTERM lets the daemon exit normally, which is also when --cpu-prof writes its profile.
    async stop () {
      if (hasExited(child)) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS)
      await exited
      clearTimeout(timer)
    },

    // Last resort from a process 'exit' handler, where nothing asynchronous can run.
    killNow () {
      if (!hasExited(child)) child.kill('SIGKILL')
    }
  }

  await waitHealthy(daemon, child)
  return daemon
}

async function waitHealthy (daemon, child) {
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (hasExited(child)) {
      throw new Error(`daemon exited at start (code ${child.exitCode}, signal ${child.signalCode}):\n${daemon.outputTail()}`)
    }
    try {
      const res = await fetch(`${daemon.base}/healthz`)
      await res.arrayBuffer()
      if (res.status === 200) return
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      daemon.killNow()
      throw new Error(`daemon not healthy after ${START_TIMEOUT_MS} ms:\n${daemon.outputTail()}`)
    }
    await sleep(100)
  }
}
