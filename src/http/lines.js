// The line protocol: the lean hand-off of issue #18, on the same sockets as the HTTP API. A
// connection whose first byte is "{" speaks it (no HTTP request starts so): each request is one
// line of JSON, a job exactly as POST /v1/jobs takes it, answered by one line, in order:
//   → {"direction":"upload","target":"hdfs","local":"/var/www/a.bin","remote":"/a.bin"}
//   ← {"status":202,"id":"k3Jm5f7Q2xYb9Zc1","state":"queued"}
//   ← {"status":400,"error":{"code":"UNKNOWN_TARGET","message":"…"}}
// With a token configured, the first line is {"token":"…"}, answered {"status":200}. Same checks,
// errors and durability as POST /v1/jobs (scheduler.submit); what it leaves out is node's HTTP
// server, 2.5–3× a bare socket's cost per exchange (bench/handoff-floor.js). Pipelined lines are
// checked and recorded one after another, in order, and wait for the disk together: in "fsync"
// mode a batch of them shares one synced write instead of taking one each.
import { InvalidJsonError, InvalidRequestError, PayloadTooLargeError, UnauthorizedError } from '../errors.js'
import { MAX_BODY_BYTES, errorAnswer, logHandoff, tokenMatcher } from './respond.js'
import { parseJson, strictUtf8 } from './submit.js'
import { ID } from '../jobs.js'

const NEWLINE = 0x0a
export const LINE_IDLE_MS = 5000 // an idle connection is closed, as HTTP keep-alive ones are
export const LINE_MS = 10000 // a line must be complete this long after its first byte arrived
const READ_AHEAD = 64 // lines waiting for their answers before the connection is no longer read
const READ_AHEAD_BYTES = 1 << 20 // … or bytes of them
const DROP_LIMIT = 1 << 20 // bytes read and dropped after a refusal before the connection is cut

// Whether a connection's first bytes are the line protocol's.
export const isLineProtocol = (chunk) => chunk[0] === 0x7b // "{"

// `timeouts` are the two above, shorter in tests.
export function lineProtocol ({ config, scheduler, logger, timeouts: { idleMs = LINE_IDLE_MS, lineMs = LINE_MS } = {} }) {
  const authorized = tokenMatcher(config.token)
  const connections = new Set()
  let closing = false

  function serve (socket, first) {
    let authenticated = config.token === null
    let partial = [] // the pieces of a line whose newline has not arrived
    let partialBytes = 0
    let lineTimer = null
    // Complete lines, or the error that ends the connection, to answer in turn: lines[next…]; the
    // lines from lines[toStart] on are not handled yet. (Indexes, not shift(): one 64 KiB read can
    // hold 20,000 lines of "{}".) The answers to come of the lines between, by index, as
    // { promise, settle }, made when one side needs it.
    let lines = []
    let next = 0
    let toStart = 0
    const replies = new Map()
    let pendingBytes = 0 // of lines[next…]
    let handling = false // a line is handled and has not let the next one start yet
    let ahead = 0 // lines started whose answers the answer loop has not taken (≤ READ_AHEAD)
    let refused = false // a line was refused with the connection's close: none after it is handled
    let corked = false
    let busy = false
    let paused = false
    let ending = false

    const connection = {
      idle: () => !busy && next === lines.length && partialBytes === 0,
      end: () => socket.end(),
      destroy: () => socket.destroy()
    }
    connections.add(connection)
    socket.on('error', () => {}) // a reset by the client: 'close' follows
    socket.once('close', () => {
      connections.delete(connection)
      clearTimeout(lineTimer)
    })
    socket.setTimeout(idleMs, () => {
      if (socket.writableEnded) {
        socket.destroy() // answered all, and the client keeps its side open
      } else if (connection.idle()) {
        socket.end()
        // A client that neither reads nor closes its side is cut idleMs later (node's idle timer
        // does not fire again once the socket is ended).
        const cut = setTimeout(() => socket.destroy(), idleMs)
        socket.once('close', () => clearTimeout(cut))
      }
    })

    function read (chunk) {
      if (socket.writableEnded) return // closed while idle (shutdown, idle timeout): not answered
      let start = 0
      let newline
      while ((newline = chunk.indexOf(NEWLINE, start)) !== -1) {
        const piece = chunk.subarray(start, newline)
        start = newline + 1
        if (partialBytes + piece.length > MAX_BODY_BYTES) return refuse(tooLarge())
        pendingBytes += partialBytes + piece.length
        if (partialBytes === 0) {
          lines.push(piece)
        } else {
          partial.push(piece)
          lines.push(Buffer.concat(partial))
          partial = []
          partialBytes = 0
          clearTimeout(lineTimer)
          lineTimer = null
        }
      }
      if (start < chunk.length) {
        partialBytes += chunk.length - start
        if (partialBytes > MAX_BODY_BYTES) return refuse(tooLarge())
        partial.push(chunk.subarray(start))
        if (!paused) lineTimer ??= setTimeout(lineTooSlow, lineMs)
      }
      if ((lines.length - next >= READ_AHEAD || pendingBytes >= READ_AHEAD_BYTES) && !paused) pause()
      if (!handling) startNext()
      answer()
    }

    function pause () {
      paused = true
      socket.pause()
      clearTimeout(lineTimer) // the time we do not read is not the client's
      lineTimer = null
    }

    const lineTooSlow = () => refuse(new InvalidRequestError('the line was not received in time'))

    // Nothing more is read: the lines before are answered, then this error, then the connection
    // ends. What the client still sends is read and dropped (a TCP close with unread data would
    // reset the connection, and the client could lose the answers).
    function refuse (err) {
      stopReading()
      lines.push(err)
      answer()
    }

    // A line is handled once the one before it has its record on its way to the journal, or its
    // answer: their checks and records keep the lines' order, and their waits for the disk overlap.
    // At most READ_AHEAD lines are handled ahead of the answers written, whatever one read held.
    // (A queue, not a chain of promises: V8 walks such a chain for every error's async stack.)
    function replyOf (i) {
      let reply = replies.get(i)
      if (!reply) {
        reply = { promise: null, settle: null }
        reply.promise = new Promise((resolve) => { reply.settle = resolve })
        replies.set(i, reply)
      }
      return reply
    }

    function startNext () {
      if (toStart === lines.length || lines[toStart] instanceof Error || ahead >= READ_AHEAD) {
        handling = false // until read() or the answer loop calls again
        return
      }
      handling = true
      ahead++
      const i = toStart++
      const reply = replyOf(i)
      let released = false
      const recorded = () => {
        released = true
        queueMicrotask(startNext) // not inside scheduler.submit's own call of it
      }
      handle(lines[i], recorded).then((answer) => {
        reply.settle(answer)
        if (!released) startNext()
      })
    }

    function stopReading () {
      if (ending) return
      ending = true
      socket.off('data', read)
      let dropped = 0
      socket.on('data', (chunk) => {
        dropped += chunk.length
        if (dropped > DROP_LIMIT) socket.destroy()
      })
      if (paused) {
        paused = false
        socket.resume()
      }
      partial = []
      partialBytes = 0
      clearTimeout(lineTimer)
    }

    async function answer () {
      if (busy) return
      busy = true
      while (next < lines.length) {
        const i = next++
        const line = lines[i]
        let reply
        if (line instanceof Error) {
          reply = failure(line)
        } else {
          pendingBytes -= line.length
          if (!handling) startNext() // lines read before a refusal were not started by read()
          reply = await replyOf(i).promise
          replies.delete(i)
          ahead--
          if (!handling) startNext()
        }
        // Lines received before the client went away are handled all the same, as an HTTP request
        // received whole is; only their answers are lost. A client that writes its token line and
        // its job and closes (the PHP client's send()) lost the job over a unix socket: the token's
        // answer, written to the closed peer, failed (EPIPE) and destroyed the socket first.
        if (socket.destroyed || socket.writableEnded) {
          if (reply.close) next = lines.length // after a refused token, nothing
          continue
        }
        // A client that sends and does not read: its answers wait in the kernel, not here, and
        // nothing more is read from it until it reads them; one that has not for idleMs is cut.
        if (!write(reply.text)) {
          if (!paused) pause()
          await drained(socket, idleMs)
        }
        if (reply.close) {
          stopReading()
          next = lines.length // the lines after a refused token are not answered
        }
      }
      lines = []
      next = 0
      toStart = 0
      replies.clear()
      pendingBytes = 0
      busy = false
      if (ending || closing) return socket.end()
      if (paused) {
        paused = false
        // Read on at the next turn of the event loop, not within this one's reads (the answers'
        // uncork can drain the socket at once): other connections are served in between.
        setImmediate(() => { if (!paused && !ending) socket.resume() })
        if (partialBytes > 0) lineTimer ??= setTimeout(lineTooSlow, lineMs)
      }
    }

    // The answers written in one go (one callback and the promises it settles) are corked until
    // its end: the lines of a batch, on disk together, are answered in one write(2).
    function write (text) {
      if (!corked) {
        corked = true
        socket.cork()
        process.nextTick(uncork)
      }
      return socket.write(text)
    }

    function uncork () {
      corked = false
      socket.uncork()
    }

    async function handle (bytes, recorded) {
      if (refused) return { text: '', close: true } // never written: the connection ends before it
      const started = process.hrtime.bigint()
      let status = 500
      let id // a refused line's own job id, named in its answer (see failure)
      try {
        const body = parseLine(bytes)
        if (typeof body?.id === 'string' && ID.test(body.id)) id = body.id
        if (isTokenLine(body)) {
          if (!authorized(`Bearer ${body.token}`)) throw new UnauthorizedError('the token is not valid')
          authenticated = true
          status = 200
          return { text: '{"status":200}\n' }
        }
        if (!authenticated) throw new UnauthorizedError('the daemon has a token: send {"token":"<token>"} as the first line')
        const { job, created, state } = await scheduler.submit(body, recorded)
        status = created ? 202 : 200
        return { text: JSON.stringify({ status, id: job.id, state }) + '\n' }
      } catch (err) {
        const reply = failure(err, id)
        status = reply.status
        refused ||= reply.close
        return reply
      } finally {
        logHandoff(logger, { protocol: 'lines' }, status, started)
      }
    }

    // A refused line, answered as POST /v1/jobs answers the error, and with the job's id when the
    // line had one: a client on a kept connection can then tell its own answer from one another
    // request of its process left unread there.
    function failure (err, id) {
      const { error, body, retryAfter } = errorAnswer(err, logger)
      const answer = { status: error.statusCode, ...(id && { id }), ...body, ...(retryAfter && { retryAfter }) }
      return { status: error.statusCode, text: JSON.stringify(answer) + '\n', close: error.code === 'UNAUTHORIZED' }
    }

    socket.on('data', read)
    // The client's half-close: what it sent is answered, then the connection ends.
    socket.once('end', () => {
      if (partialBytes > 0) return refuse(new InvalidRequestError('the connection ended inside a line'))
      stopReading()
      answer()
    })
    read(first)
  }

  return {
    serve,
    // Shutdown: idle connections end now, busy ones after their answers (closeAll, listeners.js).
    closeIdle () {
      closing = true
      for (const c of connections) if (c.idle()) c.end()
    },
    destroyAll () {
      for (const c of connections) c.destroy()
    }
  }
}

// Resolves once the socket has drained or closed; not drained within `ms`, it is destroyed.
function drained (socket, ms) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      socket.off('drain', done)
      socket.off('close', done)
      resolve()
    }
    const timer = setTimeout(() => {
      socket.destroy()
      done()
    }, ms)
    socket.on('drain', done)
    socket.on('close', done)
  })
}

function parseLine (bytes) {
  let text
  try {
    text = strictUtf8.decode(bytes)
  } catch {
    throw new InvalidJsonError('the line is not valid UTF-8')
  }
  return parseJson(text, 'the line')
}

const isTokenLine = (body) => body !== null && typeof body === 'object' && !Array.isArray(body) &&
  typeof body.token === 'string' && Object.keys(body).length === 1

const tooLarge = () => new PayloadTooLargeError(`the line exceeds ${MAX_BODY_BYTES} bytes`)
