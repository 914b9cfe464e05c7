// HTTP/WebDAV backend (Apache httpd mod_dav and alike): PUT and GET, MKCOL for missing
// collections, atomic publish by WebDAV MOVE with an Overwrite header.
import { Readable } from 'node:stream'
import { pooledGet } from './http-get.js'
import { SMALL_FILE_BYTES, requestSink } from '../datapath.js'
import { createHttpClient, drain, getStream, putStream, readSmall, firstLine, statusError, encodePath } from './http-util.js'
import { RemoteExistsError, RemoteRejectedError } from '../errors.js'
import { createSmallPut } from './small-put.js'

// What tells that a file is still the same one (sent in If-Range): a strong ETag, else a
// Last-Modified that is a strong validator, at least a second before the answer's Date (RFC 9110
// 8.8.2.2, 13.1.5: a file changed twice in one second keeps its Last-Modified). null otherwise, and
// then a download is never resumed.
function validator (headers) {
  const etag = headers.etag
  if (typeof etag === 'string' && !etag.startsWith('W/')) return etag
  const modified = headers['last-modified']
  if (typeof modified !== 'string') return null
  return Date.parse(headers.date) - Date.parse(modified) >= 1000 ? modified : null
}

const SMALL_BODY = 64 * 1024
// A PROPFIND answer's resourcetype holding a collection, whatever the namespace prefix.
const COLLECTION = /<(?:[\w.-]+:)?resourcetype\b[^>]*>\s*<(?:[\w.-]+:)?collection\b/
const GET_REFUSED = new Set([403, 405, 501])

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
  // The PUT of a small file on a connection of its own pool, without node:http (small-put.js).
  const smallPut = base.protocol === 'http:' ? createSmallPut(base, target.timeouts) : null

  const urlFor = (remote) => new URL(encodePath(remote.slice(1)), base)

  // `res`: an answer of createHttpClient or putStream (its body a stream), or of smallPut (its
  // body read already, text()).
  async function fail (res, what) {
    const text = res.body ? await readSmall(res.body) : await res.text()
    return statusError(res.statusCode, `${what}: HTTP ${res.statusCode} ${firstLine(text.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ')) || ''}`.trim())
  }

  // `again`: a MKCOL answered 409 (RFC 4918 9.3.1: a collection above it is missing) means one we
  // had made or seen is gone since: forgotten, and the whole path made once more. Resolves true
  // if a collection on the way was taken from memory, not asked for now (see openWrite's 409).
  async function ensureCollections (remote, signal, again = true) {
    const parts = remote.split('/').slice(1, -1)
    let dir = ''
    let remembered = false
    for (const part of parts) {
      dir += '/' + part
      if (knownCollections.has(dir)) {
        remembered = true
        continue
      }
      const url = new URL(encodePath(dir.slice(1)) + '/', base)
      const res = await send(url, { method: 'MKCOL', signal, resend: true }) // a repeat answers 405
      // 201 created; 405 means it already exists. mod_dav answers 403 to a MKCOL that races
      // another one for the same new collection: asked again, it answers 405 once the other one
      // has made it; else a PROPFIND tells whether it exists now (a location may refuse PROPFIND).
      if (res.statusCode === 403) {
        await drain(res.body)
        const retry = await send(url, { method: 'MKCOL', signal, resend: true })
        await drain(retry.body)
        if (retry.statusCode !== 201 && retry.statusCode !== 405) {
          const check = await send(url, { method: 'PROPFIND', headers: { depth: '0' }, signal })
          await drain(check.body)
          if (check.statusCode !== 207) throw statusError(403, `MKCOL ${dir}/: HTTP 403`)
        }
      } else if (res.statusCode === 409 && again) {
        await drain(res.body)
        knownCollections.clear()
        return ensureCollections(remote, signal, false)
      } else if (res.statusCode !== 201 && res.statusCode !== 405) {
        throw await fail(res, `MKCOL ${dir}/`)
      } else {
        await drain(res.body)
      }
      if (knownCollections.size > 10000) knownCollections.clear()
      knownCollections.add(dir)
    }
    return remembered
  }

  // Whether `remote` is a file: its first byte given as a range (206 with Content-Range), or a
  // 416 with Content-Range (an empty file). A collection's listing, if any, ignores the range.
  async function isFile (remote, signal) {
    const res = await send(urlFor(remote), { headers: { range: 'bytes=0-0' }, signal })
    await dropBody(res)
    return (res.statusCode === 206 || res.statusCode === 416) && contentRangeSize(res.headers) !== null
  }

  // Whether `remote` is a collection (a directory), asked with PROPFIND; null when the server
  // will not say.
  async function isCollection (remote, signal) {
    const res = await send(urlFor(remote), { method: 'PROPFIND', headers: { depth: '0' }, signal })
    if (res.statusCode !== 207) {
      await drain(res.body)
      return null
    }
    return COLLECTION.test(await readSmall(res.body))
  }

  // Drained only when small, so that its connection is kept: a server that ignored the Range
  // may be sending the whole file.
  async function dropBody (res) {
    const length = res.headers['content-length']
    if (length !== undefined && Number(length) <= SMALL_BODY) await drain(res.body)
    else res.body.destroy()
  }

  let headOnly = false // see stat

  function statOf (res, what) {
    if (res.statusCode === 404) return null
    const version = validator(res.headers)
    const ranged = contentRangeSize(res.headers) // 206 "bytes 0-0/N", 416 "bytes */N"
    if (res.statusCode === 206 && ranged !== null) return { size: ranged, type: 'file', version }
    // Only an empty file cannot give its first byte (Apache's 416 has no Content-Range).
    if (res.statusCode === 416) return { size: ranged ?? 0, type: 'file', version }
    // 200: a HEAD, a GET whose Range was ignored, or an empty file.
    const length = res.headers['content-length']
    if (res.statusCode === 200) return { size: length === undefined ? null : Number(length), type: 'file', version }
    throw statusError(res.statusCode, `${what}: HTTP ${res.statusCode}`)
  }

  const discard = (body) => body.destroy()

  const move = (tmp, remote, overwrite, signal) => send(urlFor(tmp), {
    method: 'MOVE',
    headers: { destination: urlFor(remote).href, overwrite: overwrite ? 'T' : 'F' },
    signal,
    resend: true // a repeat is recognised in publish
  })

  return {
    type: 'http',
    atomic: target.atomic,
    // The server stores a PUT's body under a temp name of its own and renames it into place once
    // every byte arrived (Apache mod_dav_fs: `test/httpd-put.test.js`): small uploads publish with
    // the PUT itself (transfer.js).
    atomicPut: target.atomic !== false && target.atomicPut === true,
    tempSuffix: target.tempSuffix,
    confirmsWrittenSize: true, // a 2xx to a PUT with Content-Length (see transfer.js upload)

    // A GET of the first byte, not a HEAD: Apache answers HEAD of a missing or empty file without
    // Content-Length, and node's HTTP client then closes the keep-alive connection (node 20: it
    // decides before it knows the HEAD answer has no body); a new connection for every "exists?"
    // cost ~400 µs of CPU here against ~240. The Content-Range also tells an empty file's size.
    // A server that refuses the GET (an upload-only endpoint) is asked with HEAD from then on.
    async stat (remote, { signal } = {}) {
      if (!headOnly) {
        const res = await send(urlFor(remote), { headers: { range: 'bytes=0-0' }, signal })
        await dropBody(res)
        if (!GET_REFUSED.has(res.statusCode)) return statOf(res, `GET ${remote} (first byte)`)
        headOnly = true
      }
      const res = await send(urlFor(remote), { method: 'HEAD', signal })
      await drain(res.body)
      return statOf(res, `HEAD ${remote}`)
    },

    // Resuming (`offset` > 0 with the version of the first attempt) asks with If-Range: a server
    // whose file changed answers 200 with all of it, which `offset: 0` reports.
    async openRead (remote, { offset = 0, length, signal, ifVersion, pool } = {}) {
      const ranged = offset > 0 || length !== undefined
      const headers = ranged ? { range: `bytes=${offset}-${length === undefined ? '' : offset + length - 1}` } : {}
      if (offset > 0 && ifVersion) headers['if-range'] = ifVersion
      // The answer streamed: 206 to a range, or 200 with all of a file changed since (If-Range).
      const whole = (status) => status === 200 && offset > 0 && length === undefined
      const wanted = (status) => status === (ranged && !whole(status) ? 206 : 200)
      // Plain-http bodies read straight into the transfer's pool buffers (see http-get.js); others
      // (https) on a connection of their own too, not the pool of the target's small requests,
      // which streams to slow clients could otherwise fill.
      const timeouts = { idleMs: target.timeouts?.idleMs, connectMs: target.timeouts?.connectMs }
      const res = pool && base.protocol === 'http:'
        ? await pooledGet(urlFor(remote), { headers, signal, pool, zeroCopy: wanted, ...timeouts })
        : await getStream(urlFor(remote), { headers, signal, ...timeouts })
      const version = validator(res.headers)
      if (res.statusCode === 416 && length === undefined && offset > 0) {
        // Resumed at the very end: nothing left to read. Apache's 416 carries neither
        // Content-Range nor a validator; a stat tells size and version then.
        discard(res.body)
        const st = contentRangeSize(res.headers) === offset ? { size: offset, version } : await this.stat(remote, { signal })
        if (st?.size === offset) return { stream: Readable.from([]), size: offset, version: st.version ?? version, offset }
        // Shorter than the range's start: another file (a server that ignores If-Range answers so
        // rather than with all of it). Read whole, which the download takes as a restart.
        if (st) return this.openRead(remote, { signal, pool })
        throw statusError(416, `GET ${remote}: HTTP 416, the range starts at ${offset} and the file is gone`)
      }
      if (!wanted(res.statusCode)) throw await fail(res, `GET ${remote}`)
      // A 206 says which bytes it holds, and a server may send fewer than asked (RFC 9110 15.3.7):
      // where the body starts and the file's size come from its Content-Range when it has one.
      const held = res.statusCode === 206 ? /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(res.headers['content-range'] ?? '') : null
      const start = whole(res.statusCode) ? 0 : held ? Number(held[1]) : offset
      const received = res.headers['content-length']
      const size = length !== undefined ? null : held && held[2] !== '*' ? Number(held[2]) : received === undefined ? null : start + Number(received)
      return { stream: res.body, size, version, offset: start }
    },

    // `create`: only if the name is free (If-None-Match: *; a 412 is REMOTE_EXISTS).
    async openWrite (remote, { size, signal, pool, meter, create = false } = {}) {
      const remembered = await ensureCollections(remote, signal)
      const headers = { 'content-type': 'application/octet-stream' }
      if (size !== undefined) headers['content-length'] = String(size)
      if (create) headers['if-none-match'] = '*'
      const put = smallPut && size !== undefined && size <= SMALL_FILE_BYTES
        ? smallPut.put(urlFor(remote), headers, { signal })
        : putStream(urlFor(remote), { headers, signal, idleMs: target.timeouts?.idleMs, connectMs: target.timeouts?.connectMs, agent })
      const done = put.done.then(async (res) => {
        if (res.statusCode === 409 && remembered) {
          // RFC 4918 9.7.1: a collection on the way is missing, so one we had made or seen has
          // gone since. Forgotten, and made again by the next attempt. (With every collection on
          // the way just made or found, a 409 is the server's final word: the name is a
          // collection, "Cannot PUT to a collection", or the target's base is missing.)
          knownCollections.clear()
          const err = await fail(res, `PUT ${remote}`)
          throw new err.constructor(`${err.message} (a collection on the way is gone; made again at the next attempt)`, { details: err.details, retryable: true })
        }
        if (res.statusCode === 412 && create) {
          if (res.body) await drain(res.body)
          throw new RemoteExistsError(`${remote} exists and overwrite is false (PUT with If-None-Match: HTTP 412)`)
        }
        if (res.statusCode < 200 || res.statusCode >= 300) throw await fail(res, `PUT ${remote}`)
        if (res.body) drain(res.body, { ms: target.timeouts?.idleMs }) // not waited for: the upload is done
      })
      done.catch((err) => put.stream.destroy(err))
      return { stream: pool ? requestSink(put.stream, { pool, meter }) : put.stream, done }
    },

    // With `overwrite`, the MOVE is sent with Overwrite: F first: mod_dav answers a MOVE with
    // Overwrite: T onto a collection by deleting the whole collection, tree and all. Only a name
    // taken by something the server says is not a collection (PROPFIND; where PROPFIND is refused,
    // as by nginx's own dav module, a file's first byte) is then replaced; a collection, or a
    // server that will say neither, fails REMOTE_REJECTED and nothing is replaced.
    async publish (tmp, remote, { overwrite, size, signal } = {}) {
      let res = await move(tmp, remote, false, signal)
      if (res.statusCode === 412 && overwrite) {
        await drain(res.body)
        const collection = await isCollection(remote, signal) ?? (await isFile(remote, signal) ? false : null)
        if (collection !== false) {
          throw new RemoteRejectedError(`${remote} ${collection ? 'is a collection (a directory)' : 'exists, and the server says neither that it is a collection nor that it is a file (PROPFIND and a ranged GET refused)'}: not replaced`)
        }
        res = await move(tmp, remote, true, signal)
      }
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

    async close () {
      client.close()
      smallPut?.close()
    }
  }
}
