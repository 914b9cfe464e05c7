// Raw HTTP/1.1 over a TCP or unix socket, for what an HTTP client library refuses to send
// (CRLF in fields, duplicate Content-Length, Transfer-Encoding tricks, bad bytes, slowloris),
// and a parser of whatever comes back.
import net from 'node:net'

export function connect (endpoint) {
  const socket = endpoint.socketPath ? net.connect(endpoint.socketPath) : net.connect(endpoint.port, '127.0.0.1')
  socket.on('error', () => {})
  return socket
}

// Writes `data` and collects what comes back until the server closes, or until `answers` final
// answers have come (then it closes), or `waitMs` without them (then it half-closes and waits for
// the server to close, at most `timeoutMs`). Not half-closed at once: node ends a connection as
// soon as the client has (httpAllowHalfOpen is false), so an answer not written by then is lost.
// `reset`: the connection was reset; `gaveUp`: we half-closed before all answers had come.
export function exchange (endpoint, data, { answers = 1, waitMs = 2000, timeoutMs = 10000 } = {}) {
  return new Promise((resolve) => {
    const socket = connect(endpoint)
    const chunks = []
    let timedOut = false
    let reset = false
    let gaveUp = false
    const timer = setTimeout(() => { timedOut = true; socket.destroy() }, timeoutMs)
    const patience = setTimeout(() => { gaveUp = true; socket.end() }, waitMs)
    socket.on('data', (d) => {
      chunks.push(d)
      if (parseResponses(Buffer.concat(chunks)).responses.filter((r) => r.status >= 200).length >= answers) {
        clearTimeout(patience)
        socket.end()
      }
    })
    // A server closing with bytes of ours still unread makes the kernel reset the connection, and
    // an answer not yet read by then is lost on the way (no "lingering close" in node).
    socket.on('error', (err) => { if (err.code === 'ECONNRESET' || err.code === 'EPIPE') reset = true })
    socket.once('close', () => {
      clearTimeout(timer)
      clearTimeout(patience)
      resolve({ raw: Buffer.concat(chunks), timedOut, reset, gaveUp })
    })
    socket.write(data)
  })
}

// Splits a byte stream into HTTP responses: [{ status, headers, body }]; `rest` is what could not be parsed.
export function parseResponses (buf) {
  const responses = []
  let at = 0
  while (at < buf.length) {
    const headEnd = buf.indexOf('\r\n\r\n', at)
    if (headEnd < 0) break
    const lines = buf.subarray(at, headEnd).toString('latin1').split('\r\n')
    const m = /^HTTP\/1\.[01] (\d{3}) /.exec(lines[0] + ' ')
    if (!m) break
    const headers = {}
    for (const line of lines.slice(1)) {
      const i = line.indexOf(':')
      headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
    }
    let bodyStart = headEnd + 4
    let body
    if (headers['transfer-encoding'] === 'chunked') {
      const parts = []
      for (;;) {
        const lineEnd = buf.indexOf('\r\n', bodyStart)
        if (lineEnd < 0) return { responses, rest: buf.subarray(at) }
        const size = parseInt(buf.subarray(bodyStart, lineEnd).toString('latin1'), 16)
        if (!Number.isFinite(size)) return { responses, rest: buf.subarray(at) }
        parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size))
        bodyStart = lineEnd + 2 + size + 2
        if (size === 0) break
      }
      body = Buffer.concat(parts)
    } else {
      const length = Number(headers['content-length'] ?? 0)
      body = buf.subarray(bodyStart, bodyStart + length)
      bodyStart += length
    }
    responses.push({ status: Number(m[1]), headers, body: body.toString('utf8') })
    at = bodyStart
  }
  return { responses, rest: buf.subarray(at) }
}

// A slowloris connection: sends `data` one byte every `intervalMs` until done or closed by the
// server. Resolves with when it was closed (ms after the start) and what the server answered.
export function slowloris (endpoint, data, { intervalMs = 200, giveUpMs = 120000 } = {}) {
  const started = Date.now()
  const socket = connect(endpoint)
  const chunks = []
  let i = 0
  const timer = setInterval(() => {
    if (i < data.length && socket.writable) socket.write(data.subarray(i, ++i))
  }, intervalMs)
  const giveUp = setTimeout(() => socket.destroy(), giveUpMs)
  socket.on('data', (d) => chunks.push(d))
  const closed = new Promise((resolve) => socket.once('close', () => {
    clearInterval(timer)
    clearTimeout(giveUp)
    resolve({ afterMs: Date.now() - started, sent: i, raw: Buffer.concat(chunks) })
  }))
  return { socket, closed }
}
