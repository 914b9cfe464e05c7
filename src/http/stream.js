// GET/HEAD /v1/stream/{target}/{path}: a file from a target straight to an HTTP client, with
// Range support, so PHP can fpassthru() it or hand it to nginx/Apache with an internal redirect.
// Same token and confinement as jobs: a configured target name, a normalised remote path.
import path from 'node:path'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { normalizeRemote } from '../paths.js'
import { BufferPool, CHUNK, requestSink } from '../datapath.js'
import { unknownTarget } from '../jobs.js'
import { RemoteNotFoundError, RangeNotSatisfiableError, SizeMismatchError, toSidecarError } from '../errors.js'

const TYPES = {
  '.txt': 'text/plain; charset=utf-8',
  '.csv': 'text/csv; charset=utf-8',
  '.json': 'application/json',
  '.xml': 'application/xml',
  '.pdf': 'application/pdf',
  '.zip': 'application/zip',
  '.gz': 'application/gzip',
  '.tar': 'application/x-tar',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
  '.mp3': 'audio/mpeg',
  '.parquet': 'application/vnd.apache.parquet'
}

export function contentType (remote) {
  return TYPES[path.posix.extname(remote).toLowerCase()] ?? 'application/octet-stream'
}

// One "bytes=" range (RFC 9110); several ranges or a malformed header mean the whole file.
export function parseRange (header, size) {
  if (!header || size === null) return null
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim())
  if (!m || (m[1] === '' && m[2] === '')) return null
  let start, end
  if (m[1] === '') {
    // RFC 9110 14.1.3: the last N > 0 bytes of an empty file are all of it (200), not a 416.
    if (size === 0 && Number(m[2]) > 0) return null
    start = Math.max(0, size - Number(m[2]))
    end = size - 1
  } else {
    start = Number(m[1])
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1)
  }
  if (start >= size || start > end || !Number.isSafeInteger(start)) return 'unsatisfiable'
  return { start, end }
}

// Passes exactly `length` bytes: what a source has beyond them (a file that grew after it was
// opened) is left out, as it would otherwise be read by a keep-alive client as the next answer;
// a source that ends short (a file that shrank) fails, and the connection is cut rather than the
// answer looking complete. Pool buffers (or views of them) that are not passed on are released.
function exactly (length, pool) {
  let sent = 0
  return new Transform({
    highWaterMark: CHUNK,
    transform (chunk, encoding, callback) {
      const room = length - sent
      if (chunk.length <= room) {
        sent += chunk.length
        return callback(null, chunk)
      }
      if (room === 0) {
        pool.release(chunk)
        return callback()
      }
      sent = length
      callback(null, chunk.subarray(0, room))
    },
    flush (callback) {
      callback(sent < length ? new SizeMismatchError(`the file ended after ${sent} of the ${length} bytes announced`) : null)
    }
  })
}

export function streamHandler ({ config, backends, metrics }) {
  return async (req, res) => {
    const { target } = req.params
    if (!Object.hasOwn(config.targets, target)) throw unknownTarget(target, config.targets)
    const remote = normalizeRemote('/' + [].concat(req.params.remote).join('/'))
    const backend = backends[target]
    const closed = new AbortController()
    // 'close' also follows a complete answer: only a client gone before that aborts the transfer.
    res.once('close', () => { if (!res.writableFinished) closed.abort() })
    const { signal } = closed
    try {
      const st = await backend.stat(remote, { signal })
      if (!st || st.type === 'dir') throw new RemoteNotFoundError(`${remote} does not exist on target ${JSON.stringify(target)}`)
      const range = parseRange(req.get('range'), st.size)
      if (range === 'unsatisfiable') {
        res.set('content-range', `bytes */${st.size}`)
        throw new RangeNotSatisfiableError(`range ${req.get('range')} is outside the file (${st.size} bytes)`)
      }
      const headers = {
        'content-type': contentType(remote),
        'accept-ranges': 'bytes',
        'x-content-type-options': 'nosniff'
      }
      if (range) {
        headers['content-range'] = `bytes ${range.start}-${range.end}/${st.size}`
        headers['content-length'] = range.end - range.start + 1
      } else if (st.size !== null) {
        headers['content-length'] = st.size
      }
      if (req.method === 'HEAD') return res.writeHead(range ? 206 : 200, headers).end()

      const pool = BufferPool.forTransfer()
      const counter = { bytes: 0, update (chunk) { this.bytes += chunk.length } } // no hash needed here
      try {
        const window = range ? { offset: range.start, length: range.end - range.start + 1 } : {}
        const src = await backend.openRead(remote, { ...window, signal, pool })
        // The file opened may be another one than the file stat()ed (replaced in between): the
        // whole of it is sent with its own length.
        if (!range && Number.isSafeInteger(src.size)) headers['content-length'] = src.size
        res.writeHead(range ? 206 : 200, headers)
        // A client that stops reading holds the file, the pool and the remote request: cut after the
        // target's idleMs without progress on its socket, as a stalled server is.
        const { idleMs } = config.targets[target].timeouts
        if (idleMs > 0) res.setTimeout(idleMs, () => res.destroy())
        const length = headers['content-length']
        const body = length === undefined ? [src.stream] : [src.stream, exactly(length, pool)]
        await pipeline(...body, requestSink(res, { pool, meter: counter }), { signal })
      } finally {
        pool.close()
        metrics.streamBytes(backend.type, counter.bytes)
      }
    } catch (err) {
      if (signal.aborted) return // the client went away: nobody to answer, and not our failure
      throw toSidecarError(err) // a target that cannot be reached is NETWORK_ERROR, as for a job
    }
  }
}
