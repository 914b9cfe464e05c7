// Command line of bench/run.js. Lists are comma separated; unknown names are rejected early
// so a typo does not silently skip half the benchmark.
import { parseArgs } from 'node:util'

export const TARGETS = ['http', 'webhdfs']
export const DIRECTIONS = ['upload', 'download']
export const COMPETITORS = ['curl', 'sidecar']

export const USAGE = `Usage: node bench/run.js [options]

  --size-mib N        test file size in MiB (default 1024)
  --runs N            runs per target (default 3)
  --targets LIST      ${TARGETS.join(',')} (default: both)
  --directions LIST   ${DIRECTIONS.join(',')} (default: both)
  --competitors LIST  ${COMPETITORS.join(',')} (default: both)
  --cpu-prof DIR      run the daemon under node --cpu-prof, profiles written to DIR at exit
  --no-save           do not write bench/results/<date>/first-bench.{json,md}
  --no-hdfs-checksum  turn the sidecar's end-to-end HDFS checksum off (webhdfs.checksum: false)
  -h, --help`

function list (value, allowed, flag) {
  const items = value.split(',').map((s) => s.trim()).filter(Boolean)
  for (const item of items) {
    if (!allowed.includes(item)) throw new Error(`${flag}: unknown ${JSON.stringify(item)} (allowed: ${allowed.join(', ')})`)
  }
  if (items.length === 0) throw new Error(`${flag}: empty list`)
  return items
}

function positiveInt (value, flag) {
  const n = Number(value)
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag}: must be a positive integer, got ${JSON.stringify(value)}`)
  return n
}

export function parseCli (argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      'size-mib': { type: 'string', default: '1024' },
      runs: { type: 'string', default: '3' },
      targets: { type: 'string', default: TARGETS.join(',') },
      directions: { type: 'string', default: DIRECTIONS.join(',') },
      competitors: { type: 'string', default: COMPETITORS.join(',') },
      'cpu-prof': { type: 'string' },
      'no-save': { type: 'boolean', default: false },
      'no-hdfs-checksum': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false }
    }
  })
  return {
    help: values.help,
    hdfsChecksum: !values['no-hdfs-checksum'],
    sizeMiB: positiveInt(values['size-mib'], '--size-mib'),
    runs: positiveInt(values.runs, '--runs'),
    targets: list(values.targets, TARGETS, '--targets'),
    directions: list(values.directions, DIRECTIONS, '--directions'),
    competitors: list(values.competitors, COMPETITORS, '--competitors'),
    cpuProfDir: values['cpu-prof'] ?? null,
    save: !values['no-save']
  }
}
