// HTTP/WebDAV backend (Apache httpd mod_dav and alike): PUT and GET, MKCOL for missing
// collections, atomic publish by WebDAV MOVE with an Overwrite header.
import { Readable } from 'node:stream'
import { pooledGet } from './http-get.js'
import { requestSink } from '../datapath.js'
import { createHttpClient, drain, putStream, readSmall, firstLine, statusError, encodePath } from './http-util.js'

// What tells that a file is still the same one: a strong ETag, else Last-Modified (both valid in
// If-Range); null when the server sends neither, and then a download is never resumed.
function validator (headers) {
  const etag = headers.etag
  if (typeof etag === 'string' && !etag.startsWith('W/')) return etag
  return typeof headers['last-modified'] === 'string' ? headers['last-modified'] : null
}

function contentRangeSize (headers) {
  const m = /\/(\d+)$/.exec(headers['content-range'] ?? '')
  return m ? Number(m[1]) : null
}

export function createHttpBackend (target) {
  const base = new URL(target.url)
  const knownCollections = new Set() // collections we created or saw; PUT 409 clears it
  // Small requests and streamed PUTs share one keep-alive pool; downloads have their own sockets.
  const client = createHttpClient({ ...target.timeouts, maxSockets: 2 * (target.concurrency ?? 4) })
  const send = client.send
  const agent = client.agent(target.url)

  const urlFor = (remote) => new URL(encodePath(remote.slice(1)), base)

  async function fail (res, what) {
    const text = await readSmall(res.body)
    return statusError(res.statusCode, `${what}: HTTP ${res.statusCode} ${firstLine(text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ')) || ''}`.trim())
  }

  async function ensureCollections (remote, signal) {
    const parts = remote.split('/').slice(1, -1)
    let dir = ''
    for (const part of parts) {
      dir += '/' + part
      if (knownCollections.has(dir)) continue
      const url = new URL(encodePath(dir.slice(1)) + '/', base)
      const res = await send(url, { method: 'MKCOL', signal, resend: true }) // a repeat answers 405
      // 201 created; 405 means it already exists. mod_dav answers 403 to a MKCOL that races
      // another one for the same new collection: a PROPFIND tells whether it exists now.
      if (res.statusCode === 403) {
        await drain(res.body)
        const check = await send(url, { method: 'PROPFIND', headers: { depth: '0' }, signal })
        await drain(check.body)
        if (check.statusCode !== 207) throw statusError(403, `MKCOL ${dir}/: HTTP 403`)
      } else if (res.statusCode !== 201 && res.statusCode !== 405) {
        throw await fail(res, `MKCOL ${dir}/`)
      } else {
        await drain(res.body)
      }
      if (knownCollections.size > 10000) knownCollections.clear()
      knownCollections.add(dir)
    }
  }

  // Apache omits Content-Length on HEAD of an empty file; a one-byte range request tells the size.
  async function sizeByRange (remote, signal) {
    const res = await send(urlFor(remote), { headers: { range: 'bytes=0-0' }, signal })
    await drain(res.body)
    const m = /\/(\d+)$/.exec(res.headers['content-range'] ?? '')
    if (m) return Number(m[1])
    if (res.statusCode === 200 && res.headers['content-length'] !== undefined) return Number(res.headers['content-length'])
    return null
  }

  const discard = (body) => body.destroy()

  return {
    type: 'http',
    atomic: target.atomic,
    tempSuffix: target.tempSuffix,

    async stat (remote, { signal } = {}) {
      const res = await send(urlFor(remote), { method: 'HEAD', signal })
      await drain(res.body)
      if (res.statusCode === 404) return null
      if (res.statusCode >= 300) throw statusError(res.statusCode, `HEAD ${remote}: HTTP ${res.statusCode}`)
      const length = res.headers['content-length']
      const version = validator(res.headers)
      if (length !== undefined) return { size: Number(length), type: 'file', version }
      return { size: await sizeByRange(remote, signal), type: 'file', version }
    },

    // Resuming (`offset` > 0 with the version of the first attempt) asks with If-Range: a server
    // whose file changed answers 200 with all of it, which `offset: 0` reports.
    async openRead (remote, { offset = 0, length, signal, ifVersion, pool } = {}) {
      const ranged = offset > 0 || length !== undefined
      const headers = ranged ? { range: `bytes=${offset}-${length === undefined ? '' : offset + length - 1}` } : {}
      if (offset > 0 && ifVersion) headers['if-range'] = ifVersion
      // Plain-http bodies read straight into the transfer's pool buffers (see http-get.js).
      const res = pool && base.protocol === 'http:'
        ? await pooledGet(urlFor(remote), { headers, signal, pool, idleMs: target.timeouts?.idleMs })
        : await send(urlFor(remote), { headers, signal })
      const version = validator(res.headers)
      if (res.statusCode === 416 && length === undefined && offset > 0) {
        // Resumed at the very end: nothing left to read. Apache's 416 carries neither
        // Content-Range nor a validator; a HEAD tells size and version then.
        discard(res.body)
        const st = contentRangeSize(res.headers) === offset ? { size: offset, version } : await this.stat(remote, { signal })
        if (st?.size === offset) return { stream: Readable.from([]), size: offset, version: st.version ?? version, offset }
        throw statusError(416, `GET ${remote}: HTTP 416, the range starts at ${offset} and the file has ${st?.size ?? 'no'} bytes`)
      }
      const whole = res.statusCode === 200 && offset > 0 && length === undefined
      if (res.statusCode !== (ranged && !whole ? 206 : 200)) throw await fail(res, `GET ${remote}`)
      const start = whole ? 0 : offset
      const received = res.headers['content-length']
      return { stream: res.body, size: length !== undefined || received === undefined ? null : start + Number(received), version, offset: start }
    },

    async openWrite (remote, { size, signal, pool, meter } = {}) {
      await ensureCollections(remote, signal)
      const headers = { 'content-type': 'application/octet-stream' }
      if (size !== undefined) headers['content-length'] = String(size)
      const put = putStream(urlFor(remote), { headers, signal, idleMs: target.timeouts?.idleMs, agent })
      const done = put.done.then(async (res) => {
        if (res.statusCode === 409) knownCollections.clear() // a collection vanished under us
        if (res.statusCode < 200 || res.statusCode >= 300) throw await fail(res, `PUT ${remote}`)
        res.body.resume()
      })
      done.catch((err) => put.stream.destroy(err))
      return { stream: pool ? requestSink(put.stream, { pool, meter }) : put.stream, done }
    },

    async publish (tmp, remote, { overwrite, size, signal } = {}) {
      const res = await send(urlFor(tmp), {
        method: 'MOVE',
        headers: { destination: urlFor(remote).href, overwrite: overwrite ? 'T' : 'F' },
        signal,
        resend: true // a repeat is recognised below
      })
      // A MOVE whose answer was lost, sent again (here or by a later attempt), finds its source
      // gone: the temp name is this job's alone, so a destination of our size means the first one
      // was done (as webhdfs RENAME).
      if (res.statusCode === 404 && size !== undefined) {
        await drain(res.body)
        if ((await this.stat(remote, { signal }))?.size === size) return
        throw statusError(404, `MOVE to ${remote}: HTTP 404, and ${remote} is not there`)
      }
      if (res.statusCode !== 201 && res.statusCode !== 204) throw await fail(res, `MOVE to ${remote}`)
      await drain(res.body)
    },

    async remove (remote, { signal } = {}) {
      const res = await send(urlFor(remote), { method: 'DELETE', signal })
      await drain(res.body)
      if (res.statusCode >= 300 && res.statusCode !== 404) throw statusError(res.statusCode, `DELETE ${remote}: HTTP ${res.statusCode}`)
    },

    async close () { client.close() }
  }
}
