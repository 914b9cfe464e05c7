// GET /v1/jobs/{id}[?wait=SECONDS], what a PHP client asks after a hand-off it waits for (status(),
// wait()), served without the express stack like submit.js: the daemon's CPU per request 93–137 µs
// here against 123–180 through express (node:http and the socket are most of both). Only the plain
// form is served here (GET, an id of the job id alphabet, origin-form target); every other request
// to the route (HEAD, DELETE, an escaped or malformed id, an absolute-form target) goes to express's
// route, which answers the same way. Same checks, errors and log line as there (app.js).
import querystring from 'node:querystring'
import { InvalidRequestError } from '../errors.js'
import { requireToken, logWhenAnswered, sendJson, sendError } from './respond.js'

const STATUS_PATH = /^\/v1\/jobs\/([A-Za-z0-9_-]{1,64})(?:\?(.*))?$/s
const MAX_WAIT_SECONDS = 300

// Why a long poll stops early. One object for all: abort() without a reason builds a DOMException,
// stack trace included, at every finished long poll.
export const CLIENT_GONE = Object.freeze(Object.assign(new Error('the client closed the connection'), { code: 'CLIENT_GONE' }))

// Plain decimal seconds only: Number() would also take "", "0x3", "1e3" and " 3 ".
export function parseWait (value) {
  if (value === undefined) return 0
  const n = typeof value === 'string' && /^\d+(\.\d+)?$/.test(value) ? Number(value) : NaN
  if (!(n <= MAX_WAIT_SECONDS)) throw new InvalidRequestError(`wait must be a decimal number of seconds from 0 to ${MAX_WAIT_SECONDS}`)
  return n * 1000
}

// The job's status, or after `ms` of waiting for its end; `closed` aborts the wait.
export async function jobStatus (scheduler, id, ms, closed) {
  scheduler.get(id) // JOB_NOT_FOUND before any wait
  return scheduler.view(await scheduler.waitForEnd(id, ms, closed))
}

// The id and query of a request this module serves, or null.
export function matchStatus (req) {
  if (req.method !== 'GET') return null
  return STATUS_PATH.exec(req.url)
}

export function statusHandler ({ config, scheduler, logger }) {
  const checkToken = requireToken(config.token)
  return async (req, res, [, id, query]) => {
    logWhenAnswered(logger, req, res, `/v1/jobs/${id}`)
    try {
      checkToken(req.headers.authorization)
      // express's "simple" query parser is node's querystring: a repeated wait is an array, refused.
      const ms = parseWait(query === undefined ? undefined : querystring.parse(query).wait)
      const closed = new AbortController()
      res.once('close', () => closed.abort(CLIENT_GONE))
      sendJson(res, 200, await jobStatus(scheduler, id, ms, closed.signal))
    } catch (err) {
      sendError(res, err, logger)
    }
  }
}
