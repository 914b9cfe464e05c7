// Durable job store: an append-only journal of JSON lines with group commit.
// A job is acknowledged only after the line that records it is fdatasync'd. Every line carries the
// whole job record, so replay is "last line per id wins"; the journal is rewritten (compacted) at
// start-up and whenever it holds many more lines than live jobs.
import fs from 'node:fs/promises'
import { createReadStream, constants as C } from 'node:fs'
import readline from 'node:readline'
import path from 'node:path'
import { writeAll } from './datapath.js'

const JOURNAL = 'jobs.journal'
const DEFER_MS = 200

export async function openJobStore ({ dir, logger, compactMinLines = 10000 }) {
  await fs.mkdir(dir, { recursive: true, mode: 0o750 })
  const file = path.join(dir, JOURNAL)
  const records = new Map() // id -> serialized job record (the last one written)
  let torn = 0
  try {
    const lines = readline.createInterface({ input: createReadStream(file), crlfDelay: Infinity })
    for await (const line of lines) {
      if (!line) continue
      let entry
      try {
        entry = JSON.parse(line)
      } catch {
        torn++ // a line cut short by a crash in the middle of a write; it was never acknowledged
        continue
      }
      if (entry.op === 'put') records.set(entry.job.id, JSON.stringify(entry.job))
      else if (entry.op === 'del') records.delete(entry.id)
    }
  } catch (err) {
    if (err.code !== 'ENOENT') throw err
  }
  if (torn) logger?.warn({ torn }, 'ignored unreadable journal lines')
  const store = new JobStore({ dir, file, records, logger, compactMinLines })
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

  constructor ({ dir, file, records, logger, compactMinLines }) {
    this.dir = dir
    this.file = file
    this.records = records
    this.logger = logger
    this.compactMinLines = compactMinLines
  }

  // Replayed job records, for the scheduler to rebuild its state at start-up.
  loaded () {
    return [...this.records.values()].map((s) => JSON.parse(s))
  }

  // Resolves once the record is on disk; concurrent calls share one fdatasync. With
  // `durable: false` (transitions a crash may lose, like "running") the promise resolves at once and
  // the line waits, for at most DEFER_MS, to ride along with the next durable batch; a newer line
  // for the same job replaces it. A small job thus costs one synced write less.
  put (record, { durable = true } = {}) {
    const line = JSON.stringify(record)
    const created = !this.records.has(record.id)
    this.records.set(record.id, line)
    return this.#append(record.id, `{"op":"put","job":${line}}`, created ? record.id : null, durable)
  }

  // Not waited for on disk: a removal lost in a crash only brings back a finished job, pruned again.
  remove (id) {
    this.records.delete(id)
    return this.#append(id, JSON.stringify({ op: 'del', id }), null, false)
  }

  #append (id, line, createdId, durable) {
    if (this.#closed) return Promise.reject(new Error('job store is closed'))
    this.#deferred.delete(id) // superseded: replay keeps the last line per id
    if (!durable) {
      this.#deferred.set(id, line)
      this.#deferTimer ??= setTimeout(() => this.#flushDeferred(), DEFER_MS).unref()
      return Promise.resolve()
    }
    return new Promise((resolve, reject) => {
      this.#takeDeferred()
      this.#pending.push({ line, createdId, resolve, reject })
      this.#flushing ??= this.#flush()
    })
  }

  // Moves the deferred lines into the next batch.
  #takeDeferred () {
    clearTimeout(this.#deferTimer)
    this.#deferTimer = null
    for (const line of this.#deferred.values()) this.#pending.push({ line, createdId: null, resolve () {}, reject () {} })
    this.#deferred.clear()
  }

  #flushDeferred () {
    if (this.#closed) return
    this.#takeDeferred()
    if (this.#pending.length) this.#flushing ??= this.#flush()
  }

  async #flush () {
    try {
      while (this.#pending.length) {
        const batch = this.#pending
        this.#pending = []
        const text = batch.map((b) => b.line).join('\n') + '\n'
        // After a failed cut, a newline first: the piece left stays a line of its own (ignored as torn).
        const data = Buffer.from(this.#torn ? '\n' + text : text)
        try {
          // Reopened if a compaction renamed the journal but could not open it again.
          if (!this.#handle) {
            this.#handle = await fs.open(this.file, C.O_WRONLY | C.O_APPEND | C.O_DSYNC, 0o640)
            this.#size = (await this.#handle.stat()).size
          }
          await writeAll(this.#handle, [data])
          if (this.#torn) this.#size = (await this.#handle.stat()).size
          else this.#size += data.length
          this.#torn = false
        } catch (err) {
          // A full disk writes part of the batch, then fails: cut that part off, or the next batch's
          // first line would be glued to it and lost, acknowledged or not.
          if (this.#handle) await this.#cut()
          // Not acknowledged, so a job created by this batch must not survive in a later compaction.
          for (const b of batch) {
            if (b.createdId) this.records.delete(b.createdId)
            b.reject(err)
          }
          continue
        }
        for (const b of batch) b.resolve()
        this.#linesSinceCompact += batch.length
        if (this.#linesSinceCompact > Math.max(this.compactMinLines, 2 * this.records.size)) {
          // A failed compaction (EMFILE, ENOSPC, …) leaves the journal as it was: keep appending to
          // it, and try again after as many lines. Thrown from here it would end the daemon (an
          // unhandled rejection) and leave the lines queued meanwhile waiting for ever.
          await this.compact().catch((err) => {
            this.logger?.error({ err }, 'journal compaction failed; appending to the journal as it is')
            this.#linesSinceCompact = 0
          })
        }
      }
    } finally {
      this.#flushing = null
    }
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

  // Rewrites the journal with one line per live job: temp file, fsync, rename, fsync the directory.
  async compact () {
    // The rewrite holds every job's last record, deferred ones included.
    clearTimeout(this.#deferTimer)
    this.#deferTimer = null
    this.#deferred.clear()
    const tmp = `${this.file}.tmp`
    const out = await fs.open(tmp, 'w', 0o640)
    try {
      let chunk = []
      for (const line of this.records.values()) {
        chunk.push(`{"op":"put","job":${line}}\n`)
        if (chunk.length === 1000) {
          await writeAll(out, [Buffer.from(chunk.join(''))])
          chunk = []
        }
      }
      // Every byte, or an error: a short write (full disk) must not become a shorter journal.
      if (chunk.length) await writeAll(out, [Buffer.from(chunk.join(''))])
      await out.sync()
    } finally {
      await out.close()
    }
    await fs.rename(tmp, this.file)
    // From here on the old handle writes to a file that has no name any more: never use it again.
    const old = this.#handle
    this.#handle = null
    await old?.close().catch(() => {})
    // O_DSYNC: each batch is one write that returns when it is on disk (one thread-pool hop, not two).
    this.#handle = await fs.open(this.file, C.O_WRONLY | C.O_APPEND | C.O_DSYNC, 0o640)
    this.#size = (await this.#handle.stat()).size
    this.#torn = false
    this.#linesSinceCompact = 0
    await syncDir(this.dir)
  }

  async close () {
    this.#takeDeferred()
    this.#flushing ??= this.#pending.length ? this.#flush() : null
    this.#closed = true
    await this.#flushing
    await this.#handle?.close()
    this.#handle = null
  }
}

export async function syncDir (dir) {
  const handle = await fs.open(dir, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}
