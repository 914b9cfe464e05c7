// POST /v1/jobs, the hot path of every PHP hand-off, served without the express stack: read the
// body (≤ 64 KiB), parse, submit (which journals the job), answer. Same checks and errors as the
// other routes (respond.js).
import { InvalidJsonError, PayloadTooLargeError, InvalidRequestError } from '../errors.js'
import { MAX_BODY_BYTES, requireToken, sendJson, sendError, logHandoff } from './respond.js'

export function isSubmit (req) {
  if (req.method !== 'POST') return false
  const target = req.url[0] === '/' ? req.url : pathOf(req.url)
  return target === '/v1/jobs' || target.startsWith('/v1/jobs?')
}

// The path and query of an absolute-form request target (RFC 9112 3.2.2: "POST http://host/v1/jobs"),
// which express routes by its path too: as sent, not normalised (new URL() would make
// "/v1/./jobs", "/x/../v1/jobs" or "/v1\\jobs" of it, which are no route in origin form).
const ABSOLUTE_FORM = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*([^?#]*)((?:\?[^#]*)?)$/i
function pathOf (url) {
  const m = ABSOLUTE_FORM.exec(url)
  return m ? m[1] + m[2] : url
}

// Invalid UTF-8 is refused, not turned into U+FFFD: a name made of replacement characters would
// be a file nobody asked for.
export const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })

function readBody (req) {
  return new Promise((resolve, reject) => {
    if (Number(req.headers['content-length']) > MAX_BODY_BYTES) return reject(new PayloadTooLargeError(`the body exceeds ${MAX_BODY_BYTES} bytes`))
    if (req.headers['content-encoding'] && req.headers['content-encoding'] !== 'identity') {
      return reject(new InvalidRequestError('the body must be UTF-8 JSON without content-encoding'))
    }
    const chunks = []
    let size = 0
    req.on('data', (chunk) => {
      size += chunk.length
      if (size > MAX_BODY_BYTES) {
        req.removeAllListeners('data')
        req.resume()
        return reject(new PayloadTooLargeError(`the body exceeds ${MAX_BODY_BYTES} bytes`))
      }
      chunks.push(chunk)
    })
    req.once('end', () => {
      try {
        resolve(strictUtf8.decode(Buffer.concat(chunks)))
      } catch {
        reject(new InvalidJsonError('the body is not valid UTF-8'))
      }
    })
    req.once('error', reject)
    req.once('aborted', () => reject(new InvalidRequestError('the body ended before its declared length')))
  })
}

// express middleware for the other routes with a JSON body: read and parsed as this one's, into
// req.body (not express.json, which decodes invalid UTF-8 into U+FFFD and inflates gzip bodies).
export function jsonBody (req, res, next) {
  readBody(req).then((text) => { req.body = parseJson(text) }).then(() => next(), next)
}

// Like express.json({ strict: true }): only an object or array at the top level is JSON here.
export function parseJson (text, what = 'the body') {
  const first = text.trimStart()[0]
  if (first !== '{' && first !== '[') throw new InvalidJsonError(`${what} is not valid JSON`)
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new InvalidJsonError(`${what} is not valid JSON${whereIn(text, err)}`)
  }
}

// " (line L, column C)" from V8's "… at position N …" (node 20+ also says line and column).
function whereIn (text, err) {
  const line = /\(line (\d+) column (\d+)\)/.exec(err.message)
  if (line) return ` (line ${line[1]}, column ${line[2]})`
  const pos = /at position (\d+)/.exec(err.message)
  if (!pos) return ''
  const before = text.slice(0, Number(pos[1])).split('\n')
  return ` (line ${before.length}, column ${before.at(-1).length + 1})`
}

export function submitHandler ({ config, scheduler, logger }) {
  const checkToken = requireToken(config.token)
  return async (req, res) => {
    const start = process.hrtime.bigint()
    try {
      checkToken(req.headers.authorization)
      const body = parseJson(await readBody(req))
      // `state` is the one at acceptance; the job may already be running by the time this is sent.
      const { job, created, state } = await scheduler.submit(body)
      sendJson(res, created ? 202 : 200, { id: job.id, state }, { location: `/v1/jobs/${job.id}` })
    } catch (err) {
      sendError(res, err, logger)
    } finally {
      logHandoff(logger, { method: 'POST', path: '/v1/jobs' }, res.statusCode, start)
    }
  }
}
