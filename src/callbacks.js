// Completion callbacks: when a job with a `callback` ends, its record is POSTed there, signed
// with HMAC-SHA256 when callbacks.secret is set, retried with backoff. The delivery state is part
// of the job record, so a restart resumes pending deliveries.
import crypto from 'node:crypto'
import { createHttpClient, drain } from './backends/http-util.js'
import { callbackAllowed } from './jobs.js'

export function signature (secret, timestamp, body) {
  return 'sha256=' + crypto.createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')
}

const AT_ONCE = 8 // deliveries in flight

export function createCallbackSender ({ config, logger, metrics, save, view, clock = Date.now, random = Math.random }) {
  const { secret, attempts, baseDelayMs, maxDelayMs, timeoutMs, allow } = config.callbacks
  const timers = new Set()
  const client = createHttpClient({ connectMs: timeoutMs, idleMs: timeoutMs, maxSockets: AT_ONCE })
  let stopped = false
  // At most AT_ONCE deliveries at a time, the others wait here, before their timeout starts: one
  // that waited for a socket in the client's queue spent its timeout there, and a receiver that
  // answered in time had its callbacks failed (and sent again) when many jobs ended together.
  let active = 0
  const queue = []
  const slot = () => active < AT_ONCE ? (active++, Promise.resolve()) : new Promise((resolve) => queue.push(resolve))
  const release = () => queue.length ? queue.shift()() : active--

  async function post (job) {
    // Checked at every delivery: a callback journaled before the configuration stopped allowing
    // it (a prefix removed, or callbacks turned off) must not be POSTed after a restart.
    if (!callbackAllowed(job.callback, allow)) throw Object.assign(new Error('the callback is no longer under a prefix of callbacks.allow'), { final: true })
    await slot()
    try {
      await deliver(job)
    } finally {
      release()
    }
  }

  async function deliver (job) {
    if (stopped) throw new Error('stopped')
    const body = JSON.stringify(view(job))
    const timestamp = String(Math.floor(clock() / 1000))
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'transfer-sidecar',
      'x-sidecar-event': 'job.finished',
      'x-sidecar-job': job.id,
      'x-sidecar-timestamp': timestamp
    }
    if (secret) headers['x-sidecar-signature'] = signature(secret, timestamp, body)
    const res = await client.send(job.callback, { method: 'POST', body, headers, signal: AbortSignal.timeout(timeoutMs) })
    await drain(res.body)
    if (res.statusCode < 200 || res.statusCode >= 300) throw new Error(`callback answered HTTP ${res.statusCode}`)
  }

  async function attempt (job, n) {
    if (stopped) return
    try {
      await post(job)
      job.callbackState = 'delivered'
      metrics.callback('delivered')
    } catch (err) {
      // Cut by stop() (its client closed under it): the record on disk still says pending, and the
      // next start delivers it again; giving up here would lose it for good.
      if (stopped) return
      if (n < attempts && !err.final) {
        const exp = Math.min(maxDelayMs, baseDelayMs * 2 ** (n - 1))
        const timer = setTimeout(() => {
          timers.delete(timer)
          attempt(job, n + 1)
        }, Math.round(exp / 2 + random() * exp / 2))
        timers.add(timer)
        logger.warn({ job: job.id, attempt: n, err: err.message }, 'callback failed, will retry')
        return
      }
      job.callbackState = 'failed'
      metrics.callback('failed')
      logger.error({ job: job.id, attempts: n, err: err.message }, 'callback failed, giving up')
    }
    await save(job)
  }

  return {
    // Called with a finished job whose callbackState is 'pending' (already persisted).
    deliver (job) { attempt(job, 1) },
    stop () {
      stopped = true
      for (const t of timers) clearTimeout(t)
      for (const resolve of queue.splice(0)) resolve() // they find `stopped` and give up
      client.close()
    }
  }
}
