// HTTP listeners on loopback TCP and unix sockets, each serving the same express app.
import http from 'node:http'
import net from 'node:net'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { InvalidRequestError } from './errors.js'
import { sendError } from './http/respond.js'

const SERVER_OPTIONS = {
  keepAliveTimeout: 5000,
  headersTimeout: 10000, // slow or stuck clients cannot hold a connection forever
  requestTimeout: 30000,
  connectionsCheckingInterval: 1000, // the two timeouts above are checked this often (default 30 s)
  maxHeaderSize: 16 * 1024,
  requireHostHeader: false // answered by the app (app.js), with a JSON error like every other one
}

const CLIENT_ERRORS = {
  HPE_HEADER_OVERFLOW: `the request head exceeds ${SERVER_OPTIONS.maxHeaderSize} bytes`,
  ERR_HTTP_REQUEST_TIMEOUT: 'the request was not received in time'
}

// What node's parser refuses (malformed or oversized heads, bad framing, timeouts) it would answer
// with a bare 400/431/408; the API answers every error as JSON. Like node's own handler, nothing
// is written once an answer on this connection has started, and the connection is closed.
function answerClientError (err, socket) {
  if (err.code === 'ECONNRESET' || !socket.writable || socket._httpMessage?.headersSent) return socket.destroy()
  const body = JSON.stringify({ error: { code: 'INVALID_REQUEST', message: CLIENT_ERRORS[err.code] ?? 'malformed HTTP request' } })
  socket.end('HTTP/1.1 400 Bad Request\r\ncontent-type: application/json; charset=utf-8\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`, () => socket.destroy())
}

// An Expect other than 100-continue (node would answer a bare 417).
function answerExpectation (req, res) {
  sendError(res, new InvalidRequestError('only "Expect: 100-continue" is supported'), null)
}

// A stale socket file from a crash is removed; a live one (another sidecar) is an error.
async function clearStaleSocket (file) {
  try {
    const st = await fs.lstat(file)
    if (!st.isSocket()) throw new Error(`${file} exists and is not a socket`)
  } catch (err) {
    if (err.code === 'ENOENT') return
    throw err
  }
  const live = await new Promise((resolve) => {
    const s = net.connect(file)
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
  if (live) throw new Error(`${file} is in use by another process`)
  await fs.unlink(file)
}

function groupId (group) {
  if (Number.isInteger(group)) return group
  const line = execFileSync('getent', ['group', group], { encoding: 'utf8' }).trim()
  return Number(line.split(':')[2])
}

export async function listenAll (app, config) {
  const servers = []
  try {
    for (const l of config.listen) {
      const server = http.createServer(SERVER_OPTIONS, app)
      server.on('clientError', answerClientError)
      server.on('checkExpectation', answerExpectation)
      if (l.type === 'unix') {
        await fs.mkdir(path.dirname(l.path), { recursive: true, mode: 0o755 })
        await clearStaleSocket(l.path)
        await listen(server, l.path)
        await fs.chmod(l.path, config.socketMode)
        if (config.socketGroup !== null) await fs.chown(l.path, -1, groupId(config.socketGroup))
      } else {
        await listen(server, l.port, l.host)
      }
      servers.push({ server, listen: l, address: server.address() })
    }
  } catch (err) {
    await closeAll(servers, 0)
    throw err
  }
  return servers
}

function listen (server, ...args) {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(...args, () => {
      server.off('error', reject)
      resolve()
    })
  })
}

// Stops accepting at once; idle keep-alive connections are closed, busy ones get `graceMs`.
export async function closeAll (servers, graceMs) {
  await Promise.all(servers.map(({ server, listen: l }) => new Promise((resolve) => {
    const timer = setTimeout(() => server.closeAllConnections(), graceMs)
    server.close(() => {
      clearTimeout(timer)
      if (l.type === 'unix') fs.unlink(l.path).catch(() => {}).finally(resolve)
      else resolve()
    })
    server.closeIdleConnections()
  })))
}
