// Command line of bench/run.js. Two presets, quick (default) and --full; every option overrides
// its preset. Lists are comma separated; unknown names are rejected early so a typo does not
// silently skip half the benchmark.
import { parseArgs } from 'node:util'

export const TARGETS = ['http', 'webhdfs']
export const DIRECTIONS = ['download', 'upload']
export const SECTIONS = ['throughput', 'alloc', 'concurrency', 'reuse', 'handoff', 'burst', 'web']
// journal.sync of the daemon (issue #18): the hand-off, burst and reuse sections run once per mode.
export const JOURNAL_MODES = ['fsync', 'write']
// Who moves the bytes, per direction (section 1 and 2 of the issue).
export const COMPETITORS = {
  download: ['php-returntransfer', 'php-file', 'curl', 'curl-sha256', 'curl-openssl', 'sidecar', 'sidecar-none'],
  upload: ['php-infile', 'curl', 'curl-sha256', 'curl-openssl', 'sidecar', 'sidecar-none']
}
const ALL_COMPETITORS = [...new Set(Object.values(COMPETITORS).flat())]
// The PHP client's hand-off protocol in the burst, reuse and web sections (the hand-off section runs both).
export const PROTOCOLS = ['lines', 'http']
export const HANDOFF_VARIANTS = ['acked-unix', 'acked-tcp', 'acked-http-unix', 'acked-thread', 'acked-floor', 'noack-unix', 'exec-curl', 'direct', 'redis-lpush', 'pingpong', 'fdatasync', 'fdatasync-loaded',
  'acked-unix-paced', 'acked-tcp-paced', 'acked-http-unix-paced', 'acked-thread-paced', 'acked-floor-paced', 'direct-paced', 'redis-lpush-paced', 'pingpong-paced', 'fdatasync-paced']

// The published study's matrix: 10–100 MiB step 10, 100–300 step 50, 500/1000/1500.
const STUDY_SIZES = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 150, 200, 250, 300, 500, 1000, 1500]

export const PRESETS = {
  // A correctness run of a minute or two: every variant runs, the figures mean little.
  smoke: {
    sizes: [10],
    runs: 1,
    runsLarge: 1,
    allocSizes: [10],
    allocRuns: 1,
    concurrency: [1, 4],
    concSizeMiB: 16,
    concTargets: ['http'],
    concRuns: 1,
    handoffCalls: 300,
    handoffPacedCalls: 60,
    webSeconds: 2,
    reuseFiles: 200,
    reuseRuns: 1,
    burstJobs: 4000,
    burstClients: 16
  },
  quick: {
    sizes: [10, 100, 500],
    runs: 1,
    runsLarge: 1,
    allocSizes: [10, 100, 300],
    allocRuns: 1,
    concurrency: [1, 4, 16, 64],
    concSizeMiB: 64,
    concTargets: ['http'],
    concRuns: 1,
    handoffCalls: 2000,
    handoffPacedCalls: 300,
    webSeconds: 5,
    reuseFiles: 1000,
    reuseRuns: 1,
    burstJobs: 20_000,
    burstClients: 16
  },
  full: {
    sizes: STUDY_SIZES,
    runs: 3,
    runsLarge: 2,
    allocSizes: [...STUDY_SIZES.filter((size) => size <= 300), 500],
    allocRuns: 2,
    concurrency: [1, 4, 16, 64],
    concSizeMiB: 128,
    concTargets: ['http', 'webhdfs'],
    concRuns: 1,
    handoffCalls: 2000,
    handoffPacedCalls: 300,
    webSeconds: 10,
    reuseFiles: 1000,
    reuseRuns: 3,
    burstJobs: 100_000,
    burstClients: 16
  }
}

// --large: issue #19's matrix. Large transfers only, each sidecar against its honest competitor
// (sha256: curl | tee | sha256sum + sync, sha256sum beside curl -T, and the same with openssl;
// digest "none": plain curl),
// 5 paired runs per size, and peak RSS with 1 and 64 transfers at once.
export const LARGE = {
  sections: ['throughput', 'concurrency'],
  sizes: [10, 100, 500, 1000, 1500],
  runs: 5,
  competitors: ['curl', 'curl-sha256', 'curl-openssl', 'sidecar', 'sidecar-none'],
  concurrency: [1, 64],
  concTargets: ['http', 'webhdfs']
}

// Sizes from this one up get --runs-large runs instead of --runs (they dominate the wall time).
export const LARGE_MIB = 1000

export const USAGE = `Usage: node bench/run.js [--full] [options]      (npm run bench [-- options])

Without --full: a quick matrix (sizes ${PRESETS.quick.sizes.join(',')} MiB, 1 run, concurrency on http only,
about a quarter of an hour here). --full: the whole matrix (study sizes ${STUDY_SIZES[0]}…${STUDY_SIZES.at(-1)} MiB, 3 runs, 2 from ${LARGE_MIB} MiB).
The estimated duration is printed at the start.

  --full                 the whole matrix (defaults below in [quick | full])
  --smoke                a correctness run: every variant, small counts (${PRESETS.smoke.handoffCalls} hand-off calls, ${PRESETS.smoke.handoffPacedCalls} paced,
                         ${PRESETS.smoke.burstJobs} burst jobs, ${PRESETS.smoke.reuseFiles} reuse files, ${PRESETS.smoke.sizes} MiB throughput, ${PRESETS.smoke.webSeconds} s of wrk)
  --large                issue #19's matrix: sections ${LARGE.sections.join(',')}, sizes ${LARGE.sizes.join(',')} MiB,
                         ${LARGE.runs} runs each, competitors ${LARGE.competitors.join(',')},
                         concurrency ${LARGE.concurrency.join(',')} on ${LARGE.concTargets.join(',')}
  --sections LIST        ${SECTIONS.join(',')} (default: all)
  --sizes LIST           file sizes in MiB for throughput [${PRESETS.quick.sizes.join(',')} | study matrix]
  --runs N               runs per size [1 | 3]
  --runs-large N         runs per size for sizes >= ${LARGE_MIB} MiB [1 | 2]
  --targets LIST         ${TARGETS.join(',')} for throughput (default: both)
  --directions LIST      ${DIRECTIONS.join(',')} (default: both), throughput and concurrency
  --competitors LIST     ${ALL_COMPETITORS.join(',')} (default: all)
  --alloc-sizes LIST     sizes in MiB of the alloc section (PHP growing blocks as on Windows;
                         its time grows with the square of the size) [${PRESETS.quick.allocSizes.join(',')} | 10…300,500]
  --alloc-runs N         runs per size of the alloc section [${PRESETS.quick.allocRuns} | ${PRESETS.full.allocRuns}]
  --concurrency LIST     concurrent transfers [1,4,16,64]
  --conc-size-mib N      size of each concurrent transfer [64 | 128]
  --conc-targets LIST    targets of the concurrency section [http | http,webhdfs]
  --conc-runs N          runs per concurrency level [1 | 1]
  --handoff-calls N      calls per hand-off variant, back to back [2000]
  --handoff-paced-calls N  calls of the -paced variants, one every 5 ms [300]
  --handoff-variants L   ${HANDOFF_VARIANTS.slice(0, 8).join(',')},
                         ${HANDOFF_VARIANTS.slice(8).join(',')}
                         (default: all; acked-*, noack-* run once per journal mode)
  --journal-modes LIST   ${JOURNAL_MODES.join(',')}: the daemon's journal.sync, one fresh daemon per mode in the
                         handoff, burst and reuse sections (default: both)
  --burst-jobs N         jobs of the burst section, over all clients [${PRESETS.quick.burstJobs} | ${PRESETS.full.burstJobs}]
  --burst-clients N      php processes submitting at once in the burst section [16]
  --web-seconds N        wrk duration per page [5 | 10]
  --reuse-files N        small files in the connection-reuse section [1000]
  --reuse-runs N         runs of the connection-reuse section [1 | 3]
  --protocol P           ${PROTOCOLS.join(' or ')}: how the PHP client hands jobs off in the burst, reuse and web
                         sections (the handoff section runs both) [lines]
  --out DIR              results directory [bench/results/<date>/quick | bench/results/<date>]
  --no-save              print only, write nothing
  --estimate             print the plan and its estimated duration, run nothing
  --cpu-prof DIR         run the daemon under node --cpu-prof, profiles written to DIR
  --no-hdfs-checksum     turn the sidecar's end-to-end HDFS checksum off (webhdfs.checksum: false)
  -h, --help`

function one (value, allowed, flag) {
  if (!allowed.includes(value)) throw new Error(`${flag}: unknown ${JSON.stringify(value)} (allowed: ${allowed.join(', ')})`)
  return value
}

function list (value, allowed, flag) {
  const items = value.split(',').map((s) => s.trim()).filter(Boolean)
  for (const item of items) one(item, allowed, flag)
  if (items.length === 0) throw new Error(`${flag}: empty list`)
  return [...new Set(items)]
}

function positiveInt (value, flag) {
  const n = Number(value)
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag}: must be a positive integer, got ${JSON.stringify(value)}`)
  return n
}

function intList (value, flag) {
  const items = value.split(',').map((s) => s.trim()).filter(Boolean).map((s) => positiveInt(s, flag))
  if (items.length === 0) throw new Error(`${flag}: empty list`)
  return [...new Set(items)].sort((a, b) => a - b)
}

export function parseCli (argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      full: { type: 'boolean', default: false },
      smoke: { type: 'boolean', default: false },
      large: { type: 'boolean', default: false },
      sections: { type: 'string' },
      sizes: { type: 'string' },
      runs: { type: 'string' },
      'runs-large': { type: 'string' },
      targets: { type: 'string' },
      directions: { type: 'string' },
      competitors: { type: 'string' },
      'alloc-sizes': { type: 'string' },
      'alloc-runs': { type: 'string' },
      concurrency: { type: 'string' },
      'conc-size-mib': { type: 'string' },
      'conc-targets': { type: 'string' },
      'conc-runs': { type: 'string' },
      'handoff-calls': { type: 'string' },
      'handoff-variants': { type: 'string' },
      'handoff-paced-calls': { type: 'string' },
      'journal-modes': { type: 'string' },
      'burst-jobs': { type: 'string' },
      'burst-clients': { type: 'string' },
      'web-seconds': { type: 'string' },
      'reuse-files': { type: 'string' },
      'reuse-runs': { type: 'string' },
      protocol: { type: 'string' },
      out: { type: 'string' },
      'no-save': { type: 'boolean', default: false },
      estimate: { type: 'boolean', default: false },
      'cpu-prof': { type: 'string' },
      'no-hdfs-checksum': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false }
    }
  })
  if ([values.full, values.smoke, values.large].filter(Boolean).length > 1) throw new Error('--full, --smoke, --large: choose one')
  const preset = values.full ? 'full' : values.smoke ? 'smoke' : values.large ? 'large' : 'quick'
  const p = preset === 'large' ? { ...PRESETS.full, ...LARGE, runsLarge: LARGE.runs } : PRESETS[preset]
  const int = (flag, fallback) => (values[flag] === undefined ? fallback : positiveInt(values[flag], `--${flag}`))
  const runs = int('runs', p.runs)
  return {
    help: values.help,
    preset,
    argv,
    sections: values.sections ? list(values.sections, SECTIONS, '--sections') : p.sections ?? SECTIONS,
    sizes: values.sizes ? intList(values.sizes, '--sizes') : p.sizes,
    runs,
    // An explicit --runs applies to large sizes too unless --runs-large says otherwise.
    runsLarge: int('runs-large', values.runs === undefined ? p.runsLarge : runs),
    targets: values.targets ? list(values.targets, TARGETS, '--targets') : TARGETS,
    directions: values.directions ? list(values.directions, DIRECTIONS, '--directions') : DIRECTIONS,
    competitors: values.competitors ? list(values.competitors, ALL_COMPETITORS, '--competitors') : p.competitors ?? ALL_COMPETITORS,
    allocSizes: values['alloc-sizes'] ? intList(values['alloc-sizes'], '--alloc-sizes') : p.allocSizes,
    allocRuns: int('alloc-runs', p.allocRuns),
    concurrency: values.concurrency ? intList(values.concurrency, '--concurrency') : p.concurrency,
    concSizeMiB: int('conc-size-mib', p.concSizeMiB),
    concTargets: values['conc-targets'] ? list(values['conc-targets'], TARGETS, '--conc-targets') : p.concTargets,
    concRuns: int('conc-runs', p.concRuns),
    handoffCalls: int('handoff-calls', p.handoffCalls),
    handoffPacedCalls: int('handoff-paced-calls', p.handoffPacedCalls),
    handoffVariants: values['handoff-variants'] ? list(values['handoff-variants'], HANDOFF_VARIANTS, '--handoff-variants') : HANDOFF_VARIANTS,
    journalModes: values['journal-modes'] ? list(values['journal-modes'], JOURNAL_MODES, '--journal-modes') : JOURNAL_MODES,
    burstJobs: int('burst-jobs', p.burstJobs),
    burstClients: int('burst-clients', p.burstClients),
    webSeconds: int('web-seconds', p.webSeconds),
    reuseFiles: int('reuse-files', p.reuseFiles),
    reuseRuns: int('reuse-runs', p.reuseRuns),
    protocol: values.protocol === undefined ? 'lines' : one(values.protocol, PROTOCOLS, '--protocol'),
    out: values.out ?? null,
    save: !values['no-save'],
    estimateOnly: values.estimate,
    cpuProfDir: values['cpu-prof'] ?? null,
    hdfsChecksum: !values['no-hdfs-checksum']
  }
}

// Runs for one throughput size.
export const runsFor = (opts, sizeMiB) => (sizeMiB >= LARGE_MIB ? opts.runsLarge : opts.runs)

// The competitors of one direction that were selected.
export const competitorsFor = (opts, direction) => COMPETITORS[direction].filter((c) => opts.competitors.includes(c))
