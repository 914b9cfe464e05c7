// Section 3b: the web endpoint's view, on the stack PHP sites run: Debian's nginx and php-fpm
// (pm = static, 8 workers). Four pages: direct.php PUTs a 4 KiB file to httpd with php-curl before
// answering, finish.php answers first (fastcgi_finish_request()) and then does the same PUT in the
// same worker, handoff.php hands it to the daemon (acked, unix socket) and answers, and
// handoff-persistent.php does so on the connection its worker keeps (the client's `persistent`);
// then the two hand-off pages again, handing off on the socket of a daemon with a hand-off thread
// (handoff.listen, the client's `handoff_socket`; a daemon of its own, as the journal is then the
// thread's for every submission). wrk (-t2 -c16) drives each for --web-seconds, once with httpd on loopback and once 10 ms round trip away (the
// tests' TCP proxy delaying each direction 5 ms; the daemon's target and the direct pages go
// through the same proxy). The hand-off page's uploads run after the fact: the time the daemon then
// needs to empty its queue is reported too, and every accepted job must have succeeded.
import fs from 'node:fs/promises'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { randomFillSync } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { startNginxFpm } from '../../test/harness/nginx-fpm.js'
import { startTcpProxy } from '../../test/harness/tcp-proxy.js'
import { onCleanup } from './cleanup.js'
import { runCommand } from './curl.js'
import { PHP_DIR } from './php.js'
import { cpuSeconds, treeCpuSeconds } from './procfs.js'
import { check } from './verify.js'

export const WEB_PAGES = ['direct.php', 'finish.php', 'handoff.php', 'handoff-persistent.php']
const THREAD_PAGES = ['handoff.php', 'handoff-persistent.php'] // again, on the hand-off thread's socket
const FILE_BYTES = 4096
const WORKERS = 8 // php-fpm pm = static
const WRK_ARGS = ['-t2', '-c16'] // more connections than workers: the pool is what limits
export const WEB_RTTS_MS = [0, 10] // the target on loopback, then 10 ms round trip away

export const estimateWeb = (opts) => 10 + WEB_RTTS_MS.length * ((WEB_PAGES.length + THREAD_PAGES.length) * (opts.webSeconds + 2) + opts.webSeconds * 5) // + backlog drain

export function requireWrk () {
  if (spawnSync('wrk', ['-v']).error) {
    throw new Error('the web section needs wrk (HTTP load generator): apt-get install -y wrk   (or leave it out: --sections throughput,concurrency,reuse,handoff)')
  }
}

// nginx + php-fpm (private configs, test/harness/nginx-fpm.js) serving bench/php/web, the pages
// PUTting to `url` (httpd, or the delaying proxy in front of it) and handing off to `target`.
async function startWebServer (env, { url, target, protocol, daemon }) {
  const file = path.join(env.filesDir, 'web.bin')
  await fs.writeFile(file, randomFillSync(Buffer.alloc(FILE_BYTES)))
  const web = await startNginxFpm({
    docroot: path.join(PHP_DIR, 'web'),
    maxChildren: WORKERS,
    env: { BENCH_SOCKET: daemon.socketPath, BENCH_HANDOFF_SOCKET: daemon.handoffSocket ?? '', BENCH_PROTOCOL: protocol, BENCH_SIDECAR_TARGET: target, BENCH_FILE: file, BENCH_URL: url }
  })
  onCleanup(() => web.stop())
  return { base: web.url + '/', pid: web.fpmPid, stop: web.stop }
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
    // A server closing the connection after its answer shows up as wrk read errors.
    closedByServer: socket ? Number(socket[2]) : 0,
    socketErrors: socket ? Number(socket[1]) + Number(socket[3]) + Number(socket[4]) : 0
  }
}

export async function runWeb (env, opts, progress) {
  requireWrk()
  progress.section('web', WEB_RTTS_MS.length * (WEB_PAGES.length + THREAD_PAGES.length))
  const http = env.targets.http
  const httpd = new URL(http.uploadUrl)
  // The target 10 ms away: the same httpd behind a proxy holding each direction 5 ms.
  const far = await startTcpProxy({ target: httpd.host, delayMs: 5 })
  onCleanup(() => far.stop())
  const farUrl = new URL(httpd.pathname, far.url).href
  const farTarget = http.sidecarName + '-10ms'
  const records = []
  try {
    for (const [pages, thread] of [[WEB_PAGES, false], [THREAD_PAGES, true]]) {
      const daemon = await env.startDaemon(thread ? 'web-thread' : 'web', { smallJobs: true, handoff: thread, targets: { [farTarget]: { ...http.sidecarConfig, url: farUrl } } })
      for (const rttMs of WEB_RTTS_MS) {
        const server = await startWebServer(env, {
          daemon,
          protocol: thread ? 'lines' : opts.protocol, // the hand-off thread speaks the line protocol only
          ...(rttMs ? { url: farUrl, target: farTarget } : { url: http.uploadUrl, target: http.sidecarName })
        })
        try {
          for (const page of pages) records.push(await runPage(env, opts, progress, { daemon, server, page, rttMs, thread }))
        } finally {
          await server.stop()
        }
      }
    }
  } finally {
    for (const n of await fs.readdir(http.localPath(''))) if (n.startsWith('web-')) await http.remove(n)
  }
  return { records }
}

async function runPage (env, opts, progress, { daemon, server, page, rttMs, thread }) {
  const http = env.targets.http
  const url = server.base + page
  const prefix = { 'direct.php': 'web-direct-', 'finish.php': 'web-finish-' }[page]
  const phpFiles = async () => (await fs.readdir(http.localPath(''))).filter((n) => n.startsWith(prefix)).length
  for (let i = 0; i < 20; i++) { // warm-up: workers loaded, connections to httpd made
    const res = await fetch(url)
    const body = await res.text()
    check(res.status === 200, `${page} warm-up: HTTP ${res.status} ${body}`)
  }
  await daemon.drained()
  if (prefix) await sleep(500) // finish.php's warm-up uploads end after their answers
  // The warm-up's uploads are on httpd already: only the files wrk's requests made count.
  const uploaded0 = prefix ? await phpFiles() : 0
  const accepted0 = await daemon.metric('sidecar_jobs_accepted_total')
  const succeeded0 = await daemon.metric('sidecar_jobs_finished_total', 'state="succeeded"')
  const php0 = treeCpuSeconds(server.pid)
  const daemon0 = cpuSeconds(daemon.pid)
  const run = await runCommand('wrk', [...WRK_ARGS, `-d${opts.webSeconds}s`, '--latency', url])
  if (run.code !== 0) throw new Error(`wrk failed (exit ${run.code}): ${run.stderr}`)
  const w = parseWrk(run.stdout)
  let drainSeconds = 0
  let jobs = null
  const answered = w.requests - w.non2xx
  if (page.startsWith('handoff')) {
    drainSeconds = await daemon.drained()
    jobs = {
      accepted: await daemon.metric('sidecar_jobs_accepted_total') - accepted0,
      succeeded: await daemon.metric('sidecar_jobs_finished_total', 'state="succeeded"') - succeeded0
    }
    check(jobs.accepted >= answered, `${page}: ${answered} requests answered 2xx but ${jobs.accepted} jobs accepted`)
    check(jobs.succeeded === jobs.accepted, `${page}: ${jobs.accepted} jobs accepted, ${jobs.succeeded} succeeded`)
  } else {
    // finish.php's last uploads may still run when wrk stops; they end within a round trip or so.
    let uploaded = 0
    for (let i = 0; i < 100 && (uploaded = await phpFiles() - uploaded0) < answered; i++) await sleep(100)
    check(uploaded >= answered, `${page}: ${answered} requests answered 2xx but ${uploaded} files on httpd`)
  }
  const phpCpuS = treeCpuSeconds(server.pid) - php0
  const daemonCpuS = cpuSeconds(daemon.pid) - daemon0
  const record = {
    page,
    thread, // handed off on the hand-off thread's socket
    rttMs,
    ...w,
    wrk: `wrk ${WRK_ARGS.join(' ')} -d${opts.webSeconds}s`,
    workers: WORKERS,
    phpCpuMsPerRequest: phpCpuS * 1000 / w.requests,
    daemonCpuMsPerRequest: daemonCpuS * 1000 / w.requests,
    drainSeconds,
    jobs
  }
  progress.step(`${(thread ? `${page} (thread)` : page).padEnd(31)} target ${rttMs ? `${rttMs} ms RTT away` : 'on loopback'}: ${w.requestsPerSecond.toFixed(0)} requests/s, latency p50 ${w.latencyMs.p50} ms p99 ${w.latencyMs.p99} ms, ` +
    `non-2xx ${w.non2xx}, connect/write/timeout errors ${w.socketErrors}, cpu/request PHP ${record.phpCpuMsPerRequest.toFixed(2)} ms daemon ${record.daemonCpuMsPerRequest.toFixed(2)} ms` +
    (jobs ? `; ${jobs.succeeded}/${jobs.accepted} jobs succeeded, queue drained ${drainSeconds.toFixed(1)} s after wrk` : ''))
  return record
}
