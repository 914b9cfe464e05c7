// Output: the console table, the machine description, and the files under bench/results/<date>/.
import os from 'node:os'
import fs from 'node:fs/promises'
import path from 'node:path'
import { spawnSync } from 'node:child_process'

function firstLine (cmd, args) {
  // Some tools (java -version, apache2 -v) print their version on stderr.
  const r = spawnSync(cmd, args, { encoding: 'utf8' })
  return `${r.stdout ?? ''}\n${r.stderr ?? ''}`.trim().split('\n')[0].trim() || 'unknown'
}

export function machineInfo () {
  return {
    nproc: os.availableParallelism(),
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    kernel: `${os.type()} ${os.release()}`,
    node: process.version,
    curl: firstLine('curl', ['--version']).split(' ').slice(0, 4).join(' '),
    httpd: firstLine('/usr/sbin/apache2', ['-v']).replace(/^Server version:\s*/, ''),
    java: firstLine('java', ['-version'])
  }
}

const f0 = (x) => (x === null || x === undefined ? '—' : x.toFixed(0))
const f1 = (x) => (x === null || x === undefined ? '—' : x.toFixed(1))
const f2 = (x) => (x === null || x === undefined ? '—' : x.toFixed(2))
const spreadText = (s) => (s ? `${f0(s.median)} (${f0(s.min)}–${f0(s.max)})` : '—')

const COLUMNS = [
  ['target', (r) => r.target],
  ['direction', (r) => r.direction],
  ['curl MiB/s med (min–max)', (r) => spreadText(r.curl?.mibps)],
  ['sidecar MiB/s med (min–max)', (r) => spreadText(r.sidecar?.mibps)],
  ['sidecar/curl', (r) => f2(r.ratio)],
  ['sidecar peak RSS MiB', (r) => f1(r.sidecar?.peakRssMiB)],
  ['CPU s curl / sidecar', (r) => `${f2(r.curl?.cpuS)} / ${f2(r.sidecar?.cpuS)}`],
  ['curl -o + fsync MiB/s', (r) => (r.curlFsync ? f0(r.curlFsync.mibps?.median) : '—')],
  ['sidecar/(curl+fsync)', (r) => f2(r.ratioWithFsync)]
]

export function tableText (summary) {
  const rows = [COLUMNS.map(([h]) => h), ...summary.map((r) => COLUMNS.map(([, get]) => get(r)))]
  const widths = COLUMNS.map((_, i) => Math.max(...rows.map((row) => row[i].length)))
  const line = (row) => row.map((cell, i) => cell.padEnd(widths[i])).join('  ')
  return [line(rows[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n')
}

function tableMarkdown (summary) {
  const head = COLUMNS.map(([h]) => h)
  const rows = summary.map((r) => COLUMNS.map(([, get]) => get(r)))
  return [head, head.map(() => '---'), ...rows].map((row) => `| ${row.join(' | ')} |`).join('\n')
}

export function markdown ({ machine, params, summary, hwmMiB, idleRssMiB, loadAvg, startedAt }) {
  return `# First benchmark: transfer-sidecar vs curl CLI

Run ${startedAt} with \`node bench/run.js --size-mib ${params.sizeMiB} --runs ${params.runs} --targets ${params.targets.join(',')}\`.

## Machine
- ${machine.nproc} vCPU, ${machine.cpuModel}, ${machine.memGiB} GiB RAM, ${machine.kernel}
- node ${machine.node}; ${machine.curl}
- ${machine.httpd}; ${machine.java} (MiniDFSCluster)
- 1-minute load average ${f2(loadAvg.start)} at start, ${f2(loadAvg.end)} at end (shared machine; other load inflates the spread)

## Results (${params.sizeMiB} MiB file, ${params.runs} runs, loopback)
${tableMarkdown(summary)}

Daemon RSS: ${f1(idleRssMiB)} MiB idle after start, VmHWM ${f1(hwmMiB)} MiB at the end.

How to read it:
- MiB/s = file size / wall time. curl: spawn to exit (WebHDFS upload: both curl calls).
  Sidecar: POST /v1/jobs to the end of the long-poll, so it includes the job journal's fdatasyncs,
  the HEAD/MOVE (httpd) or GETFILESTATUS/RENAME (WebHDFS) around the data, and, for downloads,
  the fsync of the downloaded file before the rename, which curl does not do.
- "curl -o + fsync" adds the time to fsync curl's output, the like-for-like figure for downloads;
  sidecar/(curl+fsync) is the ratio against it.
- sidecar/curl is the median of per-run ratios (curl and sidecar measured back to back, order
  alternating between runs); the machine drifts, so compare ratios, not absolute figures.
- Peak RSS: the daemon's VmRSS sampled every 20 ms during its transfers.
- \`sync\` runs before every timed transfer so that writeback of the previous one does not land in it.
`
}

export async function saveResults (dir, name, { json, md }) {
  await fs.mkdir(dir, { recursive: true })
  const jsonFile = path.join(dir, `${name}.json`)
  const mdFile = path.join(dir, `${name}.md`)
  await fs.writeFile(jsonFile, JSON.stringify(json, null, 2) + '\n')
  await fs.writeFile(mdFile, md)
  return { jsonFile, mdFile }
}

// Local date, YYYY-MM-DD, for the results directory.
export function today (d = new Date()) {
  const pad = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`
}
