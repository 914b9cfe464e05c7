// The control API (express): jobs, health and metrics. Every error is answered as
// {"error":{"code","message"}} with the status its SidecarError class carries.
import crypto from 'node:crypto'
import express from 'express'
import {
  SidecarError, InvalidJsonError, InvalidRequestError, PayloadTooLargeError, UnauthorizedError, RouteNotFoundError,
  MethodNotAllowedError, InternalError
} from '../errors.js'
import { STATES } from '../jobs.js'
import { streamHandler } from './stream.js'
import { parseObservation } from './observations.js'

export const MAX_BODY_BYTES = 64 * 1024
const MAX_WAIT_SECONDS = 300

function tokenCheck (token) {
  if (!token) return (req, res, next) => next()
  const expected = crypto.createHash('sha256').update(`Bearer ${token}`).digest()
  return (req, res, next) => {
    const given = crypto.createHash('sha256').update(req.get('authorization') ?? '').digest()
    if (crypto.timingSafeEqual(given, expected)) return next()
    res.set('www-authenticate', 'Bearer realm="transfer-sidecar"')
    next(new UnauthorizedError('a valid "Authorization: Bearer <token>" header is required'))
  }
}

function parseWait (value) {
  if (value === undefined) return 0
  const n = Number(value)
  if (typeof value !== 'string' || !Number.isFinite(n) || n < 0) throw new InvalidRequestError('wait must be a number of seconds ≥ 0')
  return Math.min(n, MAX_WAIT_SECONDS) * 1000
}

export function createApp ({ config, scheduler, backends, metrics, logger }) {
  const app = express()
  app.disable('x-powered-by')
  app.disable('etag')
  app.set('query parser', 'simple')

  app.use((req, res, next) => {
    const start = process.hrtime.bigint()
    res.once('finish', () => {
      logger.info({ method: req.method, path: req.path, status: res.statusCode, ms: Number(process.hrtime.bigint() - start) / 1e6 }, 'request')
    })
    next()
  })

  app.get('/healthz', (req, res) => {
    res.json({ status: scheduler.stopping ? 'stopping' : 'ok', jobs: scheduler.stats() })
  })

  app.use(tokenCheck(config.token))

  app.get('/metrics', async (req, res) => {
    res.set('content-type', metrics.registry.contentType)
    res.send(await metrics.registry.metrics())
  })

  const json = express.json({ limit: MAX_BODY_BYTES, strict: true, type: () => true })

  app.route('/v1/jobs')
    .post(json, async (req, res) => {
      // `state` is the one at acceptance; the job may already be running by the time this is sent.
      const { job, created, state } = await scheduler.submit(req.body)
      res.status(created ? 202 : 200).location(`/v1/jobs/${job.id}`).json({ id: job.id, state })
    })
    .get((req, res) => {
      const { state } = req.query
      if (state !== undefined && !STATES.includes(state)) throw new InvalidRequestError(`state must be one of ${STATES.join(', ')}`)
      const limit = req.query.limit === undefined ? 1000 : Number(req.query.limit)
      if (!Number.isInteger(limit) || limit < 1 || limit > 10000) throw new InvalidRequestError('limit must be an integer from 1 to 10000')
      res.json({ jobs: scheduler.list({ state, limit }).map((j) => scheduler.view(j)) })
    })
    .all(methodNotAllowed)

  app.route('/v1/jobs/:id')
    .get(async (req, res) => {
      const ms = parseWait(req.query.wait)
      scheduler.get(req.params.id)
      const closed = new AbortController()
      res.once('close', () => closed.abort())
      const job = await scheduler.waitForEnd(req.params.id, ms, closed.signal)
      res.json(scheduler.view(job))
    })
    .delete(async (req, res) => {
      const job = await scheduler.cancel(req.params.id)
      res.json(scheduler.view(job))
    })
    .all(methodNotAllowed)

  app.route('/v1/observations')
    .post(json, (req, res) => {
      const o = parseObservation(req.body)
      if (o.type === 'transfer') metrics.phpTransfer(o)
      else metrics.phpHandoff(o)
      res.status(202).json({ accepted: true })
    })
    .all(methodNotAllowed)

  const stream = streamHandler({ config, backends, metrics })
  app.get('/v1/stream/:target/*remote', stream) // also answers HEAD

  app.use((req, res, next) => next(new RouteNotFoundError(`no route ${req.method} ${req.path.slice(0, 200)}`)))

  app.use((err, req, res, next) => {
    const error = asSidecarError(err)
    if (error.statusCode >= 500) logger.error({ err }, 'request failed')
    if (error.code === 'QUEUE_FULL' || error.code === 'SHUTTING_DOWN' || error.code === 'STORE_UNAVAILABLE') {
      res.set('retry-after', '1')
    }
    if (res.headersSent) return res.destroy() // mid-body: the client must see a truncated answer
    res.status(error.statusCode).json({ error: { code: error.code, message: error.message } })
  })
  return app
}

function methodNotAllowed (req, res, next) {
  next(new MethodNotAllowedError(`${req.method} is not allowed on ${req.path.slice(0, 200)}`))
}

// body-parser errors carry a `type`; everything unknown is an internal error.
function asSidecarError (err) {
  if (err instanceof SidecarError) return err
  switch (err?.type) {
    case 'entity.too.large': return new PayloadTooLargeError(`the body exceeds ${MAX_BODY_BYTES} bytes`)
    case 'entity.parse.failed': return new InvalidJsonError('the body is not valid JSON')
    case 'encoding.unsupported':
    case 'charset.unsupported': return new InvalidRequestError('the body must be UTF-8 JSON without content-encoding')
    case 'request.aborted':
    case 'request.size.invalid': return new InvalidRequestError('the body ended before its declared length')
  }
  if (err?.status >= 400 && err?.status < 500) return new InvalidRequestError(err.message)
  return new InternalError('internal error')
}
