// Test harness: a fault-injecting TCP proxy in front of a real server (a namenode, a datanode,
// httpd). It forwards bytes both ways until told to misbehave, per connection:
//
//   const proxy = await startTcpProxy({ target: '127.0.0.1:9870' })
//   proxy.url                                 // 'http://127.0.0.1:PORT'
//   proxy.fault({ resetAfter: 3 << 20 })      // RST the client after 3 MiB from the server
//   proxy.fault({ stallAfter: 1 << 20 })      // stop forwarding after 1 MiB; sockets stay open
//   proxy.fault({ rate: 2 << 20 })            // trickle at 2 MiB/s
//   proxy.fault({ corruptAt: 1000, direction: 'up' })        // flip one byte the client sends
//   proxy.fault({ status: 503, connections: 3 })             // answer 503 three times, then pass
//   proxy.fault({ ..., connections: 1, match: /op=OPEN/ })   // once, on a connection with such a request
//   proxy.fault(null)                         // behave again
//   await proxy.refuse()                      // a crash: open connections reset, new ones refused
//   await proxy.accept()                      // back, on the same port
//   proxy.requests                            // request heads seen: [{ line, head }]
//
// Faults count bytes in the `direction` they watch: 'down' (server → client, the default) or
// 'up'. `match` tests request heads (HTTP only) and the fault counts from the first matching one,
// also on a keep-alive connection. `rewrite: [[from, to]]` replaces strings of equal length in
// everything the server sends: a namenode proxy can point the Locations it hands out at a second
// proxy in front of the datanode (five-digit ports on both sides, so Content-Length stays right).
// `status` answers the request itself, as a failing gateway would: the status line, a short text
// body (`body`) and `Connection: close`, then a half-close; nothing reaches the server and what the
// client still sends is read and dropped (`stats.answered` counts these answers).
// `delayMs` (an option of startTcpProxy) holds every chunk that many ms in each direction, in
// order and without limiting the rate, and the upstream connect by one round trip (as a TCP
// handshake over such a path would): `delayMs: 5` puts the server 10 ms RTT away, where the
// kernel has no netem. Faults do not apply to a delayed proxy.
// Stop with `await proxy.stop()`.
import net from 'node:net'
import { STATUS_CODES } from 'node:http'

const REQUEST_LINE = /(?:^|\r\n)((?:GET|PUT|POST|DELETE|HEAD|MKCOL|MOVE|OPTIONS) \S+ HTTP\/1\.[01])\r\n/g

export async function startTcpProxy ({ target, rewrite = [], delayMs = 0 }) {
  const colon = typeof target === 'number' ? -1 : target.lastIndexOf(':')
  const [host, port] = colon < 0 ? ['127.0.0.1', Number(target)] : [target.slice(0, colon), Number(target.slice(colon + 1))]
  for (const [from, to] of rewrite) {
    if (Buffer.byteLength(from) !== Buffer.byteLength(to)) throw new Error(`tcp-proxy: rewrite ${from} → ${to} changes the length`)
  }
  const sockets = new Set()
  const requests = []
  let plan = null // the fault to apply to the next connections
  let server
  let listenPort = 0
  const stats = { connections: 0, faulted: 0, answered: 0 }

  function listen () {
    server = net.createServer(onConnection)
    return new Promise((resolve, reject) => {
      server.once('error', reject)
      server.listen(listenPort, '127.0.0.1', () => {
        listenPort = server.address().port
        resolve()
      })
    })
  }

  function track (s) {
    sockets.add(s)
    s.once('close', () => sockets.delete(s))
    s.on('error', () => {})
  }

  function onConnection (client) {
    stats.connections++
    track(client)
    if (delayMs > 0) return delayed(client)
    client.pause()
    const upstream = net.connect({ host, port })
    track(upstream)
    const conn = { fault: null, heads: '', skip: 0, stalled: false, answered: false }
    if (!plan?.match) takeFault(conn)
    upstream.once('connect', () => client.resume())
    pump(client, upstream, 'up', conn)
    pump(upstream, client, 'down', conn, rewrite.length ? rewriter() : null)
  }

  // Each chunk (and the end) leaves delayMs after it came: timers of one duration fire in order.
  function delayed (client) {
    client.pause()
    setTimeout(() => {
      const upstream = net.connect({ host, port })
      track(upstream)
      upstream.once('connect', () => client.resume())
      for (const [from, to] of [[client, upstream], [upstream, client]]) {
        from.on('data', (data) => setTimeout(() => { if (!to.destroyed) to.write(data) }, delayMs))
        from.once('end', () => setTimeout(() => { if (!to.destroyed) to.end() }, delayMs))
        from.once('close', (hadError) => { if (hadError) setTimeout(() => to.destroy(), delayMs) })
      }
    }, 2 * delayMs)
  }

  function takeFault (conn) {
    if (!plan) return
    conn.fault = { ...plan, seen: 0, start: Date.now() }
    stats.faulted++
    if (plan.connections !== undefined && --plan.connections <= 0) plan = null
  }

  // Records each request head; a `match` fault is taken by the connection at the first request
  // it matches (on a keep-alive connection, not necessarily the first request), counting from there.
  // A request body of declared length is skipped, so that a request sent right after it on the
  // same connection (a MOVE after its PUT) is found even though it follows no CRLF.
  function noteRequests (conn, chunk) {
    let text = chunk.toString('latin1')
    if (conn.skip > 0) {
      const n = Math.min(conn.skip, text.length)
      conn.skip -= n
      text = text.slice(n)
    }
    conn.heads = (conn.heads + text).slice(-65536)
    for (;;) {
      REQUEST_LINE.lastIndex = 0
      const m = REQUEST_LINE.exec(conn.heads)
      if (!m) return
      const end = conn.heads.indexOf('\r\n\r\n', m.index)
      if (end < 0) return
      const head = conn.heads.slice(m.index, end).replace(/^\r\n/, '')
      requests.push({ line: m[1], head })
      if (!conn.fault && plan?.match?.test(head)) takeFault(conn)
      conn.heads = conn.heads.slice(end + 4)
      const length = /\r\ncontent-length:[ \t]*(\d+)/i.exec(head)
      if (length) {
        const body = Number(length[1])
        const here = Math.min(body, conn.heads.length)
        conn.heads = conn.heads.slice(here)
        conn.skip = body - here
      }
    }
  }

  // Moves bytes from `from` to `to` in order, applying the connection's fault in this direction.
  // When `from` ends or breaks, `to` is ended after what is still queued (unless stalled).
  function pump (from, to, direction, conn, transform) {
    let busy = Promise.resolve()
    let flushTimer = null
    from.on('data', (data) => {
      if (direction === 'up') noteRequests(conn, data)
      from.pause()
      clearTimeout(flushTimer)
      busy = busy.then(() => deliver(to, transform ? transform(data) : data, direction, conn, from)).then(() => {
        if (!from.destroyed && !conn.stalled) from.resume()
        // A held-back tail with nothing after it was not the start of a match after all.
        if (transform) flushTimer = setTimeout(() => { busy = busy.then(() => deliver(to, transform(null), direction, conn, from)) }, 20)
      }, () => from.destroy())
    })
    let closed = false
    const close = (hadError) => {
      if (closed) return
      closed = true
      clearTimeout(flushTimer)
      busy.then(async () => {
        const tail = transform?.(null)
        if (tail?.length) await write(to, tail)
        if (conn.stalled || to.destroyed) return
        if (hadError) to.resetAndDestroy()
        else to.end()
      })
    }
    from.once('end', () => close(false))
    from.once('close', (hadError) => close(hadError))
  }

  async function deliver (to, data, direction, conn, from) {
    const f = conn.fault
    if (f?.status !== undefined) {
      if (direction === 'up' && !conn.answered) answer(from, to, conn, f)
      if (conn.answered) return
    }
    if (!f || (f.direction ?? 'down') !== direction || conn.stalled) return write(to, data)
    if (f.corruptAt !== undefined && f.corruptAt >= f.seen && f.corruptAt < f.seen + data.length) {
      data = Buffer.from(data)
      data[f.corruptAt - f.seen] ^= 0xff
    }
    if (f.resetAfter !== undefined && f.seen + data.length > f.resetAfter) {
      await write(to, data.subarray(0, Math.max(0, f.resetAfter - f.seen)))
      f.seen = f.resetAfter
      conn.stalled = true
      const client = direction === 'down' ? to : from
      const server = direction === 'down' ? from : to
      setImmediate(() => { client.resetAndDestroy(); server.destroy() })
      return
    }
    if (f.stallAfter !== undefined && f.seen + data.length > f.stallAfter) {
      await write(to, data.subarray(0, Math.max(0, f.stallAfter - f.seen)))
      f.seen = f.stallAfter
      conn.stalled = true // nothing more moves; the sockets stay open until someone times out
      return
    }
    if (f.rate) {
      for (let i = 0; i < data.length; i += 16384) {
        const piece = data.subarray(i, i + 16384)
        f.seen += piece.length
        await write(to, piece)
        const due = f.start + (f.seen / f.rate) * 1000
        if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()))
        if (to.destroyed) return
      }
      return
    }
    f.seen += data.length
    return write(to, data)
  }

  // Answers the client's request with `f.status` instead of the server (see `status` above).
  function answer (client, server, conn, f) {
    conn.answered = true
    stats.answered++
    const body = f.body ?? `${f.status} from tcp-proxy\n`
    client.end(`HTTP/1.1 ${f.status} ${STATUS_CODES[f.status] ?? 'Status'}\r\ncontent-type: text/plain\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
    server.destroy()
    // A client that never closes its side is dropped after a while.
    setTimeout(() => client.destroy(), 5000).unref()
  }

  function write (to, data) {
    if (!data.length || to.destroyed) return
    return new Promise((resolve) => {
      if (to.write(data)) resolve()
      else {
        const done = () => { to.off('drain', done); to.off('close', done); resolve() }
        to.on('drain', done)
        to.on('close', done)
      }
    })
  }

  // Replaces equal-length strings across chunk boundaries: holds back an end of a chunk that may be
  // the start of a match until more bytes come; the pump flushes it if none come soon.
  function rewriter () {
    const pairs = rewrite.map(([a, b]) => [Buffer.from(a), Buffer.from(b)])
    let tail = Buffer.alloc(0)
    return (chunk) => {
      if (chunk === null) {
        const rest = tail
        tail = Buffer.alloc(0)
        return rest
      }
      const buf = Buffer.concat([tail, chunk])
      for (const [a, b] of pairs) {
        for (let i = buf.indexOf(a); i >= 0; i = buf.indexOf(a, i + a.length)) b.copy(buf, i)
      }
      let keep = 0
      for (const [a] of pairs) {
        for (let n = Math.min(a.length - 1, buf.length); n > keep; n--) {
          if (buf.subarray(buf.length - n).equals(a.subarray(0, n))) { keep = n; break }
        }
      }
      tail = Buffer.from(buf.subarray(buf.length - keep))
      return buf.subarray(0, buf.length - keep)
    }
  }

  await listen()

  return {
    get port () { return listenPort },
    get url () { return `http://127.0.0.1:${listenPort}` },
    get address () { return `127.0.0.1:${listenPort}` },
    requests,
    stats,
    fault (f) { plan = f ? { ...f } : null },
    // Drops every open connection (RST), e.g. to cut a transfer at a moment of the test's choosing.
    resetAll () { for (const s of sockets) s.resetAndDestroy?.() ?? s.destroy() },
    // A crash as clients see it: open connections are reset and new ones refused until accept().
    async refuse () {
      server.close() // stops listening at once; its callback would wait for open connections
      for (const s of sockets) s.resetAndDestroy?.() ?? s.destroy()
    },
    async accept () { await listen() },
    async stop () {
      for (const s of sockets) s.destroy()
      if (server.listening) await new Promise((resolve) => server.close(() => resolve()))
    }
  }
}

// Proxies in front of every namenode and datanode of a MiniDFSCluster (see hdfs.js): the namenode
// proxies rewrite the datanode addresses in their answers (Location) to the datanode proxies, so
// every byte of a WebHDFS transfer passes a proxy that can be told to misbehave.
export async function startHdfsProxies (hdfs) {
  const datanodes = await Promise.all(hdfs.datanodes.map((addr) => startTcpProxy({ target: addr })))
  const rewrite = hdfs.datanodes.map((addr, i) => [addr, datanodes[i].address])
  const namenodes = await Promise.all(hdfs.namenodes.map((url) => startTcpProxy({ target: new URL(url).host, rewrite })))
  return {
    namenodes,
    datanodes,
    urls: namenodes.map((p) => p.url),
    requests: () => [...namenodes, ...datanodes].flatMap((p) => p.requests),
    stop: () => Promise.all([...namenodes, ...datanodes].map((p) => p.stop()))
  }
}
