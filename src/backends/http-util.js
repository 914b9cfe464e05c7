// Small helpers shared by the HTTP-speaking backends (webhdfs, http).
import http from 'node:http'
import https from 'node:https'
import { request } from 'undici'
import {
  RemoteNotFoundError, RemoteExistsError, PermissionDeniedError, RemoteRejectedError, RemoteUnavailableError
} from '../errors.js'

const ERROR_BODY_LIMIT = 64 * 1024

export function send (url, { dispatcher, signal, method = 'GET', headers, body }) {
  return request(url, { method, headers, body, dispatcher, signal })
}

// Reads a small body (error documents, JSON answers) with a hard cap; the rest is discarded.
export async function readSmall (body, limit = ERROR_BODY_LIMIT) {
  const chunks = []
  let size = 0
  for await (const chunk of body) {
    if (size < limit) chunks.push(chunk.subarray(0, limit - size))
    size += chunk.length
  }
  return Buffer.concat(chunks).toString('utf8')
}

export async function readJson (res) {
  const text = await readSmall(res.body)
  try {
    return JSON.parse(text)
  } catch {
    throw new RemoteRejectedError(`expected JSON from the server, got ${JSON.stringify(text.slice(0, 200))}`)
  }
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

// Request bodies are streamed with node:http rather than undici, for two reasons seen against the
// real servers: Hadoop datanodes answer every PUT with an unsolicited "100 Continue", which undici
// rejects as a bad response; and undici destroys a stream body on its 'end', which can beat the
// 'finish' that stream/promises.pipeline waits for ("Premature close"). A ClientRequest is a plain
// Writable at the end of the pipeline. Responses, downloads and small calls stay on undici.
export function putStream (url, { headers, signal, idleMs = 60000, agent = false }) {
  const target = new URL(url)
  const client = target.protocol === 'https:' ? https : http
  const req = client.request(target, { method: 'PUT', headers, signal, agent })
  req.setTimeout(idleMs, () => req.destroy(Object.assign(new Error(`no progress for ${idleMs} ms`), { code: 'ETIMEDOUT' })))
  const done = new Promise((resolve, reject) => {
    req.once('error', reject)
    req.once('response', (res) => resolve({ statusCode: res.statusCode, headers: res.headers, body: res }))
  })
  return { stream: req, done }
}

// A GET whose body is a download, for servers that close every connection (datanodes). undici
// 7 crashes the process (an uncatchable assert, nodejs/undici#5360, fixed only in undici 8) when
// such a server closes the socket while the body waits for its consumer; node:http does not.
export function getStream (url, { headers, signal, idleMs = 60000 }) {
  const target = new URL(url)
  const client = target.protocol === 'https:' ? https : http
  return new Promise((resolve, reject) => {
    const req = client.get(target, { headers, signal, agent: false })
    req.setTimeout(idleMs, () => req.destroy(Object.assign(new Error(`no progress for ${idleMs} ms`), { code: 'ETIMEDOUT' })))
    req.once('error', reject)
    req.once('response', (res) => {
      // An error now belongs to the body: it reaches the pipeline through `res`.
      req.off('error', reject)
      req.on('error', (err) => res.destroy(err))
      resolve({ statusCode: res.statusCode, headers: res.headers, body: res })
    })
  })
}

// A keep-alive pool for streamed PUTs to one server (datanodes close every connection anyway).
export function putAgent (url, maxSockets) {
  const options = { keepAlive: true, keepAliveMsecs: 30000, maxSockets, scheduling: 'lifo' }
  return new URL(url).protocol === 'https:' ? new https.Agent(options) : new http.Agent(options)
}
