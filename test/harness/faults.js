// A small HTTP server that misbehaves on purpose, used *beside* the real servers to reach retry,
// cancel and crash paths deterministically. Content is a deterministic pattern (see helpers/files.js).
//   GET  /slow/<size>/<bytes per s>    the pattern, trickled
//   GET  /flaky/<key>/<fails>/<size>   503 for the first <fails> requests of <key>, then the pattern
//   GET  /status/<code>                answers that status with a short body
//   HEAD/PUT/DELETE /store/<name>      a tiny in-memory store; PUT /store/flaky-<n>-<name> fails n times
import http from 'node:http'
import { pipeline } from 'node:stream/promises'
import { Transform } from 'node:stream'
import { patternStream } from '../helpers/files.js'

function throttle (rate) {
  let sent = 0
  const start = Date.now()
  return new Transform({
    highWaterMark: 16384,
    transform (chunk, enc, cb) {
      const pieces = []
      for (let i = 0; i < chunk.length; i += 16384) pieces.push(chunk.subarray(i, i + 16384))
      const next = () => {
        const piece = pieces.shift()
        if (!piece) return cb()
        sent += piece.length
        this.push(piece)
        setTimeout(next, Math.max(0, (sent / rate) * 1000 - (Date.now() - start)))
      }
      next()
    }
  })
}

export async function startFaultServer () {
  const counts = new Map()
  const store = new Map()
  const sockets = new Set()
  const count = (key) => {
    const n = (counts.get(key) ?? 0) + 1
    counts.set(key, n)
    return n
  }
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x')
    const parts = url.pathname.split('/').filter(Boolean)
    try {
      if (parts[0] === 'slow' && req.method === 'GET') {
        const size = Number(parts[1])
        res.writeHead(200, { 'content-length': size })
        await pipeline(patternStream(size, size), throttle(Number(parts[2] ?? 1 << 20)), res)
      } else if (parts[0] === 'flaky' && req.method === 'GET') {
        const [, key, fails, size] = parts
        if (count(key) <= Number(fails)) {
          res.writeHead(503, { 'content-type': 'text/plain' }).end('try later')
        } else {
          res.writeHead(200, { 'content-length': Number(size) })
          await pipeline(patternStream(Number(size), Number(size)), res)
        }
      } else if (parts[0] === 'status') {
        res.writeHead(Number(parts[1]), { 'content-type': 'text/plain' }).end(`status ${parts[1]}`)
      } else if (parts[0] === 'store') {
        const name = parts.slice(1).join('/')
        if (req.method === 'HEAD') {
          res.writeHead(store.has(name) ? 200 : 404, store.has(name) ? { 'content-length': store.get(name) } : {}).end()
        } else if (req.method === 'PUT') {
          const m = /^flaky-(\d+)-/.exec(name)
          let size = 0
          for await (const c of req) size += c.length
          if (m && count(name) <= Number(m[1])) return res.writeHead(503).end('busy')
          store.set(name, size)
          res.writeHead(201).end()
        } else if (req.method === 'DELETE') {
          store.delete(name)
          res.writeHead(204).end()
        } else {
          res.writeHead(405).end()
        }
      } else {
        res.writeHead(404).end('no such fault')
      }
    } catch {
      res.destroy()
    }
  })
  server.on('connection', (s) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${server.address().port}/`
  return {
    url,
    counts,
    store,
    stop: () => new Promise((resolve) => {
      for (const s of sockets) s.destroy()
      server.close(resolve)
    })
  }
}
