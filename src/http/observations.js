// POST /v1/observations: what the PHP client measured on its side (direct php-curl transfers,
// hand-off latency), so /metrics can put php_curl beside the sidecar. Strictly validated: only
// bounded label values get into the metrics.
import { InvalidRequestError } from '../errors.js'

const SPECS = {
  transfer: {
    via: ['php_curl'],
    direction: ['upload', 'download'],
    backend: ['webhdfs', 'http', 'file'],
    mode: ['buffered', 'streamed'],
    outcome: ['succeeded', 'failed'],
    bytes: 'count',
    seconds: 'seconds',
    peakMemoryBytes: 'count?'
  },
  handoff: {
    transport: ['unix', 'tcp'],
    acked: 'boolean',
    seconds: 'seconds'
  }
}

export function parseObservation (body) {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new InvalidRequestError('the body must be a JSON object')
  const spec = typeof body.type === 'string' && Object.hasOwn(SPECS, body.type) ? SPECS[body.type] : null
  if (!spec) throw new InvalidRequestError(`type must be one of ${Object.keys(SPECS).join(', ')}`)
  const out = { type: body.type }
  for (const key of Object.keys(body)) {
    if (key !== 'type' && !Object.hasOwn(spec, key)) throw new InvalidRequestError(`unknown field ${JSON.stringify(key.slice(0, 64))}`)
  }
  for (const [key, rule] of Object.entries(spec)) {
    const v = body[key]
    if (rule === 'count?' && v === undefined) continue
    const ok = Array.isArray(rule)
      ? rule.includes(v)
      : rule === 'boolean'
        ? typeof v === 'boolean'
        : rule === 'seconds'
          ? typeof v === 'number' && Number.isFinite(v) && v >= 0 && v < 86400
          : Number.isSafeInteger(v) && v >= 0
    if (!ok) throw new InvalidRequestError(`${key} must be ${Array.isArray(rule) ? 'one of ' + rule.join(', ') : rule.replace('?', '')}`)
    out[key] = v
  }
  // Its throughput must be a number: 1 MB in 1e-303 s is not one (and a metric refuses Infinity).
  if (out.type === 'transfer' && out.bytes > 0 && !Number.isFinite(out.bytes / out.seconds)) {
    throw new InvalidRequestError('seconds is too small for the bytes (no finite throughput)')
  }
  return out
}
