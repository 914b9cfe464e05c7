// Output: the machine description, the CSV files, and REPORT.md under bench/results/<date>/.
import os from 'node:os'
import fs from 'node:fs/promises'
import { readdirSync } from 'node:fs'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { formatSeconds } from './progress.js'
import { distinct } from './stats.js'
import { throughputTargets } from './throughput.js'
import { NODE_FLAGS } from './sidecar.js'
import { redisVersion } from './redis.js'
import { JOURNAL_LINE_BYTES } from './handoff.js'
import { KEEP_FINISHED as KEEP_FINISHED_DOC } from './burst.js'
import { PAUSE_US, isPaced, pacedFiles } from './reuse.js'
import { WARM_UP_LINE_JOBS, WARM_UP_SMALL_JOBS, WARM_UP_UPLOADS } from './env.js'

const REPO = fileURLToPath(new URL('../../', import.meta.url))
const HADOOP_LIB = path.join(REPO, 'test/harness/hdfs/target/lib')

function output (cmd, args) {
  // Some tools (java -version, apache2 -v) print their version on stderr.
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd: REPO })
  return `${r.stdout ?? ''}\n${r.stderr ?? ''}`.trim()
}
const firstLine = (cmd, args) => output(cmd, args).split('\n')[0].trim() || 'unknown'

function diskInfo (dir) {
  const [source, fstype] = output('findmnt', ['-no', 'SOURCE,FSTYPE', '--target', dir]).split(/\s+/)
  const [rota, size, model] = output('lsblk', ['-dno', 'ROTA,SIZE,MODEL', source ?? '']).split(/\s+/)
  return `${source ?? 'unknown'} (${fstype ?? '?'}, ${size ?? '?'}, rotational flag ${rota ?? '?'}${model ? `, ${model}` : ''}) holding ${dir}`
}

function hadoopVersion () {
  try {
    const jar = readdirSync(HADOOP_LIB).find((f) => /^hadoop-hdfs-\d[\d.]*\.jar$/.test(f))
    return jar ? `Hadoop ${jar.replace(/^hadoop-hdfs-|\.jar$/g, '')} (MiniDFSCluster)` : 'Hadoop jars not built'
  } catch {
    return 'Hadoop jars not built'
  }
}

export function machineInfo () {
  const status = output('git', ['status', '--porcelain', '--untracked-files=no'])
  return {
    nproc: os.availableParallelism(),
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    kernel: `${os.type()} ${os.release()}`,
    disk: diskInfo(os.tmpdir()),
    node: process.version,
    php: firstLine('php', ['-v']).replace(/\s*\(cli\).*$/, ''),
    phpLibcurl: output('php', ['-r', 'echo function_exists("curl_version") ? curl_version()["version"] : "no php-curl";']),
    curl: firstLine('curl', ['--version']).split(' ').slice(0, 4).join(' '),
    httpd: firstLine('/usr/sbin/apache2', ['-v']).replace(/^Server version:\s*/, ''),
    java: firstLine('java', ['-version']),
    hadoop: hadoopVersion(),
    wrk: firstLine('wrk', ['-v']).split(' ').slice(0, 2).join(' '),
    redis: redisVersion(),
    git: `${firstLine('git', ['rev-parse', '--short', 'HEAD'])}${status ? ' (with uncommitted changes)' : ''}`
  }
}

// ---------- CSV ----------

// Flattens nested objects (a spread becomes mibps.median, mibps.min, …); arrays are dropped.
function flatten (obj, prefix = '', out = {}) {
  for (const [k, v] of Object.entries(obj)) {
    if (Array.isArray(v)) continue
    if (v !== null && typeof v === 'object') flatten(v, `${prefix}${k}.`, out)
    else out[prefix + k] = v
  }
  return out
}

export function toCsv (rows) {
  const flat = rows.map((r) => flatten(r))
  const columns = [...new Set(flat.flatMap((r) => Object.keys(r)))]
  const cell = (v) => {
    if (v === null || v === undefined) return ''
    const s = typeof v === 'number' ? String(Math.round(v * 1e6) / 1e6) : String(v)
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s
  }
  return [columns.join(','), ...flat.map((r) => columns.map((c) => cell(r[c])).join(','))].join('\n') + '\n'
}

// ---------- REPORT.md ----------

const f0 = (x) => (x === null || x === undefined ? '—' : x.toFixed(0))
const f1 = (x) => (x === null || x === undefined ? '—' : x.toFixed(1))
const f2 = (x) => (x === null || x === undefined ? '—' : x.toFixed(2))
const sp = (s, f = f0) => (!s ? '—' : s.n > 1 ? `${f(s.median)} (${f(s.min)}–${f(s.max)})` : f(s.median))
const table = (head, rows) => [head, head.map(() => '---'), ...rows].map((r) => `| ${r.join(' | ')} |`).join('\n')

function throughputSection (summary, charts) {
  const parts = []
  for (const target of distinct(summary, 'target')) {
    for (const direction of distinct(summary, 'direction')) {
      const rows = summary.filter((r) => r.target === target && r.direction === direction)
      if (!rows.length) continue
      const competitors = distinct(rows, 'competitor')
      const others = competitors.filter((c) => c !== 'curl')
      const pairs = competitors.flatMap((c) => [...new Set(rows.filter((r) => r.competitor === c).flatMap((r) => Object.keys(r.vsPeers ?? {})))].map((peer) => [c, peer]))
      const sidecars = competitors.filter((c) => c.startsWith('sidecar'))
      const fsyncCols = direction === 'download' && competitors.includes('curl') ? sidecars : []
      const head = ['MiB', ...competitors.map((c) => `${c} MiB/s`), ...others.map((c) => `${c} ÷ curl`),
        ...fsyncCols.map((c) => `${c} ÷ (curl+fsync)`),
        ...pairs.map(([c, peer]) => `**${c} ÷ ${peer}**`)]
      const body = distinct(rows, 'sizeMiB').map((size) => {
        const at = (c) => rows.find((r) => r.sizeMiB === size && r.competitor === c)
        return [String(size), ...competitors.map((c) => sp(at(c)?.mibps)), ...others.map((c) => f2(at(c)?.vsCurl)),
          ...fsyncCols.map((c) => f2(at(c)?.vsCurlFsync)), ...pairs.map(([c, peer]) => `**${f2(at(c)?.vsPeers?.[peer])}**`)]
      })
      const resHead = ['MiB', ...competitors.map((c) => `${c} peak RSS MiB`), ...competitors.map((c) => `${c} CPU s/GiB`),
        ...sidecars.map((c) => `${c} main thread s/GiB (÷ curl)`)]
      const resBody = distinct(rows, 'sizeMiB').map((size) => {
        const at = (c) => rows.find((r) => r.sizeMiB === size && r.competitor === c)
        return [String(size), ...competitors.map((c) => f1(at(c)?.rssMiB)), ...competitors.map((c) => f2(at(c)?.cpuSPerGiB)),
          ...sidecars.map((c) => at(c)?.mainCpuSPerGiB === null || at(c)?.mainCpuSPerGiB === undefined ? '—' : `${f2(at(c).mainCpuSPerGiB)} (${f2(at(c).mainVsCurlCpu)})`)]
      })
      parts.push(`### ${target} ${direction}\n\nThroughput, median (min–max) over runs, and median of per-run ratios to curl` +
        `${pairs.length ? ' and (bold) of each sidecar to its competitor' : ''}:\n\n${table(head, body)}\n\n` +
        `Memory and CPU (RSS: highest over runs; CPU: median; a sidecar's CPU is the daemon's and PHP's, its main thread the daemon's main thread):\n\n${table(resHead, resBody)}`)
    }
  }
  const pics = ['throughput.svg', 'rss.svg', 'cpu.svg'].filter((c) => charts.includes(c)).map((c) => `![${c}](${c})`).join('\n')
  return `${parts.join('\n\n')}\n\n${pics}`
}

function concurrencySection (summary, charts) {
  const parts = []
  for (const target of distinct(summary, 'target')) {
    for (const direction of distinct(summary, 'direction')) {
      const rows = summary.filter((r) => r.target === target && r.direction === direction)
      if (!rows.length) continue
      const body = distinct(rows, 'concurrency').map((n) => {
        const curl = rows.find((r) => r.concurrency === n && r.competitor === 'curl')
        const side = rows.find((r) => r.concurrency === n && r.competitor === 'sidecar')
        const none = rows.find((r) => r.concurrency === n && r.competitor === 'sidecar-none')
        return [String(n), sp(curl?.aggMiBps), sp(side?.aggMiBps), f2(side?.vsCurl), sp(none?.aggMiBps), f2(none?.vsCurl),
          f1(side?.rssMiB), f1(none?.rssMiB), f1(curl?.rssMiB), f2(curl?.cpuSPerGiB), f2(side?.cpuSPerGiB), f2(none?.cpuSPerGiB)]
      })
      parts.push(`### ${target} ${direction}\n\n${table(['N', 'curl MiB/s', 'sidecar MiB/s', 'sidecar ÷ curl', 'sidecar-none MiB/s', 'sidecar-none ÷ curl',
        'daemon peak RSS MiB (sidecar)', 'daemon peak RSS MiB (sidecar-none)', 'sum of curl peak RSS MiB', 'curl CPU s/GiB', 'sidecar CPU s/GiB', 'sidecar-none CPU s/GiB'], body)}`)
    }
  }
  const pics = ['concurrency.svg', 'concurrency-rss.svg'].filter((c) => charts.includes(c)).map((c) => `![${c}](${c})`).join('\n')
  return `${parts.join('\n\n')}\n\n${pics}`
}

function handoffSection (records, charts) {
  // Paced variants are compared with the paced direct PUT, the others with the burst's.
  const directOf = (r) => records.find((d) => d.variant === (r.variant.endsWith('-paced') ? 'direct-paced' : 'direct'))
  const body = records.map((r) => [r.variant, r.mode ?? '—', f1(r.medianUs), f0(r.p90Us), f0(r.p99Us), f0(r.handedOffPerSecond ?? (r.callsPerSecond === null ? null : r.callsPerSecond * (r.calls - r.errors) / r.calls)), String(r.errors), String(r.lost), String(r.failed),
    f0(r.phpCpuUsPerCall), f0(r.totalCpuUsPerUpload), directOf(r)?.medianUs && r.medianUs ? f2(directOf(r).medianUs / r.medianUs) : '—'])
  const pics = ['handoff.svg', 'handoff-cpu.svg'].filter((c) => charts.includes(c)).map((c) => `![${c}](${c})`).join('\n')
  return `${table(['variant', 'journal mode', 'median µs', 'p90 µs', 'p99 µs', 'hand-offs/s', 'errors', 'lost', 'failed', 'PHP CPU µs/call', 'all CPU µs/upload', 'direct µs ÷ this µs'], body)}\n\n${pics}`
}

const isSidecar = (r) => r.variant.startsWith('sidecar')

function burstSection (result, charts) {
  const redis = result.records.find((r) => r.variant === 'redis-lpush')
  const body = result.records.map((r) => [r.variant, r.mode ?? '—', `${r.acked}/${r.jobs}`, f2(r.seconds), f0(r.ackedPerSecond), redis ? f2(r.ackedPerSecond / redis.ackedPerSecond) : '—',
    f0(r.medianUs), f0(r.p99Us), String(r.errors), String(r.lost), String(r.duplicated), isSidecar(r) ? String(r.strayFiles) : '—',
    isSidecar(r) ? `${r.accepted} / ${r.succeeded} / ${r.retries}` : '—',
    isSidecar(r) ? f1(r.drainSeconds) : '—',
    isSidecar(r) ? `${f0(r.idleRssMiB)} / ${f0(r.burstPeakRssMiB)} / ${f0(r.drainPeakRssMiB)}` : '—',
    isSidecar(r) ? `${r.jobsKept} (≤ ${r.keepFinished})` : '—'])
  const pics = charts.includes('burst.svg') ? '![burst.svg](burst.svg)' : ''
  return `${table(['client', 'journal mode', 'acked', 'seconds', 'hand-offs/s', '÷ redis', 'median µs', 'p99 µs', 'errors', 'lost', 'duplicated', 'stray files', 'accepted / succeeded / retries', 'drained s after', 'daemon RSS MiB idle / burst peak / drain peak', 'jobs kept'], body)}\n\n${pics}`
}

function webSection (records, charts) {
  const rtt = (r) => r.rttMs ? `${r.rttMs} ms RTT` : 'loopback'
  const direct = (r) => records.find((d) => d.page === 'direct.php' && d.rttMs === r.rttMs)
  const body = records.map((r) => [r.thread ? `${r.page} on the hand-off thread's socket` : r.page, rtt(r), f0(r.requestsPerSecond), String(r.requests), f2(r.latencyMs.p50), f2(r.latencyMs.p99), String(r.non2xx), String(r.socketErrors),
    f2(r.phpCpuMsPerRequest), f2(r.daemonCpuMsPerRequest), r.jobs ? `${r.jobs.succeeded}/${r.jobs.accepted}, drained ${f1(r.drainSeconds)} s after` : '—',
    direct(r) ? f2(r.requestsPerSecond / direct(r).requestsPerSecond) : '—', direct(r) ? f2(direct(r).latencyMs.p99 / r.latencyMs.p99) : '—'])
  const pics = charts.includes('web.svg') ? '![web.svg](web.svg)' : ''
  const note = '¹ connect, write and timeout errors (read errors, a server closing after its answer, not shown). ÷ direct: against direct.php with the target at the same distance, same run.'
  return `${table(['page', 'target', 'requests/s', 'requests', 'p50 ms', 'p99 ms', 'non-2xx', 'socket errors¹', 'PHP CPU ms/req', 'daemon CPU ms/req', 'jobs succeeded', 'requests/s ÷ direct', 'direct p99 ÷ this p99'], body)}\n\n${note}\n\n${pics}`
}

function allocSection (summary, charts) {
  const variants = distinct(summary, 'variant')
  const smallest = summary[0].sizeMiB
  const at = (variant, size) => summary.find((r) => r.variant === variant && r.sizeMiB === size)
  const head = ['MiB', ...variants.map((v) => `${v} MiB/s`), ...variants.map((v) => `${v} ÷ own at ${smallest} MiB`), `peak RSS MiB (${variants.map((v) => v.startsWith('sidecar') ? 'daemon' : v).join(' / ')})`]
  const body = distinct(summary, 'sizeMiB').map((size) => [
    size,
    ...variants.map((v) => sp(at(v, size)?.mibps, f1)),
    ...variants.map((v) => f2(at(v, size)?.vsSmallest)),
    variants.map((v) => f1(at(v, size)?.rssMiB)).join(' / ')
  ])
  const pics = charts.includes('alloc.svg') ? '![alloc.svg](alloc.svg)' : ''
  return `${table(head, body)}\n\n${pics}`
}

function reuseSection (summary, charts) {
  const opt = (x) => (x === undefined ? '—' : f2(x))
  const body = summary.map((r) => [r.mode ?? '—', r.variant, r.files, sp(r.seconds, f2), sp(r.filesPerSecond), r.checkedFilesPerSecond ? sp(r.checkedFilesPerSecond) : '—', f2(r.cpuMsPerFile), opt(r.phpCpuMsPerFile), opt(r.daemonCpuMsPerFile), r.daemonGcMsPerFile === undefined ? '—' : r.daemonGcMsPerFile.toFixed(3), f2(r.vsNewHandle)])
  const pics = charts.includes('reuse.svg') ? '![reuse.svg](reuse.svg)' : ''
  return `${table(['journal mode (daemon)', 'variant', 'files', 'seconds', 'files/s', 'files/s with a wait() per job¹', 'CPU ms/file', 'of it PHP', 'of it the daemon', 'daemon GC pauses ms/file²', '÷ php-new-handle³'], body)}\n\n` +
    '¹ the sidecar\'s clock stops when the daemon has no job left unfinished; this column also counts the check of each job\'s end that follows (`Client::wait()` on each in turn, as runs before 2026-11-25-atomic-put-reuse timed it).\n' +
    '² the daemon\'s own `nodejs_gc_duration_seconds` (main-thread pauses, not the GC helper threads), over the run and its check, median of the runs.\n' +
    `³ files/s, median of the per-run ratios; a \`-paced\` variant (a ${PAUSE_US / 1000} ms pause after each file, so its files/s is mostly the pause) against \`php-new-handle-paced\`.\n\n` + pics
}

const us = (r) => (r?.medianUs === null || r?.medianUs === undefined ? '—' : `${r.medianUs.toFixed(1)} µs`)
const perS = (r) => (r ? `${r.ackedPerSecond.toFixed(0)}/s` : '—')
// met: true/false, or null when a figure it needs did not run.
const known = (...xs) => xs.every((x) => x !== null && x !== undefined)

// The goals of issue #18 the hand-off, burst and reuse sections measure, each against figures of the same run.
export function handoffGoals (results) {
  const out = []
  const ho = results.handoff?.records ?? []
  const at = (variant, mode = null) => ho.find((r) => r.variant === variant && r.mode === mode)
  if (ho.length) {
    const pacedWrite = at('acked-unix-paced', 'write')
    // What a line each way between two PHP processes costs with nothing done between: the floor.
    const pingPaced = at('pingpong-paced')
    const floorNote = pingPaced ? `; two PHP processes trading the same line and doing nothing else: ${us(pingPaced)}` : ''
    // What the hand-off's own work costs with nothing else in the process (bench/lib/floor-server.js).
    const own = (variant, mode) => at(variant, mode) ? `; the hand-off's own work alone (acked-floor) ${us(at(variant, mode))}` : ''
    out.push({
      goal: 'acked hand-off, one call every 5 ms, median ≤ 60 µs ("write" mode, unix socket)',
      met: known(pacedWrite?.medianUs) ? pacedWrite.medianUs <= 60 : null,
      detail: `${us(pacedWrite)} (TCP ${us(at('acked-tcp-paced', 'write'))}; over HTTP ${us(at('acked-http-unix-paced', 'write'))}; hand-off thread ${us(at('acked-thread-paced', 'write'))}; direct PUT ${us(at('direct-paced'))}${floorNote}${own('acked-floor-paced', 'write')})`
    })
    const pacedFsync = at('acked-unix-paced', 'fsync')
    const floor = at('fdatasync-paced')
    out.push({
      goal: 'acked hand-off, one call every 5 ms, median ≤ bare fdatasync median + 60 µs ("fsync" mode, unix socket)',
      met: known(pacedFsync?.medianUs, floor?.medianUs) ? pacedFsync.medianUs <= floor.medianUs + 60 : null,
      detail: `${us(pacedFsync)} against fdatasync ${us(floor)} + 60 (TCP ${us(at('acked-tcp-paced', 'fsync'))}; over HTTP ${us(at('acked-http-unix-paced', 'fsync'))}; hand-off thread ${us(at('acked-thread-paced', 'fsync'))}${floorNote}${own('acked-floor-paced', 'fsync')})`
    })
    for (const mode of ['fsync', 'write']) {
      const b2b = at('acked-unix', mode)
      const paced = at('acked-unix-paced', mode)
      if (!b2b && !paced) continue
      out.push({
        goal: `acked hand-off back to back, median ≤ 2 × the paced median ("${mode}" mode, unix socket)`,
        met: known(b2b?.medianUs, paced?.medianUs) ? b2b.medianUs <= 2 * paced.medianUs : null,
        detail: `${us(b2b)} back to back, ${us(paced)} paced (TCP ${us(at('acked-tcp', mode))}, ${us(at('acked-tcp-paced', mode))}; over HTTP ${us(at('acked-http-unix', mode))}, ${us(at('acked-http-unix-paced', mode))}` +
          `${at('acked-floor', mode) ? `; the hand-off's own work alone (acked-floor) ${us(at('acked-floor', mode))}, ${us(at('acked-floor-paced', mode))}` : ''})` +
          (mode === 'fsync' && at('fdatasync-loaded') ? `; bare fdatasync back to back ${us(at('fdatasync'))} alone, ${us(at('fdatasync-loaded'))} while php-curl PUTs to httpd on the same disk` : '')
      })
      const threadB2b = at('acked-thread', mode)
      const threadPaced = at('acked-thread-paced', mode)
      if (threadB2b || threadPaced) {
        out.push({
          goal: `acked hand-off back to back, median ≤ 2 × the paced median ("${mode}" mode, the hand-off thread's socket, handoff.listen)`,
          met: known(threadB2b?.medianUs, threadPaced?.medianUs) ? threadB2b.medianUs <= 2 * threadPaced.medianUs : null,
          detail: `${us(threadB2b)} back to back, ${us(threadPaced)} paced`
        })
      }
    }
    const b2bWrite = at('acked-unix', 'write')
    const redisPaced = at('redis-lpush-paced')
    const redisB2b = at('redis-lpush')
    const pairs = [[pacedWrite, redisPaced], [b2bWrite, redisB2b]].filter(([a, b]) => known(a?.medianUs, b?.medianUs))
    out.push({
      goal: 'acked hand-off median at or below redis LPUSH (appendfsync everysec) ("write" mode, paced and back to back)',
      met: pairs.length ? pairs.every(([a, b]) => a.medianUs <= b.medianUs) : null,
      detail: `paced ${us(pacedWrite)} against ${us(redisPaced)}; back to back ${us(b2bWrite)} against ${us(redisB2b)}` +
        ` (hand-off thread ${us(at('acked-thread-paced', 'write'))}, ${us(at('acked-thread', 'write'))}` +
        `${at('pingpong') || pingPaced ? `; two PHP processes trading the line and doing nothing else ${us(pingPaced)}, ${us(at('pingpong'))}` : ''}` +
        `${at('acked-floor', 'write') || at('acked-floor-paced', 'write') ? `; the hand-off's own work alone (acked-floor: checks, path checks, record, journal write, which redis does not do) ${us(at('acked-floor-paced', 'write'))}, ${us(at('acked-floor', 'write'))}` : ''})`
    })
  }
  const bu = results.burst?.records ?? []
  if (bu.length) {
    const redis = bu.find((r) => r.variant === 'redis-lpush')
    const floorOf = (mode) => bu.find((r) => r.variant === 'floor' && r.mode === mode)
    const where = { sidecar: '', 'sidecar-thread': ', the hand-off thread\'s socket' }
    for (const [mode, rate] of [['write', 10_000], ['fsync', 3_000]]) {
      for (const variant of ['sidecar', 'sidecar-thread']) {
        const r = bu.find((x) => x.variant === variant && x.mode === mode)
        if (!r && variant !== 'sidecar') continue
        out.push({
          goal: `${r?.clients ?? 16} PHP processes at once: ≥ ${rate.toLocaleString('en')} acked hand-offs/s ("${mode}" mode${where[variant]})`,
          met: r ? r.ackedPerSecond >= rate : null,
          detail: r ? `${perS(r)} over ${r.acked} jobs (redis LPUSH ${perS(redis)}${floorOf(mode) ? `; the hand-off's own work alone (floor, no job run) ${perS(floorOf(mode))}` : ''})` : 'not run'
        })
      }
    }
    for (const variant of ['sidecar', 'sidecar-thread']) {
      const write = bu.find((x) => x.variant === variant && x.mode === 'write')
      if (!write && variant !== 'sidecar') continue
      out.push({
        goal: `burst rate at or above redis LPUSH's ("write" mode${where[variant]})`,
        met: write && redis ? write.ackedPerSecond >= redis.ackedPerSecond : null,
        detail: `${perS(write)} against ${perS(redis)}${floorOf('write') ? ` (the hand-off's own work alone ${perS(floorOf('write'))})` : ''}`
      })
    }
    const sidecars = bu.filter(isSidecar)
    if (sidecars.length) {
      out.push({
        goal: 'burst: 0 lost, 0 duplicated, no job run twice, finished jobs kept ≤ queue.keepFinished (what bounds the daemon\'s memory once drained)',
        met: sidecars.every((x) => x.errors === 0 && x.lost === 0 && x.duplicated === 0 && x.strayFiles === 0 && x.retries === 0 && x.notSucceeded === 0 && x.jobsKept <= x.keepFinished),
        detail: sidecars.map((x) => `${x.mode}${where[x.variant]}: errors ${x.errors}, lost ${x.lost}, duplicated ${x.duplicated}, stray files ${x.strayFiles}, not succeeded ${x.notSucceeded}, retries ${x.retries}, kept ${x.jobsKept}/${x.keepFinished}, RSS peak ${x.burstPeakRssMiB.toFixed(0)} MiB in the burst, ${x.drainPeakRssMiB.toFixed(0)} MiB in the drain (idle ${x.idleRssMiB.toFixed(0)})`).join('; ')
      })
    }
  }
  const reuse = results.reuse?.summary ?? []
  const reuseOf = (mode, variant) => reuse.find((x) => x.mode === mode && x.variant === variant)
  for (const r of reuse.filter((x) => x.variant.startsWith('sidecar') && !isPaced(x.variant))) {
    const newHandle = reuseOf(r.mode, 'php-new-handle')
    const how = { sidecar: 'one hand-off per file', 'sidecar-thread': 'one hand-off per file on the hand-off thread\'s socket' }[r.variant] ?? 'handed over in one handOffAll()'
    out.push({
      goal: `${r.files} files of 4 KiB to httpd, ${how}: files/s ≥ php-curl new handle's ("${r.mode}" mode)`,
      met: known(r.vsNewHandle) ? r.vsNewHandle >= 1 : null,
      detail: `${sp(r.filesPerSecond)} files/s against ${sp(newHandle?.filesPerSecond)} (median ratio ${f2(r.vsNewHandle)}; curl_multi ${sp(reuseOf(r.mode, 'php-multi')?.filesPerSecond)}); ` +
        `CPU per file ${f2(r.cpuMsPerFile)} ms (PHP and daemon) against ${f2(newHandle?.cpuMsPerFile)}, a bare node PUT ${f2(reuseOf(r.mode, 'node-put')?.cpuMsPerFile)}`
    })
  }
  // The daemon's CPU per small upload, one hand-off per file; beside it the same with a pause after
  // each file, and php-curl's whole CPU per file back to back and paced alike.
  const paced = `one every ${PAUSE_US / 1000} ms`
  for (const mode of distinct(reuse, 'mode')) {
    const of = (variant) => reuseOf(mode, variant)
    const one = of('sidecar')
    if (one?.daemonCpuMsPerFile === undefined) continue
    const ms = (x) => (x === undefined ? '—' : `${f2(x)} ms`)
    const others = [['the hand-off thread\'s socket', 'sidecar-thread'], ['in one handOffAll()', 'sidecar-batch'], [paced, 'sidecar-paced']]
      .filter(([, v]) => of(v)?.daemonCpuMsPerFile !== undefined).map(([what, v]) => `${what} ${ms(of(v).daemonCpuMsPerFile)}`)
    out.push({
      goal: `daemon CPU per 4 KiB upload to httpd ≤ 0.5 ms, one hand-off per file ("${mode}" mode)`,
      met: one.daemonCpuMsPerFile <= 0.5,
      detail: `${ms(one.daemonCpuMsPerFile)}${others.length ? ` (${others.join('; ')})` : ''}; php-curl's whole CPU per file with a new handle ${ms(of('php-new-handle')?.cpuMsPerFile)} back to back` +
        `${of('php-new-handle-paced') ? `, ${ms(of('php-new-handle-paced').cpuMsPerFile)} ${paced}` : ''}; a bare node PUT ${ms(of('node-put')?.cpuMsPerFile)}` +
        `${of('node-put-paced') ? `, ${ms(of('node-put-paced').cpuMsPerFile)} ${paced}` : ''}`
    })
  }
  return out
}

// Issue #19: the daemon's peak RSS ≤ 80 MiB for one transfer and ≤ 128 MiB with 64 at once, with
// the default digest (sha256); beside it, the same with digest "none".
function concurrencyGoals (results) {
  const summary = results.concurrency?.summary ?? []
  const worstOf = (competitor, n) => summary.filter((r) => r.competitor === competitor && r.concurrency === n && r.rssMiB !== null)
    .reduce((w, r) => (w === null || r.rssMiB > w.rssMiB ? r : w), null)
  return [[1, 80], [64, 128]].flatMap(([n, limit]) => {
    const worst = worstOf('sidecar', n)
    if (!worst) return []
    const none = worstOf('sidecar-none', n)
    return [{
      goal: `daemon peak RSS ≤ ${limit} MiB with ${n === 1 ? 'one transfer' : `${n} transfers at once`}`,
      met: worst.rssMiB <= limit,
      detail: `highest ${f1(worst.rssMiB)} MiB (${worst.target} ${worst.direction})` + (none ? `; with digest "none" ${f1(none.rssMiB)} MiB (${none.target} ${none.direction})` : '')
    }]
  })
}

export function goals (results) {
  return [...(results.throughput ? throughputTargets(results.throughput.summary) : []), ...concurrencyGoals(results), ...handoffGoals(results)]
}

// The method bullets of the sections that ran (and those every section shares).
function method (params) {
  const p = params
  const ran = (section) => p.sections.includes(section)
  const smallJobs = ['handoff', 'burst', 'reuse', 'web'].some(ran)
  const protocol = p.protocol ?? 'http' // runs before the option were all HTTP
  const sizesAscend = ran('throughput')
    ? ` One daemon serves the
  whole throughput section and sizes ascend, so a size's peak also holds what smaller ones left resident.`
    : ''
  const bullets = [
    [true, `- The daemon runs as in production: \`node ${NODE_FLAGS.join(' ')} bin/transfer-sidecar.js\` (flags from the bin's
  shebang), its config listing loopback TCP and a unix socket, log level warn; a fresh one per section,
  warmed up by an untimed upload and download of 16 MiB${smallJobs ? ` (in the hand-off, burst, reuse and web sections also ${WARM_UP_SMALL_JOBS} uploads of 4 KiB over HTTP and ${WARM_UP_LINE_JOBS} over the line protocol, one at a time, on the socket the section's clients use; the hand-off section's acked-floor server gets ${WARM_UP_LINE_JOBS} calls first, the reuse section's bare node PUT ${WARM_UP_UPLOADS} PUTs)` : ''} (a fresh daemon's first jobs are much slower: its first thousands of small jobs cost it more CPU while V8 compiles their code).`],
    [ran('throughput') || ran('concurrency'), `- Every competitor runs in the same run; per size, the competitors of a direction go back to back
  and their order rotates from run to run. Ratios are medians of per-run ratios (paired), so the
  machine's drift (it is shared) cancels as far as possible. Compare ratios, not absolute figures.`],
    [ran('throughput'), `- Sizes: ${p.sizes.join(', ')} MiB; ${p.runs} run(s) per size${p.runsLarge !== p.runs ? `, ${p.runsLarge} for sizes ≥ 1000 MiB (to keep the run short)` : ''}.
  The test file is made once per size (a 16 MiB random block repeated, each copy stamped with its index).
- Timing. curl CLI: spawn to exit (WebHDFS upload: both calls). php-curl: inside the php process,
  around the transfer (DirectCurl; RETURNTRANSFER includes file_put_contents of the body; php's own
  start is not counted). Sidecar: inside a php process, from Client::upload()/download() over the
  unix socket to the end of Client::wait() on a final state; it therefore includes the journal's
  fdatasync, the temp name and publish round trips (HEAD/MOVE, GETFILESTATUS/RENAME), sha256 of
  every byte, the HDFS checksum (${p.hdfsChecksum ? 'on' : 'off'}), and for downloads an fsync before the rename.
  curl does not fsync: "curl+fsync" adds the time to fsync curl's output afterwards.`],
    [ran('throughput') && p.competitors.some((c) => c.startsWith('curl-') || c === 'sidecar-none'), `- Issue #19's pairs. \`sidecar\` (digest sha256, the default) against \`curl-sha256\`, curl doing the
  same work: download \`curl -o - URL | tee FILE | sha256sum; sync FILE\` (WebHDFS: with -L), upload
  \`sha256sum FILE & curl -T FILE URL; wait\` (WebHDFS: after the namenode call), the sha256 checked;
  its CPU is every process's (/usr/bin/time on the bash that runs them). \`curl-openssl\` is the
  same with \`openssl dgst -sha256 -r\` instead of coreutils' \`sha256sum\` (9.1 on Debian 12 does not
  use the CPU's SHA extensions: ~270 MiB/s against OpenSSL's ~1.5 GiB/s), the stronger competitor. \`sidecar-none\` (the job's
  \`digest: "none"\`: sizes still checked, the HDFS checksum still compared, the download still
  fsync'd) against plain \`curl\`. "main thread": the daemon's main thread's user+sys from
  /proc/PID/task/PID/stat over the job, per GiB, and its ratio to curl's CPU per GiB (plain curl,
  median at that size).`],
    [ran('throughput') || ran('concurrency'), '- `sync` runs before every timed transfer, so the writeback of the previous one does not land in it.'],
    [true, `- Memory. curl: max RSS from /usr/bin/time. PHP: the php process's VmHWM (RETURNTRANSFER runs with
  memory_limit = 2.2 × file + 128 MiB). Sidecar: the daemon's VmHWM over the job (reset before it
  through /proc/PID/clear_refs), which includes the daemon's idle footprint.${sizesAscend}
- CPU. curl: user+sys from /usr/bin/time, which has 10 ms resolution: below 0.05 s it is left out
  (—). PHP: getrusage around the transfer. Sidecar: the daemon's user+sys from /proc/PID/stat over
  the job plus the php process's.`],
    [ran('throughput') || ran('concurrency') || ran('reuse'), `- Verification. Downloads: size and sha256 of the file on disk (sidecar also: the sha256 it reports).
  Uploads to httpd: size and sha256 of the file in httpd's directory; to WebHDFS: size (sidecar also
  the sha256 and HDFS checksum it checked). Concurrency: curl downloads and uploads to httpd, sizes
  and 64 KiB samples per 16 MiB block; sidecar downloads, size and the job's sha256; sidecar uploads
  to httpd, the job's sha256, size and samples; uploads to WebHDFS, size only (sidecar also the
  job's sha256); sidecar-none (digest "none"), the job's size and the file checks of curl's.
  Connection reuse: every file compared byte for byte.`],
    [ran('alloc'), `- The study's falling curve (section 1c): downloads from httpd of ${p.allocSizes.join(', ')} MiB, ${p.allocRuns} run(s) each, by php-curl
  RETURNTRANSFER as in section 1, by the same under \`LD_PRELOAD=bench/shim/no-inplace-growth.c\` (built with cc:
  mremap may grow a mapping in place only within its 2 MiB step, so PHP's allocator grows the response string as on
  Windows, allocating a new block and copying the whole string each time it outgrows 2 MiB more), and by the sidecar
  with the job handed over by a php process under the same shim. "÷ own at N MiB" is each one's median throughput over its own at the smallest size.`],
    [ran('concurrency'), `- Concurrency: ${p.concurrency.join(', ')} transfers of ${p.concSizeMiB} MiB at once (${p.concRuns} run(s); targets ${p.concTargets.join(', ')}),
  N curl processes vs N jobs on a target whose concurrency is raised to ${Math.max(...p.concurrency)}, with the default
  digest (sidecar: sha256 on the hashing thread) and with \`digest: "none"\` (sidecar-none); jobs submitted
  over TCP from Node; a fresh daemon for each sidecar point, so its peak RSS belongs to that N.
  Aggregate MiB/s = N × size / (first start → last end).`],
    [ran('handoff'), `- Hand-off: ${p.handoffCalls} calls per variant back to back from one php process, uploading a 4 KiB file to
  httpd; times are hrtime around each call. After the burst the uploads are let finish; lost =
  the call returned but the job/file never appeared; errors = the call threw (e.g. no-ack: connect
  refused with EAGAIN when the daemon's accept queue is full). Percentiles and hand-offs/s count
  only the calls that did not throw. The daemon runs the uploads (4 at once) while the burst goes
  on. CPU "all", per upload handed off: PHP's (and the shells' it waited for, failed calls
  included) plus the daemon's until its queue is empty, or the background curls' (each runs under
  \`bash -c 'curl …; times'\`, whose children line gives that curl's CPU; the wrapper's own is not
  counted).
  The -paced variants make ${p.handoffPacedCalls} calls, one every 5 ms (the pause not timed; calls/s left out):
  what one request of an endpoint under its usual load waits, the daemon mostly idle when it comes.
  The sidecar's variants (acked-*, noack-*) run once per journal mode (${(p.journalModes ?? ['fsync']).join(', ')}: the daemon's
  \`journal.sync\`), each mode on a fresh daemon; the others once. redis-lpush: php-redis \`LPUSH\` of the same JSON
  job body \`Client::upload()\` sends, to a private redis-server (\`appendonly yes\`, \`appendfsync everysec\`, loopback
  TCP, its files in the run's temporary directory); lost = pushed but not in the list (LLEN) afterwards; its
  "all CPU" is PHP's plus redis-server's (no upload runs). fdatasync: the floor of "fsync" mode, measured from
  Node: \`fs.writeSync\` of a ${JOURNAL_LINE_BYTES}-byte line (a journal record's size) to a file opened O_APPEND, then
  \`fs.fdatasyncSync\` (both direct system calls, no thread pool), on the file system of the daemon's state
  directory; its "all CPU" is the bench process's. fdatasync-loaded: the same loop back to back in a thread of the bench
  process while php-curl PUTs the 4 KiB file to httpd back to back (the direct variant's load, what the daemon's jobs
  bring during its back-to-back variants): httpd's files are on the same disk, and each fdatasync commits them too.
  pingpong: the same JSON job line written by PHP to a second PHP process over a unix socketpair, which answers it with
  a 202 line as the daemon's and does nothing else (no parse, check, record or upload): the floor of any acknowledged
  hand-off between two processes on this machine, paced and back to back; its CPU is both processes'.
  acked-floor: \`Client::upload()\`, as acked-unix, to bench/lib/floor-server.js, a node process that does the hand-off's
  own work with the daemon's functions and nothing else: JSON.parse, \`parseJobRequest\`, \`resolveSource\` (realpath, stat,
  the roots), the id looked up, \`newJob\`, the record appended to a journal of its own with one \`write(2)\` on its thread
  (O_DSYNC in "fsync" mode: no thread-pool hop), the 202 line; no job runs (lost = answered 202 without a record). Once per
  journal mode, 300 untimed calls first. What the daemon spends above it is its own machinery; what it spends above
  pingpong is the hand-off's own work, the checks and the record the README promises, which redis-lpush does not do.`],
    [ran('burst'), `- Burst (issue #18, 4): ${p.burstClients} php processes (bench/php/burst.php) each hand off a share of ${p.burstJobs} uploads of
  one 4 KiB file to a \`file\` target, back to back over the unix socket, one kept-alive Client each (protocol ${protocol}); they
  start together (each creates a ready file once its client exists, then polls for a go file every 100 µs).
  hand-offs/s = acked jobs / (first client's start → last client's last ack), one clock (microtime) for all.
  Once per journal mode, and again on a daemon with a hand-off thread whose socket the clients hand off on (\`sidecar-thread\`,
  the client's \`handoff_socket\`, line protocol), each on a fresh daemon with \`queue.keepFinished\` ${KEEP_FINISHED_DOC} (\`queue.limit\` 1,000,000, so the
  whole burst is accepted); the daemon's VmRSS is sampled every 200 ms during the burst and during the
  drain after it. Then: lost = an acked job whose file is not in the target directory with 4096 bytes;
  duplicated = an id acked twice, or the daemon's accepted or succeeded
  counters (\`sidecar_jobs_accepted_total\`, \`sidecar_jobs_finished_total{state="succeeded"}\`, over the burst) above
  the acked count; retries = \`sidecar_transfer_retries_total\` over the burst plus kept jobs with attempts > 1
  (a job run twice would show there); stray files = files in the target nobody acked; jobs kept = jobs the daemon still lists afterwards (warm-up's included).
  The anchor: the same clients LPUSHing the same job body to the redis-server above; lost/duplicated from
  the list's length and distinct ids afterwards. And \`floor\`, per journal mode: the same clients to the hand-off section's
  acked-floor server (the hand-off's own work alone, no job run); lost = acked without a journal record.`],
    [ran('web'), `- Web endpoint: Debian's nginx and php-fpm 8.2 on private configs, pool \`pm = static\` with 8 workers,
  \`wrk -t2 -c16 -d${p.webSeconds}s\` per page, 20 warm-up requests per page; a new Client (and connection) per request (protocol ${protocol}).
  direct.php PUTs 4 KiB to httpd with php-curl, then answers; finish.php answers, calls \`fastcgi_finish_request()\`,
  then does the same PUT in the same worker; handoff.php hands the upload to the daemon on a new connection, handoff-persistent.php on the one its worker keeps (the PHP client's \`persistent\` option); both
  again on a daemon of their own with a hand-off thread (\`handoff.listen\`, the client's \`handoff_socket\`; line protocol). Each page once with httpd
  on loopback and once 10 ms round trip away: the tests' TCP proxy (this kernel has no netem) holds each direction 5 ms (and a new connection
  one round trip), for the pages' php-curl and the daemon's target alike. PHP CPU is php-fpm's (master and
  workers); nginx's is not counted.`],
    [ran('reuse'), `- Connection reuse: ${p.reuseFiles} files of 4 KiB to httpd, ${p.reuseRuns} run(s); curl_multi with 4 transfers in flight, as
  many as the sidecar's default per-target concurrency; the sidecar's PHP client over ${protocol}, its clock and CPU (PHP's and the
  daemon's) stopped when the daemon has no job left unfinished (the last job waited for, then \`/healthz\`), before each job's end is checked. Once per journal mode (${(p.journalModes ?? ['fsync']).join(', ')}), on a fresh daemon each,
  the php-curl variants again beside it; "÷ php-new-handle" pairs runs of the same mode. \`node-put\` (bench/node-put.js) is a bare
  node process under the daemon's flags that reads each file on its main thread and PUTs it over a keep-alive node:http agent, 4 at
  once, with no job around it: the CPU a Node daemon's small upload cannot go below. \`sidecar-paced\`, \`php-new-handle-paced\` and
  \`node-put-paced\` upload the first ${pacedFiles(p)} files one at a time with a ${PAUSE_US / 1000} ms pause after each (PHP's \`usleep\`, node's
  timer), as uploads come from a web page's users: the CPU a file costs when the work comes in short bursts between idle times.`]
  ]
  return bullets.filter(([on]) => on).map(([, text]) => text).join('\n')
}

export function markdown ({ startedAt, seconds, machine, params, loadAvg, results, charts, failures = [] }) {
  const m = machine
  const g = goals(results)
  const sections = []
  if (results.throughput) sections.push(`## 1–2. Download and upload throughput against file size\n\nDaemon idle RSS after start: ${f1(results.throughput.daemonIdleRssMiB)} MiB.\n\n${throughputSection(results.throughput.summary, charts)}`)
  if (results.alloc) sections.push(`## 1c. The study's falling curve: php-curl RETURNTRANSFER with PHP's allocator growing blocks as on Windows (httpd download)\n\n${allocSection(results.alloc.summary, charts)}`)
  if (results.handoff) sections.push(`## 3. Hand-off cost from PHP (${params.handoffCalls} calls back to back, ${params.handoffPacedCalls} paced, 4 KiB upload to httpd; the sidecar per journal mode)\n\n${handoffSection(results.handoff.records, charts)}`)
  if (results.web) sections.push(`## 3b. Web endpoint on nginx + php-fpm: hand off vs upload directly vs finish-request\n\n${webSection(results.web.records, charts)}`)
  if (results.concurrency) sections.push(`## 4. Concurrency (${params.concSizeMiB} MiB per transfer)\n\nDaemon idle RSS after start: ${f1(results.concurrency.daemonIdleRssMiB)} MiB.\n\n${concurrencySection(results.concurrency.summary, charts)}`)
  if (results.burst) sections.push(`## 4b. Concurrency of hand-offs: ${params.burstClients} PHP processes at once, ${params.burstJobs} jobs (4 KiB uploads to a file target)\n\n${burstSection(results.burst, charts)}`)
  if (results.reuse) sections.push(`## 5. Connection reuse (${params.reuseFiles} files of 4 KiB to httpd)\n\n${reuseSection(results.reuse.summary, charts)}`)

  return `# Benchmark matrix: transfer-sidecar vs curl CLI and php-curl

Run ${startedAt} (${formatSeconds(seconds)}): \`npm run bench${params.argv.length ? ` -- ${params.argv.join(' ')}` : ''}\` (preset ${params.preset}), git ${m.git}.

## Machine
- ${m.nproc} vCPU ${m.cpuModel}, ${m.memGiB} GiB RAM, ${m.kernel}
- disk: ${m.disk}
- 1-minute load average ${f2(loadAvg.start)} at start, ${f2(loadAvg.end)} at end (shared machine: other load widens the spread)

## Versions
- node ${m.node}; ${m.php} with libcurl ${m.phpLibcurl}; ${m.curl}
- ${m.httpd} (mod_dav, private config of test/harness/httpd.js); ${m.hadoop}, ${m.java}
- ${m.wrk}${m.redis ? `; redis-server ${m.redis}` : ''}

${failures.length ? `## Failed sections\n\n${failures.map((f) => `- **${f.section}**: ${f.error.split('\n')[0]}`).join('\n')}\n\n` : ''}## Targets (issues #6 and #18, same-run ratios)
${g.length ? table(['goal', 'met?', 'detail'], g.map((x) => [x.goal, x.met === null ? 'n/a' : x.met ? '**met**' : '**missed**', x.detail])) : 'No section with a target ran.'}

## Method
${method(params)}

${sections.join('\n\n')}

## Findings

_To be filled in with profiling notes._
`
}

export async function saveResults (dir, { meta, results, charts }) {
  await fs.mkdir(dir, { recursive: true })
  const written = []
  const write = async (name, text) => {
    await fs.writeFile(path.join(dir, name), text)
    written.push(name)
  }
  for (const [section, r] of Object.entries(results)) {
    await write(`${section}.json`, JSON.stringify({ ...meta, ...r }, null, 2) + '\n')
    await write(`${section}.csv`, toCsv(r.records))
    if (r.summary) await write(`${section}-summary.csv`, toCsv(r.summary))
  }
  await write('REPORT.md', markdown({ ...meta, results, charts }))
  return written
}

// Local date, YYYY-MM-DD, for the results directory.
export function today (d = new Date()) {
  const pad = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`
}
