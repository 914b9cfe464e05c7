// Small helpers shared by the HTTP-speaking backends (webhdfs, http).
import { http, clientFor, lazyHttps } from '../node-http.js'
import { finished } from 'node:stream/promises'
import {
  RemoteNotFoundError, RemoteExistsError, PermissionDeniedError, RemoteRejectedError, RemoteUnavailableError
} from '../errors.js'

const ERROR_BODY_LIMIT = 64 * 1024

export const timeoutError = (message) => Object.assign(new Error(message), { code: 'ETIMEDOUT' })

// Destroys `req` with ETIMEDOUT when its socket is idle for `idleMs`, or (with `connectMs`) when
// its connection is not made in time. The connect is timed from when the request gets a new
// socket: not while it waits in its agent's queue for one (all sockets busy), nor on a reused one.
function armTimeouts (req, host, { idleMs, connectMs = 0 }) {
  req.setTimeout(idleMs, () => req.destroy(timeoutError(`no progress from ${host} for ${idleMs} ms`)))
  if (connectMs) req.once('socket', (socket) => timeConnect(socket, host, connectMs, (err) => req.destroy(err)))
}

// Calls `fail` with ETIMEDOUT if `socket`, still connecting, is not connected within `connectMs`
// (also for http-get.js's own sockets).
export function timeConnect (socket, host, connectMs, fail) {
  if (!connectMs || !socket.connecting) return
  const timer = setTimeout(() => fail(timeoutError(`no connection to ${host} within ${connectMs} ms`)), connectMs)
  socket.once('connect', () => clearTimeout(timer))
  socket.once('close', () => clearTimeout(timer))
}

// Methods that may be sent again when a reused keep-alive socket turns out closed (RFC 9110
// 9.2.2); others (POST, MOVE, MKCOL) are sent again only by callers that cope with a repeat.
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'PROPFIND'])

// The client of the small requests (namenode calls, MKCOL, HEAD, MOVE, DELETE, callbacks): node:http
// with one keep-alive pool per scheme. Not undici: its WebAssembly HTTP parser costs this daemon
// 20–28 MiB of RSS (compiled at import, then tiered up) against a budget of 64 MiB, and node's own
// parser is already in the binary. Free sockets are closed after 4 s, before servers do (Apache's
// KeepAliveTimeout is 5 s); an idempotent request (or one sent with `resend: true`) that still
// meets a reused socket closing under it is sent once more.
export function createHttpClient ({ connectMs = 10000, idleMs = 60000, maxSockets = 64 } = {}) {
  const options = { keepAlive: true, keepAliveMsecs: 30000, maxSockets, maxFreeSockets: maxSockets, timeout: 4000, scheduling: 'lifo' }
  const agents = { 'http:': new http.Agent(options) }
  const agentFor = (protocol) => protocol === 'https:' ? (agents['https:'] ??= new (lazyHttps().Agent)(options)) : agents[protocol]

  function once (url, { method, headers, body, signal }) {
    return new Promise((resolve, reject) => {
      const req = clientFor(url.protocol).request(url, { method, headers, signal, agent: agentFor(url.protocol) })
      armTimeouts(req, url.host, { idleMs, connectMs })
      req.once('error', (err) => {
        err.reusedSocket = req.reusedSocket
        reject(err)
      })
      req.once('response', (res) => {
        // From now on an error belongs to the body.
        req.removeAllListeners('error')
        req.on('error', (err) => res.destroy(err))
        resolve({ statusCode: res.statusCode, headers: res.headers, body: res })
      })
      req.end(body)
    })
  }

  return {
    async send (url, { method = 'GET', headers, body, signal, resend = IDEMPOTENT.has(method) } = {}) {
      url = typeof url === 'string' ? new URL(url) : url
      try {
        return await once(url, { method, headers, body, signal })
      } catch (err) {
        if (!resend || !err.reusedSocket || err.code !== 'ECONNRESET' || signal?.aborted) throw err
        return once(url, { method, headers, body, signal })
      }
    },
    agent: (url) => agentFor(new URL(url).protocol),
    close () {
      for (const a of Object.values(agents)) a.destroy()
    }
  }
}

// Reads a body we do not need to its end, so that its connection goes back to the pool; one
// longer than an error document, or still coming after `ms`, is dropped with its connection
// instead (a server that trickles an endless answer would hold the socket for ever).
export async function drain (body, { ms = 60000 } = {}) {
  let size = 0
  const timer = setTimeout(() => body.destroy(), ms)
  body.on('data', (chunk) => {
    size += chunk.length
    if (size > ERROR_BODY_LIMIT) body.destroy()
  })
  await finished(body).catch(() => {})
  clearTimeout(timer)
}

// Reads a small body (error documents, JSON answers) with a hard cap: a body longer than that is
// not read further (it is destroyed, and its connection with it).
export async function readSmall (body, limit = ERROR_BODY_LIMIT) {
  const chunks = []
  let size = 0
  for await (const chunk of body) {
    chunks.push(chunk.subarray(0, limit - size))
    size += chunk.length
    if (size >= limit) break
  }
  return Buffer.concat(chunks).toString('utf8')
}

export function firstLine (text, max = 500) {
  const line = String(text ?? '').split('\n')[0].trim()
  return line.length > max ? line.slice(0, max) + '…' : line
}

// Maps a failed HTTP status to a job error; `details` keeps what the server said.
export function statusError (status, message, details = {}) {
  const d = { status, ...details }
  if (status === 404 || status === 410) return new RemoteNotFoundError(message, { details: d })
  if (status === 401 || status === 403) return new PermissionDeniedError(message, { details: d })
  if (status === 412) return new RemoteExistsError(message, { details: d })
  if (status >= 500 || status === 408 || status === 429) return new RemoteUnavailableError(message, { details: d })
  return new RemoteRejectedError(message, { details: d })
}

export function encodePath (p) {
  return p.split('/').map(encodeURIComponent).join('/')
}

// A streamed request body: the ClientRequest is a plain Writable at the end of the pipeline.
// (Hadoop datanodes answer every PUT with an unsolicited "100 Continue", which node:http ignores.)
export function putStream (url, { headers, signal, idleMs = 60000, connectMs = 0, agent = false }) {
  const target = new URL(url)
  const client = clientFor(target.protocol)
  const req = client.request(target, { method: 'PUT', headers, signal, agent })
  armTimeouts(req, target.host, { idleMs, connectMs })
  const done = new Promise((resolve, reject) => {
    req.once('error', reject)
    req.once('response', (res) => {
      const answer = { statusCode: res.statusCode, headers: res.headers, body: res }
      // A success is one only once the whole body is sent (an error ends the upload at once).
      if (res.statusCode >= 300 || req.writableFinished) return resolve(answer)
      bodySent(req, target.host, idleMs).then(() => resolve(answer), reject)
    })
  })
  return { stream: req, done }
}

// Resolves once `req` has handed its whole body to the kernel. Node stops a request's timeout once
// its answer has ended, so a server that answers 2xx before it has read the body, then stops
// reading, would hold the upload (its slot, file and buffers) for ever: no progress on the socket
// for `idleMs` destroys it with ETIMEDOUT instead.
function bodySent (req, host, idleMs) {
  return new Promise((resolve, reject) => {
    let last = -1
    const timer = idleMs > 0 && setInterval(() => {
      const written = req.socket?.bytesWritten ?? 0
      if (written === last) req.destroy(timeoutError(`no progress from ${host} for ${idleMs} ms`))
      last = written
    }, idleMs)
    finished(req).then(resolve, reject).finally(() => clearInterval(timer))
  })
}

// A GET whose body is a download, on a connection of its own (datanodes close every connection);
// used for https and when the transfer has no buffer pool (http-get.js otherwise).
export function getStream (url, { headers, signal, idleMs = 60000, connectMs = 0 }) {
  const target = new URL(url)
  const client = clientFor(target.protocol)
  return new Promise((resolve, reject) => {
    const req = client.get(target, { headers, signal, agent: false })
    armTimeouts(req, target.host, { idleMs, connectMs })
    req.once('error', reject)
    req.once('response', (res) => {
      // An error now belongs to the body: it reaches the pipeline through `res`.
      req.off('error', reject)
      req.on('error', (err) => res.destroy(err))
      // Paused for the consumer (a slow client of /v1/stream, a full pool), the socket reads
      // nothing, and that is not the server's stall: its idle timer stops meanwhile (as http-get.js's).
      res.on('pause', () => req.setTimeout(0))
      res.on('resume', () => req.setTimeout(idleMs))
      resolve({ statusCode: res.statusCode, headers: res.headers, body: res })
    })
  })
}
