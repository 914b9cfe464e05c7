// Prometheus metrics (prom-client) on a registry of our own. Names follow the Prometheus rules
// (base units, `_total` counters, real histograms); labels are bounded: direction, backend type,
// via, mode, outcome, job state, error code, size class; never paths, ids, hosts or target names.
// Counters whose label values are known up front are initialised to 0 so that rate() and alerts
// see them before the first event. The README's metrics table documents every series.
import fs from 'node:fs/promises'
import path from 'node:path'
import { createRequire } from 'node:module'

// prom-client's classes, without its index: that also loads its Pushgateway (node:https, node's TLS,
// zlib), cluster aggregation and Summary, none of which the daemon uses. With node-http.js's lazy
// https, 2.5–3 MiB less RSS at idle and at every peak (measured on the daemon, three pairs).
// test/metrics.test.js holds these paths to the index's own classes.
const require = createRequire(import.meta.url)
export const client = {
  Registry: require('prom-client/lib/registry'),
  Counter: require('prom-client/lib/counter'),
  Gauge: require('prom-client/lib/gauge'),
  Histogram: require('prom-client/lib/histogram'),
  collectDefaultMetrics: require('prom-client/lib/defaultMetrics')
}

const MiB = 1 << 20
const GiB = 1 << 30

// File-size classes of the "throughput vs file size" view: small files (hand-off and request
// overhead dominate), then one class per decade up to 1 GiB.
export const SIZE_CLASSES = Object.freeze([
  [MiB, 'lt_1MiB'],
  [10 * MiB, '1_10MiB'],
  [100 * MiB, '10_100MiB'],
  [GiB, '100MiB_1GiB'],
  [Infinity, 'ge_1GiB']
])

export function sizeClass (bytes) {
  return SIZE_CLASSES.find(([limit]) => bytes < limit)[1]
}

// Powers of two from 1 MiB/s to 4 GiB/s (resolves a factor of 2 anywhere in that range).
const THROUGHPUT_BUCKETS = Array.from({ length: 13 }, (_, i) => MiB * 2 ** i)
// Powers of two from 1 MiB to 4 GiB: a php-curl buffered download holds 1–2× the file.
const MEMORY_BUCKETS = Array.from({ length: 13 }, (_, i) => MiB * 2 ** i)
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]
const HANDOFF_BUCKETS = [0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1]

// The spool's file names (see spool.js): <id>.json; temp files and rejected/ are not pending.
const SPOOL_NAME = /^[A-Za-z0-9_-]{8,64}\.json$/

// Counts the pending files of a spool directory and the age of the oldest one.
export async function spoolBacklog (dir, now = Date.now()) {
  const out = { pending: 0, rejected: 0, oldestAgeSeconds: 0 }
  if (!dir) return out
  const names = (await fs.readdir(dir).catch(() => [])).filter((n) => SPOOL_NAME.test(n))
  let oldest = now
  for (let i = 0; i < names.length; i += 256) {
    const stats = await Promise.all(names.slice(i, i + 256).map((n) => fs.stat(path.join(dir, n)).catch(() => null)))
    for (const st of stats) {
      if (!st?.isFile()) continue
      out.pending++
      oldest = Math.min(oldest, st.mtimeMs)
    }
  }
  out.oldestAgeSeconds = out.pending ? Math.max(0, (now - oldest) / 1000) : 0
  const rejected = await fs.readdir(path.join(dir, 'rejected')).catch(() => [])
  out.rejected = rejected.filter((n) => SPOOL_NAME.test(n)).length
  return out
}

// `scheduler` returns the Scheduler (or null before it exists): queue gauges read its stats() and
// config. `spoolDir` returns the spool directory (default: the scheduler's config.spool.dir).
// `backends`: the configured targets' types, whose sidecar transfer counters start at 0.
export function createMetrics ({ scheduler = () => null, spoolDir, collectDefault = true, backends = [] } = {}) {
  const registry = new client.Registry()
  if (collectDefault) {
    // The event loop's delay sampled every 100 ms (prom-client's default is 10 ms): an idle daemon
    // then wakes ~17 times a second instead of ~110 (0.2 % of a core instead of 0.6 %).
    client.collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 })
    // prom-client's `nodejs_active_{handles,requests,resources}_total` are gauges named like
    // counters (promtool rejects them); they are the sum() of the per-type gauges it also exports.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
      registry.removeSingleMetric(name)
    }
  }
  spoolDir ??= () => scheduler()?.config?.spool?.dir ?? null
  const registers = [registry]

  const bytes = new client.Counter({
    name: 'sidecar_transfer_bytes_total',
    help: 'Bytes moved by successful transfers (sidecar jobs and php-curl transfers reported by PHP).',
    labelNames: ['direction', 'backend', 'via', 'mode'],
    registers
  })
  const transfers = new client.Counter({
    name: 'sidecar_transfers_total',
    help: 'Finished transfers by outcome (a sidecar job counts once, after its last attempt).',
    labelNames: ['direction', 'backend', 'via', 'mode', 'outcome'],
    registers
  })
  const duration = new client.Histogram({
    name: 'sidecar_transfer_duration_seconds',
    help: 'Duration of successful transfers (for sidecar jobs: the last attempt).',
    labelNames: ['direction', 'backend', 'via', 'mode', 'size_class'],
    buckets: DURATION_BUCKETS,
    registers
  })
  const throughput = new client.Histogram({
    name: 'sidecar_transfer_throughput_bytes_per_second',
    help: 'Throughput (bytes / duration) of each successful transfer.',
    labelNames: ['direction', 'backend', 'via', 'mode', 'size_class'],
    buckets: THROUGHPUT_BUCKETS,
    registers
  })
  const accepted = new client.Counter({
    name: 'sidecar_jobs_accepted_total',
    help: 'Jobs accepted (persisted and acknowledged), over the API or from the spool.',
    labelNames: ['direction'],
    registers
  })
  const finished = new client.Counter({
    name: 'sidecar_jobs_finished_total',
    help: 'Jobs that reached a final state.',
    labelNames: ['state'],
    registers
  })
  const retries = new client.Counter({
    name: 'sidecar_transfer_retries_total',
    help: 'Attempts that failed with a retryable error and were scheduled again, by error code.',
    labelNames: ['backend', 'code'],
    registers
  })
  const failures = new client.Counter({
    name: 'sidecar_transfer_failures_total',
    help: 'Jobs that failed for good, by error code.',
    labelNames: ['backend', 'code'],
    registers
  })
  const failovers = new client.Counter({
    name: 'sidecar_namenode_failovers_total',
    help: 'Times a WebHDFS target moved on to another namenode (standby or unreachable).',
    registers
  })
  const phpMemory = new client.Histogram({
    name: 'sidecar_php_peak_memory_bytes',
    help: 'Peak PHP memory of direct php-curl transfers, as reported by the PHP client.',
    labelNames: ['direction', 'backend', 'mode'],
    buckets: MEMORY_BUCKETS,
    registers
  })
  const handoff = new client.Histogram({
    name: 'sidecar_php_handoff_seconds',
    help: 'Time PHP spent handing a job to the sidecar, as reported by the PHP client.',
    labelNames: ['transport', 'acked'],
    buckets: HANDOFF_BUCKETS,
    registers
  })
  const spool = new client.Counter({
    name: 'sidecar_spool_files_total',
    help: 'Spool files handled: ingested, duplicate (already accepted), rejected.',
    labelNames: ['outcome'],
    registers
  })
  const callbacks = new client.Counter({
    name: 'sidecar_callbacks_total',
    help: 'Completion callbacks by final outcome.',
    labelNames: ['outcome'],
    registers
  })
  const streamed = new client.Counter({
    name: 'sidecar_stream_bytes_total',
    help: 'Bytes served by GET /v1/stream.',
    labelNames: ['backend'],
    registers
  })
  /* eslint-disable no-new */
  new client.Gauge({
    name: 'sidecar_queue_jobs',
    help: 'Unfinished jobs by state (queued includes those waiting for a retry).',
    labelNames: ['state'],
    registers,
    collect () {
      const s = scheduler()?.stats()
      this.set({ state: 'queued' }, s?.waiting ?? 0)
      this.set({ state: 'running' }, s?.running ?? 0)
    }
  })
  new client.Gauge({
    name: 'sidecar_queue_limit_jobs',
    help: 'Configured queue.limit: unfinished jobs accepted at most.',
    registers,
    collect () {
      const limit = scheduler()?.config?.queue?.limit
      if (limit !== undefined) this.set(limit)
    }
  })
  new client.Gauge({
    name: 'sidecar_spool_pending_files',
    help: 'Files in the spool directory not yet ingested.',
    registers,
    async collect () { this.set((await backlog()).pending) }
  })
  new client.Gauge({
    name: 'sidecar_spool_rejected_files',
    help: 'Files in <spool.dir>/rejected/ (spooled jobs that were invalid and will not run).',
    registers,
    async collect () { this.set((await backlog()).rejected) }
  })
  new client.Gauge({
    name: 'sidecar_spool_oldest_file_age_seconds',
    help: 'Age (since its last modification) of the oldest pending spool file; 0 when the spool is empty.',
    registers,
    async collect () { this.set((await backlog()).oldestAgeSeconds) }
  })
  /* eslint-enable no-new */

  // The registry collects every metric at once: the spool gauges share one directory scan.
  let scanning = null
  function backlog () {
    scanning ??= spoolBacklog(spoolDir()).finally(() => { scanning = null })
    return scanning
  }

  for (const direction of ['upload', 'download']) accepted.inc({ direction }, 0)
  for (const state of ['succeeded', 'failed', 'cancelled']) finished.inc({ state }, 0)
  for (const outcome of ['ingested', 'duplicate', 'rejected']) spool.inc({ outcome }, 0)
  for (const outcome of ['delivered', 'failed']) callbacks.inc({ outcome }, 0)
  failovers.inc(0)
  // The sidecar's own transfers: a series first scraped at N has no increase() for those N, so
  // without this the first failures after every start were invisible to the failure-ratio alert.
  for (const backend of new Set(backends)) {
    for (const direction of ['upload', 'download']) {
      for (const outcome of ['succeeded', 'failed', 'cancelled']) transfers.inc({ direction, backend, via: 'sidecar', mode: 'streamed', outcome }, 0)
    }
  }

  return {
    registry,
    jobAccepted (job) { accepted.inc({ direction: job.direction }) },
    jobFinished (job) { finished.inc({ state: job.state }) },
    retry (job, backend, code) { retries.inc({ backend, code }) },
    // `moved`: the bytes this last attempt moved in `seconds`. Fewer than the job's for a resumed
    // download; none for a job that only finished its publish after a restart, which then has no
    // duration or throughput to show.
    transferDone (job, backend, outcome, seconds, code, moved = job.bytes) {
      if (outcome === 'failed') failures.inc({ backend, code })
      record({ direction: job.direction, backend, via: 'sidecar', mode: 'streamed', outcome, bytes: job.bytes, seconds, moved })
    },
    // A WebHDFS target moved on to another namenode. `target` is accepted for the caller's
    // convenience but not used as a label.
    failover (target) { failovers.inc() },
    // A direct php-curl transfer reported by the PHP client (POST /v1/observations).
    phpTransfer (o) {
      record({ ...o, via: 'php_curl' })
      if (o.peakMemoryBytes !== undefined) phpMemory.observe({ direction: o.direction, backend: o.backend, mode: o.mode }, o.peakMemoryBytes)
    },
    phpHandoff (o) { handoff.observe({ transport: o.transport, acked: String(o.acked) }, o.seconds) },
    spool (outcome) { spool.inc({ outcome }) },
    callback (outcome) { callbacks.inc({ outcome }) },
    streamBytes (backend, n) { streamed.inc({ backend }, n) }
  }

  function record ({ direction, backend, via, mode, outcome, bytes: n, seconds, moved = n }) {
    const labels = { direction, backend, via, mode }
    transfers.inc({ ...labels, outcome })
    if (outcome !== 'succeeded') return
    const cls = { ...labels, size_class: sizeClass(n) }
    bytes.inc(labels, n)
    if (n > 0 && moved === 0) return
    duration.observe(cls, seconds)
    if (seconds > 0 && Number.isFinite(moved / seconds)) throughput.observe(cls, moved / seconds)
  }
}
