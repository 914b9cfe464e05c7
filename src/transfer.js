// The data path of one attempt. Every byte goes through stream/promises.pipeline with
// backpressure and the job's AbortSignal: source → Meter (count, sha256, the target's own
// checksum) → sink. Downloads hash in their sink instead, after each write, so that the hash
// covers exactly the bytes on disk and a broken download can continue where it stopped.
import { Transform, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { createReadStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createHash } from 'node:crypto'
import { inDir, openDestDir, openedPath, openSource, openTemp, resolveDestination } from './paths.js'
import { BufferPool, SMALL_FILE_BYTES, UPLOAD_MIN_BUFFERS, backgroundSync, fileSource, release, sendSmallFile, writeAll } from './datapath.js'
import { Digest } from './digest.js'
import { hiddenName, uploadTempPath } from './backends/index.js'
import { linkNoReplace } from './publish-local.js'
import {
  LocalExistsError, PathNotAllowedError, RemoteExistsError, SizeMismatchError, Sha256MismatchError, ChecksumMismatchError, SidecarError,
  toSidecarError
} from './errors.js'

const CHUNK = 1 << 20
const SHUTDOWN_CLEANUP_MS = 1000 // a failed upload's temp name removed at a shutdown: at most this long
// When an upload's body fails (EPIPE, reset), how long to wait for the server's answer, which
// usually says why (a datanode's StandbyException, a quota) better than the broken pipe.
const SERVER_ANSWER_GRACE_MS = 1000
const EARLY_EXISTS_CHECK_BYTES = 1 << 20

// Errors after which the bytes of a partial download are suspect: start over rather than resume.
const CONTENT_ERRORS = [SizeMismatchError, Sha256MismatchError, ChecksumMismatchError]

// Counts the bytes and hashes them (digest.js: sha256 and the target's checksum, in the hashing
// thread when `size` is large; chunks of `pool` are held until hashed).
export class Meter extends Transform {
  constructor (onProgress, { start = 0, hash = true, sha256 = true, checksum = null, pool = null, size = null } = {}) {
    super({ highWaterMark: CHUNK })
    this.digester = hash ? new Digest({ checksum, pool, size, sha256 }) : null
    this.bytes = start
    this.onProgress = onProgress
  }

  // Also called directly by the sinks of datapath.js, which hash as they write.
  update (chunk) {
    this.digester?.update(chunk)
    this.bytes += chunk.length
    this.onProgress?.(this.bytes)
  }

  _transform (chunk, encoding, callback) {
    this.update(chunk)
    callback(null, chunk)
  }

  // { sha256, checksum } once every chunk is hashed.
  digest () {
    return this.digester.digest()
  }

  dispose () {
    this.digester?.dispose()
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

const tempPathOf = (backend, job) => backend.atomic === false ? job.remote : uploadTempPath(job.remote, job.id, backend.tempSuffix)

// A server whose own PUT is atomic (http target `atomicPut`) publishes an upload with the PUT
// itself, to the final name: one request instead of PUT and MOVE, and nothing to journal between
// them. Not with an expected sha256, which must match before anything is published; not for a
// large file that must not replace one (`overwrite` false), whose name is checked (If-None-Match)
// when the PUT starts, long before its rename.
const DIRECT_PUT_BYTES = 1 << 20
const putsDirect = (backend, job, size) => backend.atomicPut === true && !job.expectedSha256 && (job.overwrite === true || size <= DIRECT_PUT_BYTES)

// Upload: local file → temp name on the target → verify → publish under the final name.
// `sha256: false`: the job's digest is "none" (size and the target's checksum are still checked).
// `onPublishing`: a direct PUT's body is all sent; the server may publish it from now on.
// `recovered`: the job was found unfinished in the journal after a restart, so an earlier attempt
// may have run, as for a retry.
export async function upload (job, { backend, roots, signal, onStart, onProgress, onVerified, onPublishing, sha256: hashing = true, recovered = false }) {
  const laterAttempt = job.attempts > 1 || recovered
  const source = await openSource(job.local, roots)
  const direct = putsDirect(backend, job, source.size)
  const tmp = direct ? job.remote : tempPathOf(backend, job)
  let written = false
  let pool = null
  let meter = null
  let reader = null
  try {
    await onStart?.({ size: source.size })
    // Every backend's publish refuses an existing name (the contract suite checks it), so with a
    // temp name this is only an early way out: a round trip saved for a small file, a useless
    // upload spared for a large one. A direct PUT asks the server itself (If-None-Match).
    const earlyCheck = !direct && (tmp === job.remote || source.size > EARLY_EXISTS_CHECK_BYTES)
    if (!job.overwrite && earlyCheck && await existsEarly(backend, job.remote, signal)) {
      throw new RemoteExistsError(`${job.remote} exists on target ${JSON.stringify(job.target)} and overwrite is false`)
    }
    // A failed attempt may have left its temp file, still leased on HDFS to the writer that died;
    // removing it first lets this attempt create it afresh instead of waiting for lease recovery.
    if (laterAttempt && tmp !== job.remote) await backend.remove(tmp, { signal }).catch(() => {})
    const checksum = await backend.createChecksum?.({ signal }) ?? null
    // Read into reused pool buffers; the target's sink hashes each chunk and gives it back.
    pool = BufferPool.forTransfer({ minBuffers: UPLOAD_MIN_BUFFERS })
    meter = new Meter(onProgress, { checksum, pool, size: source.size, sha256: hashing })
    // Straight to the final name (a direct PUT, or a target without atomic publish): with overwrite
    // false the server itself refuses a name taken since the check above (If-None-Match on http).
    const sink = await backend.openWrite(tmp, { size: source.size, signal, blockSize: checksum?.blockSize, pool, meter, create: tmp === job.remote && !job.overwrite })
    written = true
    const piping = source.size <= SMALL_FILE_BYTES
      ? sendSmallFile(source.handle.fd, sink.stream, { pool, size: source.size, signal })
      : pipeline(reader = fileSource(source.handle.fd, { pool, size: source.size }), sink.stream, { signal })
    try {
      await sent(piping, sink.done, signal, direct ? onPublishing : null)
    } catch (err) {
      // A name taken in a later attempt of a direct PUT may be this job's own earlier PUT, stored
      // with its answer lost (a reset, a crash of ours): it is, if it holds the same bytes.
      if (direct && laterAttempt && err instanceof RemoteExistsError && !signal?.aborted) {
        const sha256 = await sha256Stream(createReadStream(null, { fd: source.handle.fd, start: 0, autoClose: false }))
        if (await remoteSha256(backend, job.remote, null, signal) === sha256) {
          return { bytes: source.size, size: source.size, sha256: hashing ? sha256 : null }
        }
      }
      throw err
    }
    const { sha256, checksum: ours } = await meter.digest()
    verify({ bytes: meter.bytes, size: source.size, sha256, expected: job.expectedSha256, what: job.local })
    // The server's 2xx to a body of declared length says it stored that many bytes (HTTP/1.1
    // framing); otherwise, and where the checksum check needs the status anyway, ask.
    const stored = checksum || !backend.confirmsWrittenSize ? await backend.stat(tmp, { signal }) : { size: meter.bytes }
    verify({ bytes: stored?.size, size: meter.bytes, what: `${job.target}:${tmp}` })
    const verified = checksum && await backend.verifyChecksum(tmp, ours, { signal, status: stored })
    if (tmp !== job.remote) {
      // A cancel that came while the digest was finished is one before the publishing phase.
      signal?.throwIfAborted()
      await onVerified?.({ bytes: meter.bytes, sha256 })
      // Verified and journaled as publishing: from here on a cancel is refused (see
      // Scheduler.cancel) and the publish runs to its end (bounded by idleMs), as the server may
      // already have done it.
      await backend.publish(tmp, job.remote, { overwrite: job.overwrite, size: meter.bytes })
    }
    written = false
    return { bytes: meter.bytes, size: source.size, sha256, ...(verified && { checksum: verified }) }
  } finally {
    meter?.dispose()
    pool?.close()
    if (reader) await release(reader) // no read left in flight on the descriptor
    await source.handle.close().catch(() => {})
    // At a shutdown briefly: the next start, a later attempt, removes it first anyway (above).
    if (written && tmp !== job.remote) {
      const shutdown = signal?.aborted && signal.reason === 'shutdown'
      await backend.remove(tmp, shutdown ? { signal: AbortSignal.timeout(SHUTDOWN_CLEANUP_MS) } : {}).catch(() => {})
    }
  }
}

// Waits for the request body to be sent (then calls `onPiped`) and the server's answer to it.
async function sent (piping, answer, signal, onPiped) {
  answer.catch(() => {}) // awaited below; not an unhandled rejection if the body fails first
  try {
    await piping
  } catch (err) {
    if (signal?.aborted) throw err
    const said = await Promise.race([answer.then(() => null, (e) => e), sleep(SERVER_ANSWER_GRACE_MS, null, { ref: false })])
    throw said instanceof SidecarError ? said : err
  }
  onPiped?.()
  await answer
}

// What survives of a broken download in this process: the hash of the bytes on disk (Node's Hash
// cannot be serialised; after a restart those bytes are hashed again from the file). Keyed by the
// job object, which the scheduler keeps for the job's lifetime.
const partials = new WeakMap()

// Download: target → hidden temp file beside the destination → fsync → verify → rename into
// place. A temp file left by an earlier attempt of the same job, of the same remote version, is
// continued from its end rather than started over. The temp file and the hash of what it holds are
// ready before the remote is opened, so its body is read at once (see getStream in http-util.js).
export async function download (job, { backend, roots, signal, onStart, onProgress, onVerified, sha256: hashing = true }) {
  const dest = await resolveDestination(job.local, roots)
  if (!job.overwrite && await lstatOrNull(dest.path)) {
    throw new LocalExistsError(`${job.local} exists and overwrite is false`)
  }
  const tmpName = downloadTempName(dest, job)
  const tmpPath = path.join(dest.dir, tmpName)
  const live = partials.get(job)
  partials.delete(job)
  let src, temp, state, failure, pool, status
  let published = false
  try {
    let offset = await resumePoint(job, tmpPath, live)
    temp = await openTemp(dest, tmpName, roots)
    await temp.handle.truncate(offset) // drops bytes written but never hashed
    // Bodies arrive in reused pool buffers (where the backend can), which PartFile gives back.
    pool = BufferPool.forTransfer()
    if (live && live.bytes === offset && live.version === job.remoteVersion && !live.digest.failed) {
      state = live
      state.digest.pool = pool
    } else {
      if (live) {
        live.digest.dispose()
        live.stale = true // never kept again, even if this attempt fails before it has a state
      }
      // A fresh download's digest waits for the size (it decides where to hash); a resumed one
      // hashes what is on disk first.
      // webhdfs: one GETFILESTATUS gives the checksum its block size and the open below the
      // file's size and version (2–5 ms less per download).
      status = backend.createChecksum ? await backend.stat(job.remote, { signal }) : undefined
      const checksum = await newChecksum(backend, job, signal, status)
      state = offset ? await hashPrefix(temp.handle, offset, job.remoteVersion, { checksum, pool, size: job.size, sha256: hashing, signal }) : await newState(temp.handle, checksum)
    }
    src = await backend.openRead(job.remote, { offset, signal, pool, status, ...(offset && { ifVersion: job.remoteVersion }) })
    if (offset && !continues(src, job, offset)) {
      if (src.offset !== 0) {
        src.stream.destroy()
        src = await backend.openRead(job.remote, { signal, pool })
      }
      offset = 0
      await temp.handle.truncate(0)
      state.digest?.dispose()
      state = await newState(temp.handle, await newChecksum(backend, job, signal))
    }
    state.digest ??= new Digest({ checksum: state.checksum, pool, size: src.size, sha256: hashing })
    state.version = src.version
    // Journaled (the remote's version) while the bytes already flow; see resumePoint.
    const started = onStart?.({ size: src.size, version: src.version ?? null, resumedFrom: offset })
    // The target's checksum is asked for while the body flows: HDFS takes tens of ms to answer,
    // which would otherwise be added to every download. If that fails, it is asked again after.
    const theirs = state.checksum && backend.fileChecksum(job.remote, { signal, status: src.status }).then((value) => ({ value }), () => null)
    await Promise.all([
      pipeline(src.stream, new Meter(onProgress, { start: offset, hash: false }), new PartFile(temp.handle, state, pool), { signal }),
      started
    ])
    state.digested = true
    // Continued from a temp file: the bytes before `offset` are of version job.remoteVersion, and
    // a target that reads by path (WebHDFS: its OPEN has no If-Range) may have served the rest
    // from a file replaced since it was checked (between that check and the OPEN, or a datanode's
    // retry). Asked again now: a file that changed is started over, its temp file dropped.
    if (offset > 0) {
      const now = await backend.stat(job.remote, { signal })
      if ((now?.version ?? null) !== job.remoteVersion) {
        throw new SizeMismatchError(`${job.target}:${job.remote} was replaced during the resumed download (version ${job.remoteVersion}, now ${now?.version ?? 'gone'}): started over`)
      }
    }
    const { sha256, checksum: ours } = await state.digest.digest()
    verify({ bytes: state.bytes, size: src.size, sha256, expected: job.expectedSha256, what: `${job.target}:${job.remote}` })
    const early = await theirs
    const verified = state.checksum && backend.compareChecksum(job.remote, ours,
      early ? early.value : await backend.fileChecksum(job.remote, { signal, status: src.status }))
    signal?.throwIfAborted() // as in upload()
    await onVerified?.({ bytes: state.bytes, sha256 })
    await publishDownload(temp.dir, tmpName, dest, job.overwrite)
    published = true
    return { bytes: state.bytes, size: src.size ?? state.bytes, sha256, ...(verified && { checksum: verified }) }
  } catch (err) {
    failure = err
    throw err
  } finally {
    pool?.close()
    src?.stream.destroy()
    const discard = !published && !keepForResume(failure, signal)
    await temp?.handle.close().catch(() => {})
    // Removed through its directory: that may have been moved (and a symlink put in its place)
    // during the transfer, and then tmpPath no longer names it.
    if (discard && temp) await fs.unlink(inDir(temp.dir, tmpName)).catch(() => {})
    await temp?.dir.close().catch(() => {})
    // The digest of what is on disk: kept for the next attempt while the file is, else dropped (a
    // finished one is dropped as a no-op). Before a new state exists, the file is as the last
    // attempt left it.
    const current = state ?? live
    if (!published && !discard && current && !current.digested && !current.stale && current.digest) partials.set(job, current)
    else current?.digest?.dispose()
  }
}

// The target's own checksum for this download, if it keeps one (webhdfs), for the remote's block
// size (from `status` when the caller has the remote's stat already).
function newChecksum (backend, job, signal, status) {
  return backend.createChecksum?.({ remote: job.remote, status, signal }) ?? null
}

// Where to continue: the end of the temp file of an earlier attempt (in this process, the end of
// what was hashed), if the version of the remote it came from is known.
async function resumePoint (job, tmpPath, live) {
  if (!job.remoteVersion) return 0
  const st = await lstatOrNull(tmpPath)
  if (!st?.isFile()) return 0
  if (live && live.ino === st.ino && live.bytes <= st.size) return live.bytes
  return st.size
}

// The stream opened at `offset` continues the bytes we have: same file version, range honoured.
function continues (src, job, offset) {
  return Boolean(src.version) && src.version === job.remoteVersion && (src.offset ?? offset) === offset &&
    (src.size === null || src.size === undefined || offset <= src.size)
}

function keepForResume (err, signal) {
  if (signal?.aborted) return signal.reason === 'shutdown'
  const e = toSidecarError(err)
  return e.retryable && !CONTENT_ERRORS.some((cls) => e instanceof cls)
}

// What a download's sink keeps of the bytes on disk: their digest (sha256 and the target's
// checksum), how many, and which file of which remote version they are.
async function newState (handle, checksum, version = null) {
  return { digest: null, checksum, bytes: 0, ino: (await handle.stat()).ino, version, digested: false, stale: false }
}

// Hashes the first `length` bytes of the temp file again: the state a resumed download continues.
// Gigabytes take seconds: a cancel or a shutdown (`signal`) stops it as it stops the transfer.
export async function hashPrefix (handle, length, version, { checksum, pool, size, sha256, signal }) {
  const state = await newState(handle, checksum, version)
  state.digest = new Digest({ checksum, pool, size: Math.max(size ?? 0, length), sha256 })
  const reader = fileSource(handle.fd, { pool, end: length })
  try {
    await pipeline(reader, new Writable({
      highWaterMark: 0,
      write (chunk, encoding, callback) {
        state.digest.update(chunk)
        pool.release(chunk)
        state.bytes += chunk.length
        callback()
      }
    }), { signal })
  } catch (err) {
    state.digest.dispose()
    throw err
  } finally {
    await release(reader) // the caller closes the descriptor
  }
  return state
}

// The sink of a download: writes each batch at its position and hashes it meanwhile (the disk
// and the CPU overlap). `state.bytes` counts only what was written, so that after a failure the
// state describes the file, unless a write failed after its bytes were hashed: then it is marked
// stale and a resume hashes the file again. fdatasync in the background (backgroundSync) and at
// the end.
class PartFile extends Writable {
  constructor (handle, state, pool = null) {
    super({ highWaterMark: CHUNK })
    this.handle = handle
    this.state = state
    this.pool = pool
    this.sync = backgroundSync(() => handle.datasync(), { start: state.bytes })
  }

  _write (chunk, encoding, callback) {
    this._writev([{ chunk }], callback)
  }

  _writev (entries, callback) {
    const { state } = this
    const buffers = entries.map((e) => e.chunk)
    const writing = writeAll(this.handle, buffers, state.bytes)
    let size = 0
    for (const b of buffers) {
      state.digest.update(b)
      size += b.length
    }
    const release = () => { for (const b of buffers) this.pool?.release(b) }
    writing.then(() => {
      release()
      state.bytes += size
      this.sync.wrote(state.bytes)
      callback()
    }, (err) => {
      release()
      state.stale = true
      callback(err)
    })
  }

  _final (callback) {
    Promise.resolve(this.sync.idle()).then(() => this.handle.datasync()).then(() => callback(), callback)
  }
}

// ".<name>.<job id>.part", cut to fit (hiddenName).
const downloadTempName = (dest, job) => hiddenName(dest.name, `.${job.id}.part`)

// The temp file of a download that ended without success (kept for a resume that will not come).
// A server may still be finishing the request we cut (a datanode creating the file, httpd writing
// it) when our removal arrives, and leave the temp name behind after it: once an upload has ended
// failed or cancelled (no attempt will use the name again), its temp name is removed again later.
// An upload sent by a direct PUT (its size as its last attempt found it) had no temp name.
const SWEEP_AFTER_MS = [1000, 5000, 20000]

export async function discardPartial (job, { roots, backend }) {
  partials.get(job)?.digest.dispose()
  partials.delete(job)
  if (job.direction === 'upload') {
    const tmp = tempPathOf(backend, job)
    if (tmp === job.remote || putsDirect(backend, job, job.size)) return
    const sweep = { backend, tmp, timers: [], due: Date.now() + SWEEP_AFTER_MS[0] }
    sweeps.add(sweep)
    for (const ms of SWEEP_AFTER_MS) {
      sweep.timers.push(setTimeout(() => {
        if (ms === SWEEP_AFTER_MS.at(-1)) sweeps.delete(sweep)
        backend.remove(tmp).catch(() => {})
      }, ms).unref())
    }
    return
  }
  const dest = await resolveDestination(job.local, roots)
  const dir = await openDestDir(dest, roots)
  await fs.unlink(inDir(dir, downloadTempName(dest, job))).catch(() => {})
  await dir.close()
}

// The removals of failed uploads' temp names still to come (discardPartial), which a stop would
// drop: run once more at the stop (the job is final, and nothing would remove them after), no
// sooner than the first was due (a server may store a cut PUT a moment after the cut), waiting at
// most `ms` for that and `ms` for the removals.
const sweeps = new Set()

export async function sweepNow (ms) {
  const pending = [...sweeps]
  sweeps.clear()
  if (!pending.length) return
  for (const { timers } of pending) for (const t of timers) clearTimeout(t)
  const wait = Math.min(ms, Math.max(...pending.map((p) => p.due)) - Date.now())
  if (wait > 0) await sleep(wait)
  const signal = AbortSignal.timeout(ms)
  await Promise.allSettled(pending.map(({ backend, tmp }) => backend.remove(tmp, { signal })))
}

// After a crash between "verified" (journaled with its size and sha256) and "succeeded", finish
// the publish instead of transferring again, which would fail on overwrite=false. Returns null
// when there is nothing to finish and the transfer must start over.
export async function finishPublish (job, { backend, roots, signal }) {
  const result = { bytes: job.bytes, size: job.bytes, sha256: job.sha256 }
  if (job.direction === 'download') {
    const dest = await resolveDestination(job.local, roots)
    const dir = await openDestDir(dest, roots)
    try {
      const tmpName = downloadTempName(dest, job)
      if ((await lstatOrNull(inDir(dir, tmpName)))?.size === job.bytes) {
        await publishDownload(dir, tmpName, dest, job.overwrite)
        return result
      }
    } finally {
      await dir.close()
    }
    const final = await lstatOrNull(dest.path)
    // Without a sha256 (digest "none") nothing proves the file is this job's: start over.
    if (job.sha256 && final?.isFile() && final.size === job.bytes && await sha256File(dest.path) === job.sha256) return result
    return null
  }
  const tmp = tempPathOf(backend, job)
  const temp = tmp === job.remote ? null : await backend.stat(tmp, { signal })
  if (temp?.size === job.bytes) {
    await backend.publish(tmp, job.remote, { overwrite: job.overwrite, size: job.bytes }) // not cancellable, see upload()
    return result
  }
  // No temp file: published before the crash, if what is under the final name is what we sent (the
  // same size is not enough: another writer's file, our own publish refused by it, looks the same).
  if (temp) return null
  const final = await backend.stat(job.remote, { signal })
  if (job.sha256 && final?.size === job.bytes && await remoteSha256(backend, job.remote, final, signal) === job.sha256) return result
  return null
}

async function sha256Stream (stream, signal) {
  const hash = createHash('sha256')
  await pipeline(stream, hash, { signal })
  return hash.digest('hex')
}

const sha256File = (file) => sha256Stream(createReadStream(file, { highWaterMark: CHUNK }))

// Read back through the target; only where a publish may have been done by an attempt whose answer
// was lost. `status`: its stat(), which webhdfs then does not ask for again.
async function remoteSha256 (backend, remote, status, signal) {
  const { stream } = await backend.openRead(remote, { signal, status })
  return sha256Stream(stream, signal)
}

async function lstatOrNull (p) {
  return fs.lstat(p).catch((err) => {
    if (err.code === 'ENOENT') return null
    throw err
  })
}

// The early "is the name taken?" of an upload with overwrite false (see upload): only a way out
// before the bytes are sent, as the publish (or the PUT's If-None-Match) refuses a taken name
// anyway. A server that will not say (an upload-only location: 403 to GET and to HEAD) is left to
// the publish; a transient failure, or a cancel, is the attempt's.
async function existsEarly (backend, remote, signal) {
  try {
    return await backend.stat(remote, { signal })
  } catch (err) {
    if (signal?.aborted || toSidecarError(err).retryable) throw err
    return null
  }
}

// Puts a download's temp file under its final name, through the destination's directory opened
// (and checked) before the transfer, and only while that directory is still where the
// destination's path leads: one moved away or swapped for a symlink during the transfer gets
// nothing published, neither in it nor where the symlink points.
async function publishDownload (dir, tmpName, dest, overwrite) {
  if (await openedPath(dir) !== dest.dir) {
    throw new PathNotAllowedError(`${dest.path}: its directory was moved or replaced during the transfer`)
  }
  const from = inDir(dir, tmpName)
  const to = inDir(dir, dest.name)
  if (overwrite) {
    await fs.rename(from, to)
  } else {
    try {
      await linkNoReplace(from, to) // fails if the name appeared meanwhile; never replaces it
    } catch (err) {
      if (err.code === 'EEXIST') throw new LocalExistsError(`${dest.path} exists and overwrite is false`)
      throw err
    }
  }
  await dir.sync()
}
