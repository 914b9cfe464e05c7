// The control API: POST /v1/jobs and GET /v1/jobs/{id} on fast paths of their own (submit.js,
// status.js), and a plain GET of /healthz or /metrics (below); everything else on express, which
// is loaded with the first request that needs it. A daemon that only takes hand-offs, answers
// status and health checks and is scraped never loads it: 11–12 MiB less RSS (express and its
// dependencies, measured on node 26 beside pino, prom-client and node:http).
// Every error is answered as {"error":{"code","message"}} with the status its SidecarError carries.
import { InvalidRequestError, RouteNotFoundError, MethodNotAllowedError, BrowserRefusedError } from '../errors.js'
import { STATES } from '../jobs.js'
import { streamHandler } from './stream.js'
import { parseObservation } from './observations.js'
import { requireToken, logWhenAnswered, sendError, sendJson } from './respond.js'
import { isSubmit, jsonBody, submitHandler } from './submit.js'
import { CLIENT_GONE, jobStatus, matchStatus, parseWait, statusHandler } from './status.js'

function tokenCheck (token) {
  const check = requireToken(token)
  return (req, res, next) => {
    check(req.get('authorization'))
    next()
  }
}

// Without a token, what a web page in a browser on this host could send to a loopback port is
// refused: a cross-site request (it carries Origin or Sec-Fetch-Site), and a request to a name
// other than the loopback's (DNS rebinding: evil.example resolving to 127.0.0.1). PHP, curl and
// other programs send neither header, and name the loopback. With a token there is no need: a page
// cannot send the Authorization header without a preflight this API does not answer.
const LOOPBACK_HOST = /^(?:localhost|127(?:\.\d{1,3}){3}|\[::1\])(?::\d{1,5})?$/i

function browserRequest (req) {
  const site = req.headers['sec-fetch-site']
  if (req.headers.origin !== undefined || (site !== undefined && site !== 'none')) {
    return new BrowserRefusedError('requests from web pages are refused (Origin or Sec-Fetch-Site header); set a token to allow them')
  }
  const tcp = req.socket.remoteAddress !== undefined
  if (tcp && req.headers.host !== undefined && !LOOPBACK_HOST.test(req.headers.host)) {
    return new BrowserRefusedError('the Host header must name the loopback (localhost, 127.0.0.1 or [::1]) unless a token is set')
  }
  return null
}

// The routes express serves, built once it is loaded.
function expressApp (express, { config, scheduler, backends, metrics, logger }) {
  const app = express()
  app.disable('x-powered-by')
  app.disable('etag')
  app.set('query parser', 'simple')
  // Only the exact documented paths exist: "/v1/jobs/" or "/V1/JOBS" would otherwise reach the
  // GET routes but not submit.js, which matches POST /v1/jobs exactly.
  app.set('strict routing', true)
  app.set('case sensitive routing', true)

  app.use((req, res, next) => {
    logWhenAnswered(logger, req, res, req.path)
    next()
  })

  app.route('/healthz')
    .get((req, res) => {
      res.json({ status: scheduler.stopping ? 'stopping' : 'ok', jobs: scheduler.stats() })
    })
    .all(methodNotAllowed('GET, HEAD'))

  app.use(tokenCheck(config.token))

  app.route('/metrics')
    .get(async (req, res) => {
      res.set('content-type', metrics.registry.contentType)
      res.send(await metrics.registry.metrics())
    })
    .all(methodNotAllowed('GET, HEAD'))

  app.route('/v1/jobs') // POST is served by submit.js, before express
    .get((req, res) => {
      const { state } = req.query
      if (state !== undefined && !STATES.includes(state)) throw new InvalidRequestError(`state must be one of ${STATES.join(', ')}`)
      // Plain decimal digits only, as ?wait= (Number() would also take "0x10", "1e3" and " 7 ").
      const limit = req.query.limit === undefined ? 1000 : typeof req.query.limit === 'string' && /^\d{1,6}$/.test(req.query.limit) ? Number(req.query.limit) : NaN
      if (!Number.isInteger(limit) || limit < 1 || limit > 10000) throw new InvalidRequestError('limit must be an integer from 1 to 10000')
      res.json({ jobs: scheduler.list({ state, limit }).map((j) => scheduler.view(j)) })
    })
    .all(methodNotAllowed('GET, HEAD, POST'))

  app.route('/v1/jobs/:id') // a plain GET is served by status.js, before express
    .get(async (req, res) => {
      const ms = parseWait(req.query.wait)
      const closed = new AbortController()
      res.once('close', () => closed.abort(CLIENT_GONE))
      res.json(await jobStatus(scheduler, req.params.id, ms, closed.signal))
    })
    .delete(async (req, res) => {
      const job = await scheduler.cancel(req.params.id)
      res.json(scheduler.view(job))
    })
    .all(methodNotAllowed('GET, HEAD, DELETE'))

  app.route('/v1/observations')
    .post(jsonBody, (req, res) => {
      const o = parseObservation(req.body)
      if (o.type === 'transfer') metrics.phpTransfer(o)
      else metrics.phpHandoff(o)
      res.status(202).json({ accepted: true })
    })
    .all(methodNotAllowed('POST'))

  const stream = streamHandler({ config, backends, metrics })
  app.route('/v1/stream/:target/*remote')
    .get(stream) // also answers HEAD
    .all(methodNotAllowed('GET, HEAD'))

  app.use((req, res, next) => next(new RouteNotFoundError(`no route ${req.method} ${req.path.slice(0, 200)}`)))

  app.use((err, req, res, next) => sendError(res, err, logger))
  return app
}

// GET /healthz and GET /metrics, exactly so (no query, origin-form), as express answers them: what
// load balancers, service managers and Prometheus ask every few seconds. Any other form of the
// two routes (HEAD, a query, another method) goes to express, which answers it the same way.
function probeHandler ({ config, scheduler, metrics, logger }) {
  const checkToken = requireToken(config.token)
  return async (req, res) => {
    logWhenAnswered(logger, req, res, req.url)
    try {
      if (req.url === '/healthz') return sendJson(res, 200, { status: scheduler.stopping ? 'stopping' : 'ok', jobs: scheduler.stats() })
      checkToken(req.headers.authorization)
      const text = await metrics.registry.metrics()
      res.writeHead(200, { 'content-type': metrics.registry.contentType, 'content-length': Buffer.byteLength(text) })
      res.end(text)
    } catch (err) {
      sendError(res, err, logger)
    }
  }
}

const isProbe = (req) => req.method === 'GET' && (req.url === '/healthz' || req.url === '/metrics')

export function createApp (deps) {
  const { config, logger } = deps
  const submit = submitHandler(deps)
  const status = statusHandler(deps)
  const probe = probeHandler(deps)
  let app = null
  let loading = null
  // A load that failed (out of file descriptors, say) is tried again by the next request.
  const loadApp = () => (loading ??= import('express').then(({ default: express }) => (app = expressApp(express, deps)), (err) => {
    loading = null
    throw err
  }))
  return (req, res) => {
    // RFC 9112 3.2; node's own check (requireHostHeader) would answer without a JSON body.
    const refused = req.headers.host === undefined && req.httpVersion === '1.1'
      ? new InvalidRequestError('an HTTP/1.1 request needs a Host header')
      : config.token ? null : browserRequest(req)
    if (refused) {
      // Answered before the request log above: logged here, so that refusals can be seen.
      logger.warn({ method: req.method, path: req.url.slice(0, 200), status: refused.statusCode, code: refused.code, origin: req.headers.origin?.slice(0, 200), host: req.headers.host?.slice(0, 200) }, 'request refused')
      return sendError(res, refused, logger)
    }
    // An absolute-form target with "\\" or "#" is no route: express would make "/" of the one and
    // drop the other, and route it as a path that was not sent.
    if (req.url[0] !== '/' && /[\\#]/.test(req.url)) return sendError(res, new RouteNotFoundError(`no route ${req.method} ${req.url.slice(0, 200)}`), logger)
    if (isSubmit(req)) return submit(req, res)
    const asked = matchStatus(req)
    if (asked) return status(req, res, asked)
    if (isProbe(req)) return probe(req, res)
    if (app) return app(req, res)
    loadApp().then((loaded) => loaded(req, res), (err) => sendError(res, err, logger))
  }
}

// RFC 9110 15.5.6: a 405 names the methods the route serves in Allow (GET implies HEAD).
function methodNotAllowed (allow) {
  return (req, res, next) => {
    res.set('allow', allow)
    next(new MethodNotAllowedError(`${req.method} is not allowed on ${req.path.slice(0, 200)} (allowed: ${allow})`))
  }
}
