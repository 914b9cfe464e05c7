// The data path of one attempt. Every byte goes through stream/promises.pipeline:
// source → Meter (byte count + sha256) → sink, with backpressure and the job's AbortSignal.
import { Transform } from 'node:stream'
import { pipeline, finished } from 'node:stream/promises'
import { createReadStream, createWriteStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createHash } from 'node:crypto'
import { openSource, openTemp, resolveDestination } from './paths.js'
import { uploadTempPath } from './backends/index.js'
import { syncDir } from './store.js'
import { LocalExistsError, RemoteExistsError, SizeMismatchError, Sha256MismatchError } from './errors.js'

const CHUNK = 1 << 20

export class Meter extends Transform {
  constructor (onProgress) {
    super({ highWaterMark: CHUNK })
    this.hash = createHash('sha256')
    this.bytes = 0
    this.onProgress = onProgress
  }

  _transform (chunk, encoding, callback) {
    this.hash.update(chunk)
    this.bytes += chunk.length
    this.onProgress?.(this.bytes)
    callback(null, chunk)
  }

  digest () {
    return this.hash.digest('hex')
  }
}

function verify ({ bytes, size, sha256, expected, what }) {
  if (size !== null && size !== undefined && bytes !== size) {
    throw new SizeMismatchError(`${what}: moved ${bytes} bytes, expected ${size}`)
  }
  if (expected && sha256 !== expected) {
    throw new Sha256MismatchError(`${what}: sha256 is ${sha256}, expected ${expected}`)
  }
}

// Upload: local file → temp name on the target → verify → publish under the final name.
export async function upload (job, { backend, roots, signal, onStart, onProgress, onVerified }) {
  const source = await openSource(job.local, roots)
  const tmp = backend.atomic === false ? job.remote : uploadTempPath(job.remote, job.id)
  let written = false
  try {
    onStart?.({ size: source.size })
    if (!job.overwrite && await backend.stat(job.remote, { signal })) {
      throw new RemoteExistsError(`${job.remote} exists on ${job.target} and overwrite is false`)
    }
    const meter = new Meter(onProgress)
    const sink = await backend.openWrite(tmp, { size: source.size, signal })
    written = true
    const read = createReadStream(null, { fd: source.handle, highWaterMark: CHUNK, start: 0 })
    await Promise.all([pipeline(read, meter, sink.stream, { signal }), sink.done])
    const sha256 = meter.digest()
    verify({ bytes: meter.bytes, size: source.size, sha256, expected: job.expectedSha256, what: job.local })
    const stored = await backend.stat(tmp, { signal })
    verify({ bytes: stored?.size, size: meter.bytes, what: `${job.target}:${tmp}` })
    await onVerified?.({ bytes: meter.bytes, sha256 })
    if (tmp !== job.remote) await backend.publish(tmp, job.remote, { overwrite: job.overwrite, signal })
    written = false
    return { bytes: meter.bytes, size: source.size, sha256 }
  } finally {
    await source.handle.close().catch(() => {}) // a no-op when the read stream closed it
    if (written && tmp !== job.remote) await backend.remove(tmp).catch(() => {})
  }
}

// Download: target → hidden temp file beside the destination → fsync → verify → rename into place.
export async function download (job, { backend, roots, signal, onStart, onProgress, onVerified }) {
  const dest = await resolveDestination(job.local, roots)
  if (!job.overwrite && await exists(dest.path)) {
    throw new LocalExistsError(`${job.local} exists and overwrite is false`)
  }
  const src = await backend.openRead(job.remote, { signal })
  onStart?.({ size: src.size })
  let temp
  try {
    temp = await openTemp(dest, downloadTempName(dest, job), roots)
  } catch (err) {
    src.stream.destroy()
    throw err
  }
  let published = false
  try {
    const meter = new Meter(onProgress)
    // The write stream owns the handle: it fsyncs (flush) and closes it before 'close'.
    const write = createWriteStream(null, { fd: temp.handle, highWaterMark: CHUNK, flush: true })
    await pipeline(src.stream, meter, write, { signal })
    await finished(write)
    const sha256 = meter.digest()
    verify({ bytes: meter.bytes, size: src.size, sha256, expected: job.expectedSha256, what: `${job.target}:${job.remote}` })
    await onVerified?.({ bytes: meter.bytes, sha256 })
    await publishLocal(temp.path, dest.path, job.overwrite)
    await syncDir(dest.dir)
    published = true
    return { bytes: meter.bytes, size: src.size ?? meter.bytes, sha256 }
  } finally {
    await temp.handle.close().catch(() => {})
    if (!published) await fs.unlink(temp.path).catch(() => {})
  }
}

const downloadTempName = (dest, job) => `.${dest.name}.${job.id}.part`

// After a crash between "verified" (journaled with its size and sha256) and "succeeded", finish
// the publish instead of transferring again, which would fail on overwrite=false. Returns null
// when there is nothing to finish and the transfer must start over.
export async function finishPublish (job, { backend, roots, signal }) {
  const result = { bytes: job.bytes, size: job.bytes, sha256: job.sha256 }
  if (job.direction === 'download') {
    const dest = await resolveDestination(job.local, roots)
    const tmp = path.join(dest.dir, downloadTempName(dest, job))
    if ((await lstatOrNull(tmp))?.size === job.bytes) {
      await publishLocal(tmp, dest.path, job.overwrite)
      await syncDir(dest.dir)
      return result
    }
    const final = await lstatOrNull(dest.path)
    if (final?.isFile() && final.size === job.bytes && await sha256File(dest.path) === job.sha256) return result
    return null
  }
  const tmp = backend.atomic === false ? job.remote : uploadTempPath(job.remote, job.id)
  const temp = tmp === job.remote ? null : await backend.stat(tmp, { signal })
  if (temp?.size === job.bytes) {
    await backend.publish(tmp, job.remote, { overwrite: job.overwrite, signal })
    return result
  }
  if (!temp && (await backend.stat(job.remote, { signal }))?.size === job.bytes) return result
  return null
}

async function sha256File (file) {
  const hash = createHash('sha256')
  await pipeline(createReadStream(file, { highWaterMark: CHUNK }), hash)
  return hash.digest('hex')
}

async function lstatOrNull (p) {
  return fs.lstat(p).catch((err) => {
    if (err.code === 'ENOENT') return null
    throw err
  })
}

async function exists (p) {
  try {
    await fs.lstat(p)
    return true
  } catch (err) {
    if (err.code === 'ENOENT') return false
    throw err
  }
}

async function publishLocal (from, to, overwrite) {
  if (overwrite) return fs.rename(from, to)
  try {
    await fs.link(from, to) // fails if the name appeared meanwhile; never replaces it
  } catch (err) {
    if (err.code === 'EEXIST') throw new LocalExistsError(`${to} exists and overwrite is false`)
    throw err
  }
  await fs.unlink(from)
}
