// Section 3b: the web endpoint's view. `php -S` with 4 workers serves two pages: one hands a 4 KiB
// upload to the daemon (acked, unix socket) and answers, the other PUTs it to httpd with php-curl
// before answering. wrk (-t2 -c8) drives each for --web-seconds; requests/s and latency are wrk's.
// The hand-off page's uploads run after the fact: the time the daemon then needs to empty its
// queue is reported too, and every accepted job must have succeeded.
import fs from 'node:fs/promises'
import path from 'node:path'
import { spawn, spawnSync } from 'node:child_process'
import { randomFillSync } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../test/helpers/ports.js'
import { killOnExit } from '../../test/harness/children.js'
import { onCleanup } from './cleanup.js'
import { runCommand } from './curl.js'
import { PHP_DIR } from './php.js'
import { cpuSeconds, treeCpuSeconds } from './procfs.js'
import { check } from './verify.js'

export const WEB_PAGES = ['direct.php', 'handoff.php']
const FILE_BYTES = 4096
const WORKERS = 4
const WRK_ARGS = ['-t2', '-c8']

export const estimateWeb = (opts) => 5 + WEB_PAGES.length * (opts.webSeconds + 2) + opts.webSeconds * 1.5 // + backlog drain

export function requireWrk () {
  if (spawnSync('wrk', ['-v']).error) {
    throw new Error('the web section needs wrk (HTTP load generator): apt-get install -y wrk   (or leave it out: --sections throughput,concurrency,reuse,handoff)')
  }
}

async function startPhpServer (env) {
  const port = await freePort()
  const daemon = env.daemon
  const http = env.targets.http
  const file = path.join(env.filesDir, 'web.bin')
  await fs.writeFile(file, randomFillSync(Buffer.alloc(FILE_BYTES)))
  // Its own process group, so that stop() ends the server and its workers together.
  const child = spawn('php', ['-S', `127.0.0.1:${port}`, '-t', path.join(PHP_DIR, 'web')], {
    env: {
      ...process.env,
      PHP_CLI_SERVER_WORKERS: String(WORKERS),
      BENCH_SOCKET: daemon.socketPath,
      BENCH_SIDECAR_TARGET: http.sidecarName,
      BENCH_FILE: file,
      BENCH_URL: http.uploadUrl
    },
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true
  })
  killOnExit(child)
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (d) => { stderr = (stderr + d).slice(-4096) })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    try { process.kill(-child.pid, 'SIGTERM') } catch { /* gone */ }
    const timer = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL') } catch { /* gone */ } }, 5000)
    await exited
    clearTimeout(timer)
  }
  onCleanup(stop)
  const base = `http://127.0.0.1:${port}/`
  for (let i = 0; ; i++) {
    try {
      await (await fetch(base + 'nothing-here')).arrayBuffer()
      break
    } catch {
      if (i > 100 || child.exitCode !== null) throw new Error(`php -S did not start: ${stderr}`)
      await sleep(100)
    }
  }
  return { base, pid: child.pid, stop }
}

const UNITS = { us: 1e-3, ms: 1, s: 1000, m: 60000 }
const ms = (text) => {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text)
  return m ? Number(m[1]) * UNITS[m[2]] : null
}

export function parseWrk (out) {
  const num = (re) => { const m = re.exec(out); return m ? Number(m[1]) : 0 }
  const pct = (p) => { const m = new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(out); return m ? ms(m[1]) : null }
  const done = /(\d+) requests in ([\d.]+)(ms|s|m)/.exec(out)
  if (!done) throw new Error(`cannot read wrk's output:\n${out}`)
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  return {
    requests: Number(done[1]),
    seconds: Number(done[2]) * UNITS[done[3]] / 1000,
    requestsPerSecond: num(/Requests\/sec:\s+([\d.]+)/),
    latencyMs: { p50: pct(50), p75: pct(75), p90: pct(90), p99: pct(99) },
    non2xx: num(/Non-2xx or 3xx responses: (\d+)/),
    // php -S answers every request with "Connection: close", which wrk counts as a read error.
    closedByServer: socket ? Number(socket[2]) : 0,
    socketErrors: socket ? Number(socket[1]) + Number(socket[3]) + Number(socket[4]) : 0
  }
}

export async function runWeb (env, opts, progress) {
  requireWrk()
  progress.section('web', WEB_PAGES.length)
  const daemon = await env.startDaemon('web')
  const http = env.targets.http
  const server = await startPhpServer(env)
  const records = []
  try {
    for (const page of WEB_PAGES) {
      const url = server.base + page
      for (let i = 0; i < 20; i++) { // warm-up: workers loaded, connections to httpd made
        const res = await fetch(url)
        const body = await res.text()
        check(res.status === 200, `${page} warm-up: HTTP ${res.status} ${body}`)
      }
      await daemon.drained()
      // The warm-up's uploads are on httpd already: only the files wrk's requests made count.
      const directFiles = async () => (await fs.readdir(http.localPath(''))).filter((n) => n.startsWith('web-direct-')).length
      const uploaded0 = await directFiles()
      const accepted0 = await daemon.metric('sidecar_jobs_accepted_total')
      const succeeded0 = await daemon.metric('sidecar_jobs_finished_total', 'state="succeeded"')
      const php0 = treeCpuSeconds(server.pid)
      const daemon0 = cpuSeconds(daemon.pid)
      const run = await runCommand('wrk', [...WRK_ARGS, `-d${opts.webSeconds}s`, '--latency', url])
      if (run.code !== 0) throw new Error(`wrk failed (exit ${run.code}): ${run.stderr}`)
      const w = parseWrk(run.stdout)
      const phpCpuS = treeCpuSeconds(server.pid) - php0
      let drainSeconds = 0
      let jobs = null
      if (page === 'handoff.php') {
        drainSeconds = await daemon.drained()
        jobs = {
          accepted: await daemon.metric('sidecar_jobs_accepted_total') - accepted0,
          succeeded: await daemon.metric('sidecar_jobs_finished_total', 'state="succeeded"') - succeeded0
        }
        check(jobs.accepted >= w.requests - w.non2xx, `${page}: ${w.requests - w.non2xx} requests answered 2xx but ${jobs.accepted} jobs accepted`)
        check(jobs.succeeded === jobs.accepted, `${page}: ${jobs.accepted} jobs accepted, ${jobs.succeeded} succeeded`)
      } else {
        const uploaded = await directFiles() - uploaded0
        check(uploaded >= w.requests - w.non2xx, `${page}: ${w.requests - w.non2xx} requests answered 2xx but ${uploaded} files on httpd`)
      }
      const daemonCpuS = cpuSeconds(daemon.pid) - daemon0
      const record = {
        page,
        ...w,
        wrk: `wrk ${WRK_ARGS.join(' ')} -d${opts.webSeconds}s`,
        workers: WORKERS,
        phpCpuMsPerRequest: phpCpuS * 1000 / w.requests,
        daemonCpuMsPerRequest: daemonCpuS * 1000 / w.requests,
        drainSeconds,
        jobs
      }
      records.push(record)
      progress.step(`${page.padEnd(12)} ${w.requestsPerSecond.toFixed(0)} requests/s, latency p50 ${w.latencyMs.p50} ms p99 ${w.latencyMs.p99} ms, ` +
        `non-2xx ${w.non2xx}, connect/write/timeout errors ${w.socketErrors}, cpu/request PHP ${record.phpCpuMsPerRequest.toFixed(2)} ms daemon ${record.daemonCpuMsPerRequest.toFixed(2)} ms` +
        (jobs ? `; ${jobs.succeeded}/${jobs.accepted} jobs succeeded, queue drained ${drainSeconds.toFixed(1)} s after wrk` : ''))
    }
  } finally {
    await server.stop()
    for (const n of await fs.readdir(http.localPath(''))) if (n.startsWith('web-')) await http.remove(n)
  }
  return { records }
}
