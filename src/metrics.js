// Prometheus metrics (prom-client) on a registry of our own. Labels are bounded: direction,
// backend type, via, outcome, error code, size class; never paths, ids or hosts.
import client from 'prom-client'

const MiB = 1 << 20
const SIZE_CLASSES = [[10 * MiB, 'lt_10MiB'], [100 * MiB, '10_100MiB'], [1024 * MiB, '100MiB_1GiB'], [Infinity, 'ge_1GiB']]

export function sizeClass (bytes) {
  return SIZE_CLASSES.find(([limit]) => bytes < limit)[1]
}

export function createMetrics ({ scheduler = () => null, collectDefault = true } = {}) {
  const registry = new client.Registry()
  if (collectDefault) client.collectDefaultMetrics({ register: registry })

  const bytes = new client.Counter({
    name: 'sidecar_transfer_bytes_total',
    help: 'Bytes moved by finished transfers.',
    labelNames: ['direction', 'backend', 'via', 'mode'],
    registers: [registry]
  })
  const transfers = new client.Counter({
    name: 'sidecar_transfers_total',
    help: 'Finished transfer jobs by outcome.',
    labelNames: ['direction', 'backend', 'via', 'mode', 'outcome'],
    registers: [registry]
  })
  const duration = new client.Histogram({
    name: 'sidecar_transfer_duration_seconds',
    help: 'Duration of the last attempt of each finished transfer.',
    labelNames: ['direction', 'backend', 'via', 'mode', 'size_class'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
    registers: [registry]
  })
  const throughput = new client.Histogram({
    name: 'sidecar_transfer_throughput_bytes_per_second',
    help: 'Throughput of each successful transfer.',
    labelNames: ['direction', 'backend', 'via', 'mode', 'size_class'],
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096].map((m) => m * MiB),
    registers: [registry]
  })
  const accepted = new client.Counter({
    name: 'sidecar_jobs_accepted_total',
    help: 'Jobs accepted (persisted and acknowledged with 202).',
    labelNames: ['direction'],
    registers: [registry]
  })
  const finished = new client.Counter({
    name: 'sidecar_jobs_finished_total',
    help: 'Jobs that reached a final state.',
    labelNames: ['state'],
    registers: [registry]
  })
  const retries = new client.Counter({
    name: 'sidecar_transfer_retries_total',
    help: 'Attempts that failed with a retryable error and were scheduled again.',
    labelNames: ['backend', 'code'],
    registers: [registry]
  })
  const failures = new client.Counter({
    name: 'sidecar_transfer_failures_total',
    help: 'Jobs that failed, by error code.',
    labelNames: ['backend', 'code'],
    registers: [registry]
  })
  const phpMemory = new client.Histogram({
    name: 'sidecar_php_peak_memory_bytes',
    help: 'Peak PHP memory of direct php-curl transfers, as reported by the PHP client.',
    labelNames: ['direction', 'backend', 'mode'],
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096].map((m) => m * MiB),
    registers: [registry]
  })
  const handoff = new client.Histogram({
    name: 'sidecar_php_handoff_seconds',
    help: 'Time PHP spent handing a job to the sidecar, as reported by the PHP client.',
    labelNames: ['transport', 'acked'],
    buckets: [0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1],
    registers: [registry]
  })
  const spool = new client.Counter({
    name: 'sidecar_spool_files_total',
    help: 'Spool files handled: ingested, duplicate (already accepted), rejected.',
    labelNames: ['outcome'],
    registers: [registry]
  })
  const callbacks = new client.Counter({
    name: 'sidecar_callbacks_total',
    help: 'Completion callbacks by final outcome.',
    labelNames: ['outcome'],
    registers: [registry]
  })
  const streamed = new client.Counter({
    name: 'sidecar_stream_bytes_total',
    help: 'Bytes served by GET /v1/stream.',
    labelNames: ['backend'],
    registers: [registry]
  })
  // eslint-disable-next-line no-new
  new client.Gauge({
    name: 'sidecar_queue_jobs',
    help: 'Unfinished jobs by state (queued includes those waiting for a retry).',
    labelNames: ['state'],
    registers: [registry],
    collect () {
      const s = scheduler()?.stats()
      if (!s) return
      this.set({ state: 'queued' }, s.waiting)
      this.set({ state: 'running' }, s.running)
    }
  })

  return {
    registry,
    jobAccepted (job) { accepted.inc({ direction: job.direction }) },
    jobFinished (job) { finished.inc({ state: job.state }) },
    retry (job, backend, code) { retries.inc({ backend, code }) },
    transferDone (job, backend, outcome, seconds, code) {
      if (outcome === 'failed') failures.inc({ backend, code })
      record({ direction: job.direction, backend, via: 'sidecar', mode: 'streamed', outcome, bytes: job.bytes, seconds })
    },
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

  function record ({ direction, backend, via, mode, outcome, bytes: n, seconds }) {
    const labels = { direction, backend, via, mode }
    transfers.inc({ ...labels, outcome })
    if (outcome !== 'succeeded') return
    const cls = { ...labels, size_class: sizeClass(n) }
    bytes.inc(labels, n)
    duration.observe(cls, seconds)
    if (seconds > 0) throughput.observe(cls, n / seconds)
  }
}
