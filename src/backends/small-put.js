// The PUT of a small file (the whole body in one buffer: sendSmallFile, up to 64 KiB) on a
// kept-alive connection, written straight to the socket: the head and the body go out in one
// writev, and the answer is read with the head parser of http-get.js. Through node:http such a PUT
// cost this daemon a ClientRequest, the agent's bookkeeping, an IncomingMessage and their
// listeners. Measured (bench/results/2026-11-28-small-put/): a bare node process PUTting 4 KiB
// files to httpd the daemon's way spent 0.21–0.27 ms of CPU and allocated 27–28 KiB a request
// through node:http, 0.14–0.15 ms and 15–16 KiB this way (node:http's own floor, req.end(body),
// 0.17–0.21 ms); the daemon, one small job at a time, 0.35–0.44 ms of CPU a job against 0.55–0.61.
// node's own parser (llhttp) is not public API (`_http_common` is deprecated, DEP0199), and
// undici's (llhttp in WebAssembly) costs this daemon 20–28 MiB of RSS (http-util.js). Larger
// uploads keep node:http (putStream): a request's own cost is noise beside their bytes. http only;
// https targets go through node:https.
//
// What this client answers for, as node:http did: the answer's framing (Content-Length, chunked,
// or until the close, and then the connection is not kept), interim 1xx answers skipped, a
// connection kept only when its answer ended exactly (HTTP/1.1, no `Connection: close`, nothing
// after it, the whole body sent), an idle timeout while a request is under way, a connect timeout,
// the job's AbortSignal. A kept connection is closed after 4 s unused, before the server's
// keep-alive ends (Apache's KeepAliveTimeout is 5 s), as the pool of http-util.js does; one that
// the server closes under a request fails it (ECONNRESET, retryable), as a streamed PUT on
// node:http's pool does. test/small-put.test.js holds it to this, byte for byte.
import net from 'node:net'
import { Writable } from 'node:stream'
import { MAX_HEAD, ChunkedDecoder, badResponse, parseHead } from './http-get.js'
import { timeConnect, timeoutError } from './http-util.js'
import { abortError } from '../datapath.js'

const FREE_MS = 4000
const MAX_FREE = 16 // connections kept unused at most, per target
const TEXT_LIMIT = 64 * 1024 // of an answer's body (an error document); a longer one closes the connection

// `base`: the target's URL (http:). put() → { stream, done }, as putStream: `stream` takes the
// body (write, end) and `done` resolves with the answer, { statusCode, headers, text() } (the body,
// at most 64 KiB of it, decoded as UTF-8), once the body is sent; an error answer (≥ 300) at once.
export function createSmallPut (base, { idleMs = 60000, connectMs = 0 } = {}) {
  const host = base.hostname.replace(/^\[(.*)\]$/, '$1') // an IPv6 address without its brackets
  const port = Number(base.port || 80)
  const free = [] // unused connections, the most recent last
  let closed = false

  function connection () {
    while (free.length) {
      const kept = free.pop()
      // One the server has closed meanwhile, its 'close' still to come, is not taken.
      if (kept.socket.readable && kept.socket.writable) return kept
      kept.socket.destroy()
    }
    const conn = new Connection(net.connect({ host, port, noDelay: true }), base.host, idleMs)
    conn.onIdle = () => {
      if (closed || free.length >= MAX_FREE) return conn.socket.destroy()
      conn.socket.setTimeout(FREE_MS)
      free.push(conn)
    }
    conn.socket.once('close', () => {
      const i = free.indexOf(conn)
      if (i >= 0) free.splice(i, 1)
    })
    timeConnect(conn.socket, base.host, connectMs, (err) => conn.fail(err))
    return conn
  }

  return {
    put (url, headers, { signal } = {}) {
      const exchange = new Exchange(`PUT ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${base.host}\r\n${headerLines(headers)}\r\n`, signal)
      if (signal?.aborted) exchange.failAll(abortError(signal))
      else connection().start(exchange)
      return { stream: exchange.stream, done: exchange.done }
    },
    close () {
      closed = true
      for (const conn of free.splice(0)) conn.socket.destroy()
    }
  }
}

function headerLines (headers) {
  let lines = ''
  for (const name in headers) lines += `${name}: ${headers[name]}\r\n`
  return lines
}

// One connection, one exchange at a time.
class Connection {
  constructor (socket, hostName, idleMs) {
    this.socket = socket
    this.idleMs = idleMs
    this.exchange = null
    this.onIdle = null
    socket.on('data', (data) => {
      if (!this.exchange) return socket.destroy() // bytes nobody asked for: not a connection to keep
      try {
        this.exchange.onData(data)
      } catch (err) {
        this.fail(err)
      }
    })
    socket.on('error', (err) => this.fail(err))
    socket.on('close', () => this.exchange?.closed())
    // Under way: the server's stall; unused: FREE_MS are over.
    socket.on('timeout', () => this.fail(timeoutError(`no progress from ${hostName} for ${idleMs} ms`)))
  }

  // The exchange under way fails with `err`; an unused connection is closed (and forgotten on 'close').
  fail (err) {
    if (this.exchange) this.exchange.failAll(err)
    else this.socket.destroy()
  }

  start (exchange) {
    this.exchange = exchange
    exchange.conn = this
    this.socket.setTimeout(this.idleMs)
  }

  // The exchange is over: the connection is kept for the next one, or closed.
  release (keep) {
    this.exchange = null
    if (keep && !this.socket.destroyed) this.onIdle()
    else this.socket.destroy()
  }
}

class Exchange {
  constructor (head, signal) {
    this.head = head // to send, with the first bytes of the body
    this.signal = signal
    this.conn = null
    this.answer = null
    this.sent = false // the whole body is with the kernel
    this.settled = false // `done` has resolved or rejected
    this.over = false // the answer is read (or as much of it as is kept), or the exchange failed
    this.received = '' // the answer's head, as it comes
    this.framing = null // 'length', 'chunked' or 'close', once the head is read
    this.left = 0 // 'length': bytes of the body still to come
    this.chunked = null // 'chunked': its ChunkedDecoder
    this.keep = false
    this.body = [] // the answer's body as it came, its first TEXT_LIMIT bytes
    this.bodyBytes = 0
    this.textWaiters = null
    this.deadline = null
    this.done = new Promise((resolve, reject) => {
      this.resolve = resolve
      this.reject = reject
    })
    this.onAbort = () => this.failAll(abortError(signal))
    signal?.addEventListener('abort', this.onAbort, { once: true })
    const exchange = this
    this.stream = new Writable({
      highWaterMark: 0,
      write (chunk, encoding, callback) {
        exchange.write(chunk, callback)
      },
      final (callback) {
        const sent = () => {
          exchange.sent = true
          exchange.settle()
          callback()
        }
        if (exchange.head) exchange.write(null, sent)
        else sent()
      },
      // Destroyed before its body was all sent (an abort, a source that changed size, an early
      // error answer): the server is still waiting for the rest, so the connection is not kept.
      destroy (err, callback) {
        if (!exchange.sent && !exchange.answer) exchange.failAll(err ?? Object.assign(new Error('the request was destroyed before its body was sent'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }))
        callback(err)
      }
    })
    // A failure reaches the caller through `done` (as putStream's request's does); unheard, the
    // stream's 'error' event would be an uncaught exception, which ends the process.
    this.stream.on('error', () => {})
  }

  // Hands `chunk` (or only the head) to the socket; `callback` once the kernel has it.
  write (chunk, callback) {
    const socket = this.conn?.socket
    if (!socket || socket.destroyed) return callback(Object.assign(new Error('the connection is closed'), { code: 'ERR_STREAM_DESTROYED' }))
    socket.cork()
    if (this.head) {
      socket.write(this.head, 'latin1')
      this.head = null
    }
    socket.write(chunk ?? '', () => callback())
    socket.uncork()
  }

  onData (data) {
    if (this.framing === null) this.onHead(data.toString('latin1'))
    else if (!this.over) this.onBody(data)
  }

  onHead (text) {
    this.received += text
    const end = this.received.indexOf('\r\n\r\n')
    if (end < 0) {
      if (this.received.length > MAX_HEAD) throw badResponse('response head too large')
      return
    }
    const { statusCode, headers, version } = parseHead(this.received.slice(0, end))
    const rest = this.received.slice(end + 4)
    this.received = ''
    if (statusCode < 200) return rest ? this.onHead(rest) : undefined // an interim answer: skipped
    const length = headers['content-length']
    const chunked = /chunked/i.test(headers['transfer-encoding'] ?? '')
    if (chunked) {
      this.framing = 'chunked'
      this.chunked = new ChunkedDecoder()
    } else if (statusCode === 204 || statusCode === 304) {
      this.framing = 'length'
    } else if (length !== undefined) {
      if (!/^\d+$/.test(length)) throw badResponse(`bad Content-Length: ${JSON.stringify(length.slice(0, 40))}`)
      this.framing = 'length'
      this.left = Number(length)
    } else {
      this.framing = 'close'
    }
    // Kept only if the answer's end is known from its framing and the server keeps it too (and,
    // see end(), the body was all sent).
    this.keep = version === '1.1' && this.framing !== 'close' && !(chunked && length !== undefined) &&
      !/(^|,)\s*close\s*(,|$)/i.test(headers.connection ?? '')
    this.answer = { statusCode, headers, text: () => this.bodyText() }
    this.settle()
    this.onBody(Buffer.from(rest, 'latin1')) // the head was read as latin1: the same bytes
    // A body that trickles on is read for idleMs at most, as drain() does.
    if (!this.over) this.deadline = setTimeout(() => this.end(false), this.conn.idleMs)
  }

  onBody (buf) {
    if (this.framing === 'length') {
      const used = Math.min(this.left, buf.length)
      this.take(buf.subarray(0, used))
      this.left -= used
      if (this.left === 0) this.end(used === buf.length) // bytes after the answer: not kept
    } else if (this.framing === 'chunked') {
      const end = this.chunked.feed(buf, (data) => this.take(data))
      if (end >= 0) this.end(end === buf.length)
    } else {
      this.take(buf)
    }
  }

  // Keeps the body's first TEXT_LIMIT bytes; beyond that the connection is not worth reading on.
  take (data) {
    if (this.over) return false
    const room = TEXT_LIMIT - this.bodyBytes
    if (data.length <= room) {
      this.body.push(data)
      this.bodyBytes += data.length
      return true
    }
    this.body.push(data.subarray(0, room))
    this.bodyBytes = TEXT_LIMIT
    this.end(false)
    return false
  }

  // Called when the answer is read, or as much of it as is kept; with `keep` and nothing against
  // it, the connection goes back to its pool.
  end (keep) {
    if (this.over) return
    this.over = true
    this.finish()
    this.conn?.release(keep && this.keep && this.sent)
    this.conn = null
    // A success answered before the whole body was with the kernel is not one: the rest of it
    // will not be sent now (the connection is closed).
    if (!this.settled && !this.sent) {
      this.settled = true
      this.reject(Object.assign(new Error('the server answered before the whole body was sent'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }))
    }
    this.textEnded()
  }

  // The connection closed under the exchange: the end of a body read until the close, or a failure.
  closed () {
    if (this.framing === 'close') this.end(false)
    else this.failAll(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))
  }

  // The answer goes to the caller once the body is all sent, or at once if it is an error (which
  // ends the upload; see http.js).
  settle () {
    if (this.settled || !this.answer) return
    if (!this.sent && this.answer.statusCode < 300) return
    this.settled = true
    this.resolve(this.answer)
  }

  // Ends the exchange with `err`: `done` rejects if it has not resolved yet, a body being read
  // ends with what was read, the connection is closed and the request's stream destroyed.
  failAll (err) {
    if (this.over) return
    this.over = true
    this.finish()
    this.conn?.release(false)
    this.conn = null
    if (!this.settled) {
      this.settled = true
      this.reject(err)
    }
    this.textEnded()
    if (!this.stream.destroyed) this.stream.destroy(err)
  }

  finish () {
    this.signal?.removeEventListener('abort', this.onAbort)
    clearTimeout(this.deadline)
  }

  bodyText () {
    if (this.over) return Promise.resolve(this.decoded())
    return new Promise((resolve) => (this.textWaiters ??= []).push(resolve))
  }

  textEnded () {
    const waiters = this.textWaiters
    this.textWaiters = null
    if (waiters) for (const resolve of waiters) resolve(this.decoded())
  }

  decoded () {
    return Buffer.concat(this.body, this.bodyBytes).toString('utf8')
  }
}
