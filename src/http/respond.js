// What every route shares: the token check and the JSON error answer.
import crypto from 'node:crypto'
import {
  SidecarError, InvalidRequestError, InternalError, UnauthorizedError
} from '../errors.js'

export const MAX_BODY_BYTES = 64 * 1024
const RETRY_LATER = new Set(['QUEUE_FULL', 'SHUTTING_DOWN', 'STORE_UNAVAILABLE'])

// (authorization header) → boolean, in constant time; always true without a token.
export function tokenMatcher (token) {
  if (!token) return () => true
  const expected = crypto.createHash('sha256').update(`Bearer ${token}`).digest()
  return (header) => crypto.timingSafeEqual(crypto.createHash('sha256').update(header ?? '').digest(), expected)
}

// (authorization header) → nothing, or UNAUTHORIZED thrown: the check of every HTTP route.
export function requireToken (token) {
  const authorized = tokenMatcher(token)
  return (header) => {
    if (!authorized(header)) throw new UnauthorizedError('a valid "Authorization: Bearer <token>" header is required')
  }
}

// The log line of every HTTP request but the hand-offs (logHandoff), written when its answer is,
// or when its connection closed before that (a stream the client left or the daemon cut):
// `aborted`, with the status sent, if any.
export function logWhenAnswered (logger, req, res, path) {
  const start = process.hrtime.bigint()
  res.once('close', () => {
    const ms = Number(process.hrtime.bigint() - start) / 1e6
    if (res.writableFinished) logger.info({ method: req.method, path, status: res.statusCode, ms }, 'request')
    else logger.info({ method: req.method, path, status: res.headersSent ? res.statusCode : null, ms, aborted: true }, 'request')
  })
}

// A 4xx of express's own (a path it cannot decode) is the request's; everything unknown is an
// internal error.
export function asSidecarError (err) {
  if (err instanceof SidecarError) return err
  if (err?.status >= 400 && err?.status < 500) return new InvalidRequestError(err.message)
  return new InternalError('internal error')
}

// What any thrown error is answered with, over HTTP (sendError) and the line protocol (lines.js):
// its SidecarError, the `{"error":{code,message}}` body, and the seconds to wait before a retry
// (null: the answer is final). An unexpected error is logged here with its stack; a known 5xx (a
// server's refusal, a full queue) at warn with its code, as any caller can ask for one.
export function errorAnswer (err, logger) {
  const error = asSidecarError(err)
  if (error.code === 'INTERNAL') logger.error({ err }, 'request failed')
  else if (error.statusCode >= 500) logger.warn({ code: error.code, message: error.message }, 'request failed')
  const retryAfter = RETRY_LATER.has(error.code) || error.statusCode === 503 ? 1 : null
  return { error, body: { error: { code: error.code, message: error.message } }, retryAfter }
}

// A hand-off's line in the log: a refused one at info; an accepted one at debug (its job is logged
// when it ends, scheduler.js).
export function logHandoff (logger, fields, status, started) {
  const level = status < 300 ? 'debug' : 'info'
  if (logger.isLevelEnabled?.(level) === false) return
  logger[level]?.({ ...fields, status, ms: Number(process.hrtime.bigint() - started) / 1e6 }, 'request')
}

export function sendJson (res, status, body, headers = {}) {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}

export function sendError (res, err, logger) {
  const { error, body, retryAfter } = errorAnswer(err, logger)
  if (res.headersSent) return res.destroy() // mid-body: the client must see a truncated answer
  if (error.code === 'PAYLOAD_TOO_LARGE') res.shouldKeepAlive = false // the rest of the body is not read
  const headers = retryAfter ? { 'retry-after': String(retryAfter) } : {}
  if (error.code === 'UNAUTHORIZED') headers['www-authenticate'] = 'Bearer realm="transfer-sidecar"'
  sendJson(res, error.statusCode, body, headers)
}
