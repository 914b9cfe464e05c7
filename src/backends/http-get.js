// A minimal HTTP/1.1 GET for the bodies of downloads (http targets, WebHDFS datanodes): the socket
// reads straight into the transfer's pool buffers (net `onread`), so moving a large file allocates
// nothing per read. One connection per download (`Connection: close`): the body is the whole
// point of the request, and the connection set-up is noise beside it. Small requests, redirects
// and JSON go through createHttpClient (http-util.js).
//
// The body the caller will stream (`zeroCopy(statusCode)`: by default any 2xx) with a
// Content-Length is handed on as views of pool buffers, which the consumer releases (the sinks in
// datapath.js do): the pool bounds what is read ahead. Other bodies (an answer the caller refuses,
// chunked framing) are copied, so readSmall() can drain them; those copies wait for the consumer
// (the socket is not read while the body's buffer is full).
import net from 'node:net'
import { Readable } from 'node:stream'
import { timeConnect } from './http-util.js'

export const MAX_HEAD = 64 * 1024
const MAX_CHUNK_LINE = 16 * 1024 // a chunk's size line, extensions included
// What a socket that has been destroyed gets to read into (net asks for the next buffer even
// then): nothing is read into it, and no pool buffer is taken for it.
const NO_READ = Buffer.alloc(16)
const NEWLINE = 0x0a

// A response that breaks HTTP/1.1 (a network error: NETWORK_ERROR, retried); also for small-put.js.
export const badResponse = (message) => Object.assign(new Error(message), { code: 'ERR_BAD_HTTP_RESPONSE' })

// Chunked framing (RFC 9112 7.1), fed Buffers as they come: a size line (hex; extensions ignored),
// the data, CRLF; the last chunk (size 0), then trailer lines up to an empty one. `data(view)` is
// given each piece of the chunks' data (a view of what was fed); returning false stops the feed.
// feed() returns where the answer ended in `buf` (just after the empty line), or -1. Shared by the
// download client and small-put.js.
export class ChunkedDecoder {
  #state = 'size' // reading a 'size' line, 'data', the 'crlf' after it, or 'trailers'
  #left = 0 // of the current chunk's data
  #line = '' // a line's start, its newline still to come

  feed (buf, data) {
    let i = 0
    while (i < buf.length) {
      if (this.#state === 'data') {
        const used = Math.min(this.#left, buf.length - i)
        this.#left -= used
        i += used
        if (this.#left === 0) this.#state = 'crlf'
        if (data(buf.subarray(i - used, i)) === false) return -1
        continue
      }
      const nl = buf.indexOf(NEWLINE, i)
      const line = this.#line + buf.toString('latin1', i, nl < 0 ? buf.length : nl)
      if (line.length > MAX_CHUNK_LINE) throw badResponse('chunk size line too long')
      if (nl < 0) {
        this.#line = line
        return -1
      }
      this.#line = ''
      i = nl + 1
      const text = line.endsWith('\r') ? line.slice(0, -1) : line
      if (this.#state === 'crlf') {
        if (text !== '') throw badResponse('chunk data longer than its size')
        this.#state = 'size'
      } else if (this.#state === 'size') {
        const m = /^([0-9a-fA-F]{1,12})[ \t]*(;.*)?$/.exec(text)
        if (!m) throw badResponse(`bad chunk size line: ${JSON.stringify(text.slice(0, 40))}`)
        this.#left = parseInt(m[1], 16)
        this.#state = this.#left === 0 ? 'trailers' : 'data'
      } else if (text === '') {
        return i // the empty line after the trailers: the end of the answer
      }
    }
    return -1
  }
}

// An answer's status line and headers (names in lower case; of a repeated one the last), and its
// HTTP version ('1.0' or '1.1'); also for small-put.js.
export function parseHead (text) {
  const lines = text.split('\r\n')
  const m = /^HTTP\/(1\.[01]) (\d{3})/.exec(lines[0])
  if (!m) throw badResponse(`not an HTTP response: ${JSON.stringify(lines[0].slice(0, 80))}`)
  const headers = {}
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':')
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
  }
  return { statusCode: Number(m[2]), headers, version: m[1] }
}

export function pooledGet (url, { headers = {}, signal, idleMs = 60000, connectMs = 0, pool, zeroCopy: streamed = (status) => status >= 200 && status < 300 }) {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    let head = Buffer.alloc(0)
    let response = null
    let remaining = null // bytes of body still to come; null: until the connection closes
    let zeroCopy = false
    let chunked = null // a chunked body's ChunkedDecoder
    let spare = null
    let next = null // the buffer the socket will read into next (net takes it before it is needed)
    let done = false // the body is complete or failed: the socket reads no more
    let waitingForReader = false // a copy did not fit in the body's buffer: paused until it is read

    const fail = (err) => {
      done = true
      socket.destroy()
      if (response) response.body.destroy(err)
      else reject(err)
    }
    const onAbort = () => fail(signal.reason instanceof Error ? signal.reason : Object.assign(new Error('aborted'), { name: 'AbortError', code: 'ABORT_ERR' }))
    signal?.addEventListener('abort', onAbort, { once: true })

    const socket = net.connect({
      host: u.hostname.replace(/^\[(.*)\]$/, '$1'), // an IPv6 address without the URL's brackets
      port: Number(u.port || 80),
      onread: {
        // Pool buffers when there are any; a spare one (copied from) when the consumer is behind.
        buffer: () => {
          if (done) return NO_READ
          next = pool.acquire() ?? (spare ??= Buffer.allocUnsafeSlow(pool.size))
          return next
        },
        callback: (n, buf) => {
          next = null
          try {
            onData(buf.subarray(0, n), buf === spare)
          } catch (err) {
            fail(err)
            return false
          }
          // Pause while at most one buffer is free, so the next read (whose buffer is taken right
          // after this callback) still finds a pool buffer rather than the spare.
          if (pool.available <= 1 && !socket.destroyed) {
            waitForReader()
            resumeWhenFree(2)
            return false
          }
        }
      }
    })
    socket.setNoDelay(true)
    socket.setTimeout(idleMs, () => fail(Object.assign(new Error(`no data for ${idleMs} ms`), { code: 'ETIMEDOUT' })))
    timeConnect(socket, u.host, connectMs, fail)
    socket.once('error', (err) => fail(err))
    socket.once('close', () => {
      signal?.removeEventListener('abort', onAbort)
      // A buffer taken for a read that will not come (the server closed, an error) goes back, or
      // the pool would lose one, and allocate a new one, per download.
      if (next && next !== spare) pool.release(next)
      next = null
      if (!response) return reject(badResponse('connection closed before the response'))
      if (remaining === null && !chunked) response.body.push(null)
      else if (remaining !== 0) response.body.destroy(Object.assign(new Error('connection closed before the end of the body'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }))
    })
    // An 'abort' event comes only once: a signal aborted already (a cancel while the download got
    // ready) ends the request now, not after idleMs of a server that does not answer.
    if (signal?.aborted) return onAbort()
    const target = u.pathname + u.search
    const lines = [`GET ${target} HTTP/1.1`, `Host: ${u.host}`, 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)]
    socket.write(lines.join('\r\n') + '\r\n\r\n')

    function resumeWhenFree (count) {
      pool.whenAvailable(() => {
        if (pool.available >= count || socket.destroyed) readAgain()
        else resumeWhenFree(count)
      }, { next: true })
    }

    // Paused for the consumer (a slow disk, a slow client of /v1/stream), not by the server: the
    // server's idle timer does not run meanwhile, or a consumer slower than idleMs per pool would
    // fail the download as if the server had stalled.
    function waitForReader () {
      socket.setTimeout(0)
    }
    function readAgain () {
      if (socket.destroyed) return
      socket.setTimeout(idleMs)
      socket.resume()
    }

    function onData (view, isSpare) {
      if (!response) {
        head = Buffer.concat([head, view])
        const end = head.indexOf('\r\n\r\n')
        if (end < 0) {
          if (head.length > MAX_HEAD) throw badResponse('response head too large')
          if (!isSpare) pool.release(view)
          return
        }
        const parsed = parseHead(head.subarray(0, end).toString('latin1'))
        if (parsed.statusCode >= 100 && parsed.statusCode < 200) { // an interim answer: skip it
          head = head.subarray(end + 4)
          if (!isSpare) pool.release(view)
          return head.length ? onData(Buffer.alloc(0), true) : undefined
        }
        const rest = head.subarray(end + 4)
        head = null
        startBody(parsed)
        if (!isSpare) pool.release(view)
        if (rest.length) bodyData(Buffer.from(rest), true)
        return
      }
      bodyData(view, isSpare)
    }

    function startBody ({ statusCode, headers: h }) {
      const body = new Readable({
        highWaterMark: 0,
        read () {
          if (!waitingForReader) return
          waitingForReader = false
          if (!done) readAgain()
        },
        destroy (err, callback) {
          socket.destroy()
          callback(err)
        }
      })
      // An error before the consumer reads (a bad chunk in the first packet, a reset while the
      // consumer still awaits something) stays on the destroyed stream, which the consumer's
      // pipeline or read then reports; unheard, the 'error' event would be an uncaught exception.
      body.on('error', () => {})
      if (/chunked/i.test(h['transfer-encoding'] ?? '')) chunked = new ChunkedDecoder()
      else if (h['content-length'] !== undefined) remaining = Number(h['content-length'])
      zeroCopy = streamed(statusCode) && !chunked
      response = { statusCode, headers: h, body }
      resolve(response)
      if (remaining === 0) finish()
    }

    function finish () {
      done = true
      response.body.push(null)
      socket.destroy()
    }

    // A copied chunk: the socket pauses until the consumer has read what the body holds.
    function pushCopy (chunk) {
      if (!response.body.push(chunk) && !socket.destroyed) {
        waitingForReader = true
        waitForReader()
        socket.pause()
      }
    }

    function bodyData (view, copied) {
      if (chunked) return chunkedData(view, copied)
      if (remaining !== null) {
        if (view.length > remaining) view = view.subarray(0, remaining)
        remaining -= view.length
      }
      const handOn = zeroCopy && !copied && view.length > 0 // the consumer releases it
      if (handOn) response.body.push(view)
      else if (view.length) pushCopy(Buffer.from(view))
      if (!copied && !handOn) pool.release(view)
      if (remaining === 0) finish()
    }

    // Chunked framing, copied out (rare for the servers we fetch files from).
    function chunkedData (view, copied) {
      if (chunked.feed(view, (data) => pushCopy(Buffer.from(data))) >= 0) {
        remaining = 0
        chunked = null
        finish()
      }
      if (!copied) pool.release(view)
    }
  })
}
