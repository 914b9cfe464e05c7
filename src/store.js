// Durable job store: an append-only journal of JSON lines.
// sync "fsync": a put resolves once its line is on disk (O_DSYNC writes, group commit: the puts
// that come while a write is in flight share the next one). sync "write": a put resolves once its
// line is written to the journal file, with one write(2) on this thread (no thread-pool hop); it is
// then in the page cache, safe from a crash or kill of the daemon but not from the host's, and an
// fdatasync in the background puts it on disk within syncIntervalMs. Every line carries the whole
// job record, so replay is "last line per id wins"; the journal is rewritten (compacted) at
// start-up and whenever it holds many more lines than live jobs. What is on disk is not kept in
// memory: for each live job the store holds where its last line is in the journal, and the
// compaction copies those lines from the old journal into the new one (a queued job holds ~0.6 KiB
// of the daemon's heap; ~1.0 when every record's JSON was kept).
import fs from 'node:fs/promises'
import { createReadStream, writeSync, ftruncateSync, fdatasyncSync, fstatSync, constants as C } from 'node:fs'
import path from 'node:path'
import { writeAll } from './datapath.js'

const JOURNAL = 'jobs.journal'
export const DEFER_MS = 200 // the longest a line nobody waits for is held back (README, Durability)
const WINDOW = 1024 * 1024 // what a compaction reads of the old journal at once

export async function openJobStore ({ dir, logger, compactMinLines = 10000, sync = 'fsync', syncIntervalMs = 50, ownThread = false, deferMs = DEFER_MS }) {
  await fs.mkdir(dir, { recursive: true, mode: 0o750 })
  const file = path.join(dir, JOURNAL)
  const records = new Map() // id -> serialized job record (the last one in the journal)
  let torn = 0
  try {
    for await (const line of journalLines(file)) {
      if (!line) continue
      let entry
      try {
        entry = JSON.parse(line)
      } catch {}
      if (entry?.op === 'put' && typeof entry.job?.id === 'string') records.set(entry.job.id, JSON.stringify(entry.job))
      else if (entry?.op === 'del' && typeof entry.id === 'string') records.delete(entry.id)
      else torn++ // a line cut short by a crash in the middle of a write; it was never acknowledged
    }
  } catch (err) {
    if (err.code !== 'ENOENT') throw err
  }
  if (torn) logger?.warn({ torn }, 'ignored unreadable journal lines')
  const store = new JobStore({ dir, file, records, logger, compactMinLines, sync, syncIntervalMs, ownThread, deferMs })
  await store.compact()
  return store
}

class JobStore {
  #pending = []
  #deferred = new Map() // id -> line not yet written (see put)
  #deferTimer = null
  #flushing = null
  #handle = null
  #linesSinceCompact = 0
  #closed = false
  #size = 0 // bytes in the journal, to cut off a batch written in part (see #flush)
  #torn = false // a cut failed: the journal may end in part of a line
  #syncTimer = null // "write" mode: the background fdatasync to come
  #replayed // the records found at open, for loaded()
  #touched = null // while a compaction runs: the jobs put or removed meanwhile
  #compactAsked = null // compact() was called: { promise, resolve, reject } of the rewrite to come
  #unacked = new Set() // jobs whose first record is not written yet: a compaction must not copy them
  #turn = null // ownThread: the write of this turn's puts, to come (see #append)

  constructor ({ dir, file, records, logger, compactMinLines, sync, syncIntervalMs, ownThread, deferMs }) {
    this.dir = dir
    this.file = file
    // id -> the job's last record: where its line is in the journal ({ at, length }, in bytes), or,
    // until that line is written, the record's JSON (a put in flight or held back; at start-up, all
    // the records replayed).
    this.records = records
    this.#replayed = [...records.values()]
    this.logger = logger
    this.compactMinLines = compactMinLines
    this.writeMode = sync === 'write'
    this.syncIntervalMs = syncIntervalMs
    this.ownThread = ownThread
    this.deferMs = deferMs
    // In "write" mode a batch is on disk once the background fdatasync has run.
    this.flags = C.O_WRONLY | C.O_APPEND | (this.writeMode ? 0 : C.O_DSYNC)
  }

  // The job records found in the journal at open, for the scheduler to rebuild its state at
  // start-up; once (they are not kept after).
  loaded () {
    const records = (this.#replayed ?? []).map((s) => JSON.parse(s))
    this.#replayed = null
    return records
  }

  // Resolves once the record is on disk; concurrent calls share one fdatasync. With
  // `durable: false` (transitions a crash may lose, like "running") the promise resolves at once and
  // the line waits, for at most deferMs (DEFER_MS), to ride along with the next durable batch; a
  // newer line for the same job replaces it. A small job thus costs one synced write less.
  put (record, options) {
    return this.putJson(record.id, JSON.stringify(record), options)
  }

  // put() of a record already in JSON (the hand-off thread gets the main thread's records so).
  putJson (id, json, { durable = true } = {}) {
    const created = !this.records.has(id)
    if (created && durable) this.#unacked.add(id) // until #written or #failed (createdId)
    this.records.set(id, json)
    this.#touched?.add(id)
    return this.#append(id, `{"op":"put","job":${json}}`, json, created ? id : null, durable)
  }

  // Not waited for on disk: a removal lost in a crash only brings back a finished job, pruned again.
  remove (id) {
    this.records.delete(id)
    this.#touched?.add(id)
    return this.#append(id, JSON.stringify({ op: 'del', id }), null, null, false)
  }

  // `json`: the record a put line carries (null for a removal), which the line's place in the
  // journal replaces in `records` once it is written.
  #append (id, line, json, createdId, durable) {
    if (this.#closed) return Promise.reject(new Error('job store is closed'))
    this.#deferred.delete(id) // superseded: replay keeps the last line per id
    if (!durable) {
      this.#defer({ id, line, json, createdId: null })
      return Promise.resolve()
    }
    // On a thread that has nothing else to do (`ownThread`: the hand-off thread), the puts of one
    // turn of the event loop share one write(2) on this thread, at the turn's end (synced in
    // "fsync" mode: a write on libuv's pool cost that thread a round trip to the pool longer than
    // the write; in "write" mode the main thread's records come many to a message).
    if (this.ownThread && !this.#flushing && this.#handle) {
      return new Promise((resolve, reject) => {
        this.#takeDeferred()
        this.#pending.push({ id, line, json, createdId, resolve, reject })
        this.#writeAtTurnEnd()
      })
    }
    // "write" mode, nothing else writing (a compaction, a reopen): written before this returns.
    if (this.writeMode && !this.#flushing && this.#handle) return this.#writeNow({ id, line, json, createdId, resolve () {}, reject () {} })
    return new Promise((resolve, reject) => {
      this.#takeDeferred()
      this.#pending.push({ id, line, json, createdId, resolve, reject })
      this.#flushing ??= this.#flush()
    })
  }

  #writeNow (entry) {
    this.#takeDeferred()
    this.#pending.push(entry)
    const err = this.#writePendingSync()
    return err ? Promise.reject(err) : Promise.resolve()
  }

  #writeAtTurnEnd () {
    this.#turn ??= setImmediate(() => this.#writeTurn())
  }

  #writeTurn () {
    this.#turn = null
    if (!this.#pending.length) return
    // A compaction or a reopen started meanwhile: its loop writes them after it.
    if (this.#flushing || !this.#handle) {
      this.#flushing ??= this.#flush()
      return
    }
    this.#writePendingSync()
  }

  // The pending lines with one write(2) on this thread; the error, if it failed (their puts reject).
  #writePendingSync () {
    const batch = this.#pending
    this.#pending = []
    const data = this.#batchData(batch)
    try {
      writeAllSync(this.#handle.fd, data)
    } catch (err) {
      this.#cutSync()
      this.#failed(batch, err)
      return err
    }
    this.#written(batch, data)
    return null
  }

  // The batch's lines; after a failed cut a newline first, so that the piece left stays a line of
  // its own (ignored as torn).
  #batchData (batch) {
    const text = batch.map((b) => b.line).join('\n') + '\n'
    return Buffer.from(this.#torn ? '\n' + text : text)
  }

  // The batch is in the journal (appended: it ends where the file ends). Each put line's place
  // replaces its record in memory, unless a newer record came meanwhile.
  #written (batch, data) {
    const end = this.#torn ? fstatSync(this.#handle.fd).size : this.#size + data.length
    let at = end - data.length + (data[0] === NEWLINE ? 1 : 0) // a torn journal's batch starts with one
    this.#size = end
    this.#torn = false
    for (const b of batch) {
      const length = Buffer.byteLength(b.line)
      if (b.createdId) this.#unacked.delete(b.createdId)
      if (b.json !== null && this.records.get(b.id) === b.json) this.records.set(b.id, { at, length })
      at += length + 1
      b.resolve()
    }
    this.#linesSinceCompact += batch.length
    if (this.writeMode) this.#syncTimer ??= setTimeout(() => this.#backgroundSync(), this.syncIntervalMs)
    // Compacted from #flush, so that the lines put meanwhile wait for the new journal.
    if (this.#compactDue()) this.#flushing ??= this.#flush()
  }

  // Not acknowledged, so a job created by this batch must not survive in a later compaction. A
  // later record of a job that exists (a state change, its end) is written again with the next
  // batch, held back as a deferred one, unless a newer one comes first: a failed write of a job's
  // "succeeded" would otherwise leave "running" on disk, and the job would run again after a
  // restart.
  #failed (batch, err) {
    for (const b of batch) {
      if (b.createdId) {
        this.records.delete(b.createdId)
        this.#unacked.delete(b.createdId)
      } else if (b.json !== null && this.records.get(b.id) === b.json && !this.#deferred.has(b.id)) {
        this.#defer(b)
      }
      b.reject(err)
    }
  }

  #backgroundSync () {
    this.#syncTimer = null
    const handle = this.#handle
    handle?.datasync().catch((err) => {
      // A failed fdatasync may have dropped the dirty pages (Linux reports it once): what it
      // covered can be lost in a power cut, as in "write" mode anyway; a crash still keeps it.
      if (handle === this.#handle) this.logger?.error({ err }, 'background fdatasync of the journal failed')
    })
  }

  // Holds a line back (nobody waits for it), written with the next batch or within deferMs.
  #defer (entry) {
    this.#deferred.set(entry.id, { ...entry, resolve () {}, reject () {} })
    this.#deferTimer ??= setTimeout(() => this.#flushDeferred(), this.deferMs).unref()
  }

  // Moves the deferred lines into the next batch.
  #takeDeferred () {
    clearTimeout(this.#deferTimer)
    this.#deferTimer = null
    for (const entry of this.#deferred.values()) this.#pending.push(entry)
    this.#deferred.clear()
  }

  #flushDeferred () {
    if (this.#closed) return
    this.#takeDeferred()
    if (!this.#pending.length) return
    if (this.ownThread) this.#writeAtTurnEnd()
    else this.#flushing ??= this.#flush()
  }

  async #flush () {
    try {
      while (this.#pending.length || this.#compactDue() || this.#compactAsked) {
        if (this.#compactAsked) {
          const asked = this.#compactAsked
          this.#compactAsked = null
          await this.#rewrite().then(asked.resolve, asked.reject)
        } else if (this.#compactDue()) {
          await this.#compactNow()
        }
        if (!this.#pending.length) continue
        const batch = this.#pending
        this.#pending = []
        const data = this.#batchData(batch)
        try {
          // Reopened if a compaction renamed the journal but could not open it again.
          if (!this.#handle) {
            this.#handle = await fs.open(this.file, this.flags, 0o640)
            this.#size = (await this.#handle.stat()).size
          }
          await writeAll(this.#handle, [data])
        } catch (err) {
          // A full disk writes part of the batch, then fails: cut that part off, or the next batch's
          // first line would be glued to it and lost, acknowledged or not.
          if (this.#handle) await this.#cut()
          this.#failed(batch, err)
          continue
        }
        this.#written(batch, data)
      }
    } finally {
      this.#flushing = null
    }
  }

  #compactDue () {
    return this.#linesSinceCompact > Math.max(this.compactMinLines, 2 * this.records.size)
  }

  // A failed compaction (EMFILE, ENOSPC, …) leaves the journal as it was: keep appending to it, and
  // try again after as many lines. Thrown from here it would end the daemon (an unhandled
  // rejection) and leave the lines queued meanwhile waiting for ever.
  async #compactNow () {
    await this.#rewrite().catch((err) => {
      this.logger?.error({ err }, 'journal compaction failed; appending to the journal as it is')
      this.#linesSinceCompact = 0
    })
  }

  async #cut () {
    try {
      await this.#handle.truncate(this.#size)
      await this.#handle.datasync()
    } catch (err) {
      this.logger?.error({ err }, 'cannot cut off a journal batch written in part')
      this.#torn = true
    }
  }

  // #cut on this thread ("write" mode, where the cut need not be synced either, and #writeTurn).
  #cutSync () {
    try {
      ftruncateSync(this.#handle.fd, this.#size)
      if (!this.writeMode) fdatasyncSync(this.#handle.fd)
    } catch (err) {
      this.logger?.error({ err }, 'cannot cut off a journal batch written in part')
      this.#torn = true
    }
  }

  // Rewrites the journal with one line per live job, after the write in flight and before the next
  // batch (waiting for the write loop to end could take for ever while puts keep coming); the puts
  // that come meanwhile wait for the new journal. Rejects if the rewrite fails.
  compact () {
    this.#compactAsked ??= Promise.withResolvers()
    const { promise } = this.#compactAsked
    this.#flushing ??= this.#flush()
    return promise
  }

  // The rewrite: temp file, fsync, rename, fsync the directory. Each job's last line is copied from
  // the old journal (or written from its record, if it is not there yet).
  async #rewrite () {
    // The rewrite holds every job's last record, deferred ones included (their JSON is in `records`).
    clearTimeout(this.#deferTimer)
    this.#deferTimer = null
    this.#deferred.clear()
    const tmp = `${this.file}.tmp`
    let renamed = false
    const ids = [] // each job written, and the place of its line in the new journal
    const places = []
    const out = await fs.open(tmp, 'w', 0o640)
    this.#touched = new Set() // from before the first record is read
    try {
      // Lines are copied into `buf` and written a WINDOW at a time.
      const buf = Buffer.allocUnsafe(2 * WINDOW)
      let used = 0
      let at = 0 // where `buf` starts in the new journal
      const flush = async () => {
        // Every byte, or an error: a short write (full disk) must not become a shorter journal.
        await writeAll(out, [buf.subarray(0, used)])
        at += used
        used = 0
      }
      // `copy(into, offset)` puts the line's `length` bytes there.
      const add = async (id, length, copy) => {
        if (used + length + 1 > buf.length) await flush()
        ids.push(id)
        places.push({ at: at + used, length })
        if (length + 1 > buf.length) { // a line longer than buf: written on its own
          const line = Buffer.allocUnsafe(length + 1)
          copy(line, 0)
          line[length] = NEWLINE
          await writeAll(out, [line])
          at += line.length
          return
        }
        copy(buf, used)
        buf[used + length] = NEWLINE
        used += length + 1
        if (used >= WINDOW) await flush()
      }
      const placed = []
      for (const [id, was] of this.records) {
        if (typeof was !== 'string') {
          placed.push([id, was])
          continue
        }
        // A new job's first record still on its way: written after the rewrite, by its own batch,
        // which may yet fail (the job is then refused, and must not be in the journal).
        if (this.#unacked.has(id)) continue
        const line = `{"op":"put","job":${was}}`
        await add(id, Buffer.byteLength(line), (into, offset) => into.write(line, offset))
      }
      if (placed.length) {
        // In the order they lie in the old journal, read a window at a time.
        placed.sort((a, b) => a[1].at - b[1].at)
        const old = await fs.open(this.file, 'r')
        try {
          let window = Buffer.allocUnsafe(WINDOW)
          let windowAt = 0
          let windowEnd = 0 // nothing read yet
          for (const [id, was] of placed) {
            if (was.at < windowAt || was.at + was.length > windowEnd) {
              if (was.length > window.length) window = Buffer.allocUnsafe(was.length)
              const { bytesRead } = await old.read(window, 0, window.length, was.at)
              if (bytesRead < was.length) throw new Error(`the journal ends before the record of job ${id}`)
              windowAt = was.at
              windowEnd = was.at + bytesRead
            }
            const from = was.at - windowAt
            await add(id, was.length, (into, offset) => window.copy(into, offset, from, from + was.length))
          }
        } finally {
          await old.close()
        }
      }
      if (used) await flush()
      await out.sync()
      await out.close()
      await fs.rename(tmp, this.file)
      renamed = true
      // The lines are now where the new journal has them; a job put or removed meanwhile keeps
      // what it has (its newer record, written to the new journal next; or nothing).
      const touched = this.#touched
      for (let i = 0; i < ids.length; i++) {
        if (!touched.has(ids[i])) this.records.set(ids[i], places[i])
      }
    } finally {
      this.#touched = null
      await out.close().catch(() => {})
      // A rewrite that failed (a full disk) must not keep the space it took from the journal.
      if (!renamed) await fs.unlink(tmp).catch(() => {})
    }
    // From here on the old handle writes to a file that has no name any more: never use it again.
    const old = this.#handle
    this.#handle = null
    await old?.close().catch(() => {})
    await syncDir(this.dir)
    // O_DSYNC ("fsync" mode): each batch is one write that returns when it is on disk (one
    // thread-pool hop, not two).
    const handle = await fs.open(this.file, this.flags, 0o640)
    try {
      this.#size = (await handle.stat()).size
    } catch (err) {
      await handle.close().catch(() => {})
      throw err // #flush opens it again (and stats it) before its next write
    }
    this.#handle = handle
    this.#torn = false
    this.#linesSinceCompact = 0
  }

  async close () {
    this.#takeDeferred()
    this.#flushing ??= this.#pending.length ? this.#flush() : null
    this.#closed = true
    while (this.#flushing) await this.#flushing // a compaction's end may start a flush of its own
    clearTimeout(this.#syncTimer)
    this.#syncTimer = null
    if (this.writeMode) await this.#handle?.datasync().catch((err) => this.logger?.error({ err }, 'fdatasync of the journal failed at close'))
    await this.#handle?.close()
    this.#handle = null
  }
}

const NEWLINE = 0x0a

// The journal's lines, split at "\n" only. (readline also ends a line at "\r", U+2028 and U+2029,
// which JSON.stringify leaves as they are: a job with one in a path or message was lost at the
// next start, or a piece of its line that parses, like `null`, stopped the start.)
async function * journalLines (file) {
  let rest = null
  for await (const chunk of createReadStream(file)) {
    const buf = rest ? Buffer.concat([rest, chunk]) : chunk
    let start = 0
    for (let nl = buf.indexOf(NEWLINE); nl !== -1; nl = buf.indexOf(NEWLINE, start)) {
      yield buf.toString('utf8', start, nl)
      start = nl + 1
    }
    rest = start < buf.length ? buf.subarray(start) : null
  }
  if (rest) yield rest.toString('utf8')
}

export async function syncDir (dir) {
  const handle = await fs.open(dir, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}

// Every byte or an error, as writeAll, on this thread.
function writeAllSync (fd, data) {
  for (let done = 0; done < data.length;) {
    const n = writeSync(fd, data, done)
    if (n <= 0) throw Object.assign(new Error('a file write made no progress'), { code: 'EIO' })
    done += n
  }
}
