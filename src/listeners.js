// Listeners on loopback TCP and unix sockets, each serving the same express app and line protocol.
// (handoff.listen's sockets, which speak only the line protocol, are the hand-off thread's.)
import { http } from './node-http.js'
import { bindListener, closeListener } from './sockets.js'
import { InvalidRequestError } from './errors.js'
import { sendError } from './http/respond.js'
import { isLineProtocol } from './http/lines.js'

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

// A JSON error written straight to a socket that node's HTTP server no longer serves, then closed.
function answerRaw (socket, status, code, message) {
  const body = JSON.stringify({ error: { code, message } })
  socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`, () => socket.destroy())
}

// What node's parser refuses (malformed or oversized heads, bad framing, timeouts) it would answer
// with a bare 400/431/408; the API answers every error as JSON. Like node's own handler, nothing
// is written once an answer on this connection has started, and the connection is closed.
function answerClientError (err, socket) {
  if (err.code === 'ECONNRESET' || !socket.writable || socket._httpMessage?.headersSent) return socket.destroy()
  answerRaw(socket, 400, 'INVALID_REQUEST', CLIENT_ERRORS[err.code] ?? 'malformed HTTP request')
}

// CONNECT (a tunnel request) never reaches the app: node hands it to 'connect' listeners, and
// without one it closes the connection unanswered. The API has no tunnels; say so like any error.
function refuseConnect (req, socket) {
  if (!socket.writable) return socket.destroy()
  answerRaw(socket, 405, 'METHOD_NOT_ALLOWED', 'CONNECT is not allowed')
}

// An Expect other than 100-continue (node would answer a bare 417).
function answerExpectation (req, res) {
  sendError(res, new InvalidRequestError('only "Expect: 100-continue" is supported'), null)
}

// Each connection is HTTP or the line protocol (http/lines.js), told apart by its first byte.
// Until that byte, node's HTTP server has not seen the connection, so its timeouts do not apply yet.
// Returns the connections still waiting for their first byte (closed at once by closeAll).
function sniffProtocol (server, lines) {
  const [serveHttp] = server.listeners('connection') // node's own, added by http.createServer
  server.removeListener('connection', serveHttp)
  const waiting = new Set()
  server.on('connection', (socket) => {
    const silent = () => socket.destroy() // no byte in time, or a reset before the first one
    waiting.add(socket)
    socket.once('close', () => waiting.delete(socket))
    socket.setTimeout(SERVER_OPTIONS.headersTimeout, silent)
    socket.once('error', silent)
    socket.once('data', (first) => {
      waiting.delete(socket)
      socket.setTimeout(0, silent)
      socket.off('error', silent)
      if (isLineProtocol(first)) return lines.serve(socket, first)
      socket.pause()
      socket.unshift(first)
      serveHttp.call(server, socket)
      socket.resume()
    })
  })
  return waiting
}

export async function listenAll ({ app, lines }, config) {
  const servers = []
  try {
    for (const l of config.listen) {
      const server = http.createServer(SERVER_OPTIONS, app)
      const silent = sniffProtocol(server, lines)
      server.on('clientError', answerClientError)
      server.on('checkExpectation', answerExpectation)
      server.on('connect', refuseConnect) // 'upgrade' needs nothing: without a listener it is a plain request
      servers.push({ server, lines, silent, listen: l, address: await bindListener(server, l, config) })
    }
  } catch (err) {
    await closeAll(servers, 0)
    throw err
  }
  return servers
}

// Stops accepting at once; idle keep-alive connections are closed, busy ones get `graceMs`.
export async function closeAll (servers, graceMs) {
  await Promise.all(servers.map(async ({ server, lines, silent, listen: l }) => {
    const timer = setTimeout(() => {
      server.closeAllConnections()
      lines.destroyAll()
    }, graceMs)
    const closed = closeListener(server, l)
    server.closeIdleConnections()
    lines.closeIdle()
    for (const socket of silent) socket.destroy() // nothing sent yet: nothing to answer
    await closed
    clearTimeout(timer)
  }))
}
