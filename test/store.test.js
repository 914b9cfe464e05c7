// The job journal (store.js): what reaches the disk, and when. A durable record is on disk before
// put() resolves; a non-durable one (a transition a crash may lose) waits to ride along with the
// next durable write, or DEFER_MS, and a newer record of the same job replaces it.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import fsSync from 'node:fs'
import { syncBuiltinESMExports } from 'node:module'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { execFile as execFileCb } from 'node:child_process'
import { openJobStore } from '../src/store.js'
import { tempDir } from './helpers/sidecar.js'

const lines = async (dir) => (await fs.readFile(path.join(dir, 'jobs.journal'), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l))
const states = async (dir) => (await lines(dir)).map((l) => l.op === 'put' ? `${l.job.id}:${l.job.state}` : `del:${l.id}`)

let store
afterEach(async () => {
  await store?.close()
  store = null
})

const execFile = promisify(execFileCb)

// ownThread: the hand-off thread's store (handoff-thread.js), whose puts of one turn share one
// write(2) on its own thread (synced in "fsync" mode).
describe.each([['fsync', false], ['write', false], ['fsync', true], ['write', true]])('journal.sync %s, ownThread %s', (sync, ownThread) => {
  describe('job store', () => {
    it('writes a durable record before put() resolves', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      await store.put({ id: 'a', state: 'queued' })
      expect(await states(dir)).toEqual(['a:queued'])
    })

    it('holds a non-durable record back until the next durable write, which supersedes it for the same job', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      await store.put({ id: 'a', state: 'queued' })
      await store.put({ id: 'b', state: 'queued' })
      await store.put({ id: 'a', state: 'running' }, { durable: false })
      await store.put({ id: 'b', state: 'running' }, { durable: false })
      expect(await states(dir)).toEqual(['a:queued', 'b:queued'])
      // a's "running" is replaced by its newer record; b's rides along with it.
      await store.put({ id: 'a', state: 'succeeded' })
      expect(await states(dir)).toEqual(['a:queued', 'b:queued', 'b:running', 'a:succeeded'])
    })

    it('writes a held-back record within a moment when nothing else is written', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      await store.put({ id: 'a', state: 'queued' })
      await store.put({ id: 'a', state: 'running' }, { durable: false })
      store.remove('gone')
      expect(await states(dir)).toEqual(['a:queued'])
      for (let i = 0; i < 50 && (await states(dir)).length < 3; i++) await sleep(20)
      expect(await states(dir)).toEqual(['a:queued', 'a:running', 'del:gone'])
    })

    it('writes held-back records on close, and replays last record per job', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      await store.put({ id: 'a', state: 'queued' })
      await store.put({ id: 'b', state: 'queued' })
      await store.put({ id: 'a', state: 'running' }, { durable: false })
      store.remove('b')
      await store.close()
      expect(await states(dir)).toEqual(['a:queued', 'b:queued', 'a:running', 'del:b'])
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded()).toEqual([{ id: 'a', state: 'running' }])
      expect(await states(dir)).toEqual(['a:running']) // compacted at open
    })

    // JSON.stringify leaves U+2028 and U+2029 as they are; a reader that ends lines there too (node's
    // readline) lost such a job at the next start, or failed the start when a piece parsed as JSON.
    it('replays a record with U+2028, U+2029 or a carriage return in it, and a start survives any line that parses', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      const odd = [
        { id: 'ls', state: 'queued', remote: '/a\u2028b.txt' },
        { id: 'ps', state: 'queued', local: '/r/x\u2029y.txt' },
        { id: 'nul', state: 'queued', remote: '/a\u2028null\u2028b.txt' },
        { id: 'cr', state: 'queued', error: { message: 'a\rb\r\nc' } }
      ]
      for (const job of odd) await store.put(job)
      await store.close()
      // And lines that parse but are not records (a crash can leave any piece of a line).
      await fs.appendFile(path.join(dir, 'jobs.journal'), 'null\n42\n{"op":"put"}\n{"op":"put","job":{"id":7}}\n{"op":"del"}\n[]\n')
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded()).toEqual(odd)
      await store.close()
      store = await openJobStore({ dir, sync, ownThread }) // after the compaction at open, once more
      expect(store.loaded()).toEqual(odd)
    })

    // (On a thread of its own the line is written at the end of the turn: the test below.)
    it('has the line in the journal file when put() returns, before any await in "write" mode', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      await store.put({ id: 'a', state: 'queued' })
      const put = store.put({ id: 'b', state: 'queued' })
      const now = await states(dir) // the read is on the thread pool: an O_DSYNC write may land first
      await put
      if (sync === 'write' && !ownThread) expect(now).toEqual(['a:queued', 'b:queued'])
      expect(await states(dir)).toEqual(['a:queued', 'b:queued'])
    })

    // The store keeps where each job's last line is, not the line: a compaction copies the lines
    // from the old journal. Many puts, held-back puts and removals, with compactions among them
    // (every 20 lines, and some asked for while puts are in flight), against a model of what a
    // restart must find: each live job's last record, with records of every length.
    it('keeps every live job\'s last record through many compactions, and holds no written record in memory', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread, compactMinLines: 20 })
      const model = new Map()
      let seed = 7
      const random = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n }
      for (let round = 0; round < 3; round++) {
        const inFlight = []
        for (let i = 0; i < 400; i++) {
          const id = `job-${random(60)}`
          const op = random(10)
          if (op < 2 && model.has(id)) {
            model.delete(id)
            inFlight.push(store.remove(id))
          } else {
            const record = { id, state: `s${round}-${i}`, pad: 'é'.repeat(random(3) === 0 ? random(3000) : random(40)) }
            model.set(id, record)
            inFlight.push(store.put(record, { durable: op !== 2 }))
          }
          if (op === 3 && i % 7 === 0) inFlight.push(store.compact()) // beside puts in flight
          if (i % 25 === 0) await Promise.all(inFlight.splice(0))
        }
        await Promise.all(inFlight)
        await store.put({ id: 'last', state: `r${round}` }) // takes the held-back lines with it
        model.set('last', { id: 'last', state: `r${round}` })
        expect([...store.records.values()].filter((v) => typeof v === 'string')).toEqual([])
        await store.close()
        store = await openJobStore({ dir, sync, ownThread, compactMinLines: 20 })
        const loaded = new Map(store.loaded().map((j) => [j.id, j]))
        expect(loaded).toEqual(model)
        expect((await lines(dir)).length).toBe(model.size) // compacted at open: one line per job
      }
    })

    it('copies records longer than its read and write buffers (1 and 2 MiB) through compactions', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      const records = [
        { id: 'a', state: 'queued' },
        { id: 'long', state: 'queued', pad: 'é'.repeat(1.5 * 1024 * 1024) }, // 3 MiB of UTF-8
        { id: 'b', state: 'queued', pad: 'x'.repeat(1024 * 1024) },
        { id: 'c', state: 'queued' }
      ]
      for (const r of records) await store.put(r)
      await store.compact() // from the journal's lines
      await store.compact() // from the compacted journal's
      await store.close()
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded().sort((x, y) => x.id.localeCompare(y.id))).toEqual(records.sort((x, y) => x.id.localeCompare(y.id)))
    })

    it('close() waits for a compaction and for the puts it held back', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      for (let i = 0; i < 2000; i++) await store.put({ id: `j${i}`, state: 'queued', pad: 'x'.repeat(500) }, { durable: i === 1999 })
      const compaction = store.compact()
      const late = store.put({ id: 'late', state: 'queued' }) // waits for the new journal
      await store.close()
      await compaction
      await late
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded().filter((j) => j.id === 'late')).toEqual([{ id: 'late', state: 'queued' }])
    })

    // compact() used to wait for the write loop to end, which in "fsync" mode it never does while
    // puts keep coming faster than one synced write.
    it('compact() runs while puts keep coming, and the journal keeps every job\'s last record', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      const run = { stop: false }
      const puts = []
      const last = new Map()
      const stream = (async () => {
        for (let i = 0; !run.stop; i++) {
          const record = { id: `s${i % 50}`, state: `n${i}` }
          last.set(record.id, record)
          puts.push(store.put(record))
          await new Promise((resolve) => setImmediate(resolve))
        }
      })()
      await sleep(20) // the write loop is busy
      const outcome = await Promise.race([store.compact().then(() => 'compacted'), sleep(3000).then(() => 'stuck')])
      run.stop = true
      await stream
      await Promise.all(puts)
      expect(outcome).toBe('compacted')
      await store.close()
      store = await openJobStore({ dir, sync, ownThread })
      expect(new Map(store.loaded().map((j) => [j.id, j]))).toEqual(last)
    })

    it('a record put while a compaction copies the journal is the one the next compaction keeps', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread })
      const pad = 'x'.repeat(1000)
      for (let i = 0; i < 3000; i++) await store.put({ id: `j${i}`, state: 'queued', pad }, { durable: i % 500 === 499 })
      const compaction = store.compact()
      const run = { settled: false }
      compaction.then(() => { run.settled = true })
      const puts = []
      const updated = new Set()
      for (let i = 0; !run.settled; i += 7) { // while it reads and writes 3 MiB
        await new Promise((resolve) => setImmediate(resolve))
        updated.add(`j${i % 3000}`)
        puts.push(store.put({ id: `j${i % 3000}`, state: 'running' }))
      }
      await Promise.all([compaction, ...puts])
      expect(updated.size).toBeGreaterThan(1)
      await store.compact()
      await store.close()
      store = await openJobStore({ dir, sync, ownThread })
      const running = store.loaded().filter((j) => j.state === 'running').map((j) => j.id)
      expect(new Set(running)).toEqual(updated)
    })
  })

  describe('job store faults', () => {
    const quiet = { warn () {}, error () {}, info () {} }

    it('a compaction that fails while the daemon runs neither crashes it nor leaves a put waiting for ever', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread, compactMinLines: 2, logger: quiet })
      await fs.mkdir(path.join(dir, 'jobs.journal.tmp')) // the next compaction cannot create its temp file (as EMFILE, ENOSPC)
      const unhandled = []
      const onUnhandled = (err) => unhandled.push(err)
      process.on('unhandledRejection', onUnhandled)
      try {
        for (let i = 0; i < 3; i++) await store.put({ id: 'a', state: `s${i}` }) // the third batch starts a compaction
        const during = store.put({ id: 'b', state: 'queued' }) // waits for the compaction
        const outcome = await Promise.race([during.then(() => 'written', (err) => err.message), sleep(1000).then(() => 'stuck')])
        expect(unhandled.map((err) => err.code)).toEqual([]) // was: EISDIR, which ends the daemon
        expect(outcome).toBe('written')
      } finally {
        process.off('unhandledRejection', onUnhandled)
      }
      await store.close()
      await fs.rmdir(path.join(dir, 'jobs.journal.tmp'))
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded()).toEqual([{ id: 'a', state: 's2' }, { id: 'b', state: 'queued' }])
    })

    // Writes whose data starts with `prefix` fail with `code`, `times` times: FileHandle.writev (the
    // journal's batches, a compaction's copy) and fs.writeSync ("write" mode's batches).
    async function failWrites (prefix, { code = 'ENOSPC', times = 1 } = {}) {
      const probe = await fs.open('/dev/null')
      const proto = Object.getPrototypeOf(probe)
      await probe.close()
      const fail = (data) => {
        if (times <= 0 || !data.toString().startsWith(prefix)) return false
        times--
        return true
      }
      const { writev } = proto
      const { writeSync } = fsSync
      proto.writev = function (buffers, position) {
        if (fail(Buffer.concat(buffers))) return Promise.reject(Object.assign(new Error(`${code}: injected`), { code }))
        return writev.call(this, buffers, position)
      }
      fsSync.writeSync = function (fd, data, offset = 0, ...rest) {
        if (Buffer.isBuffer(data) && fail(data.subarray(offset))) throw Object.assign(new Error(`${code}: injected`), { code })
        return writeSync.call(this, fd, data, offset, ...rest)
      }
      syncBuiltinESMExports()
      return () => {
        proto.writev = writev
        fsSync.writeSync = writeSync
        syncBuiltinESMExports()
      }
    }

    // A compaction due while a new job's first record waited for its batch copied it into the new
    // journal; the batch then failed, the job was refused (503), and yet it ran after a restart.
    it('a new job whose batch fails after a compaction copied the journal is not in it', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread, compactMinLines: 10, logger: quiet })
      const restore = await failWrites('{"op":"put","job":{"id":"X"')
      try {
        for (let i = 0; i < 10; i++) await store.put({ id: 'a', state: `s${i}` })
        const due = store.put({ id: 'a', state: 's10' }) // makes a compaction due once written
        if (ownThread) await due // else both would share one write, at the end of this turn
        const refused = store.put({ id: 'X', state: 'queued' }) // waits for it, then fails
        await due
        await expect(refused).rejects.toMatchObject({ code: 'ENOSPC' })
      } finally {
        restore()
      }
      await store.close()
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded()).toEqual([{ id: 'a', state: 's10' }])
    })

    // The record of a job that exists (its end, say) failed to be written: it was only logged, and
    // the job, "succeeded" in the API, ran again after a restart.
    it('a later record of an existing job whose write failed is written with the next batch', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread, logger: quiet })
      await store.put({ id: 'a', state: 'running' })
      const restore = await failWrites('{"op":"put","job":{"id":"a","state":"succeeded"', { code: 'EIO' })
      try {
        await expect(store.put({ id: 'a', state: 'succeeded' })).rejects.toMatchObject({ code: 'EIO' })
      } finally {
        restore()
      }
      await store.put({ id: 'b', state: 'queued' })
      await store.close()
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded()).toEqual([{ id: 'a', state: 'succeeded' }, { id: 'b', state: 'queued' }])
    })

    it('a compaction that fails before its rename leaves no temp file taking the disk', async () => {
      const dir = await tempDir('store-')
      store = await openJobStore({ dir, sync, ownThread, logger: quiet })
      for (let i = 0; i < 5; i++) await store.put({ id: `j${i}`, state: 'queued' })
      const rename = fs.rename
      fs.rename = async () => { throw Object.assign(new Error('ENOSPC: injected'), { code: 'ENOSPC' }) }
      try {
        await expect(store.compact()).rejects.toMatchObject({ code: 'ENOSPC' })
      } finally {
        fs.rename = rename
      }
      expect(await fs.readdir(dir)).toEqual(['jobs.journal'])
      await store.put({ id: 'j5', state: 'queued' })
      await store.close()
      store = await openJobStore({ dir, sync, ownThread })
      expect(store.loaded().map((j) => j.id)).toEqual(['j0', 'j1', 'j2', 'j3', 'j4', 'j5'])
    })

    // A real short write: the child runs under `ulimit -f 8` (its files cannot grow past 8 KiB, as on a
    // full disk), where the kernel writes what fits and Node reports the bytes written, not an error.
    it('a short write (disk full) is not acknowledged, and does not cost the records written after it', async () => {
      const dir = await tempDir('store-')
      const script = `
      const { openJobStore } = await import(${JSON.stringify(new URL('../src/store.js', import.meta.url).href)})
      const store = await openJobStore({ dir: ${JSON.stringify(dir)}, sync: ${JSON.stringify(sync)}, ownThread: ${ownThread}, logger: { warn () {}, error () {}, info () {} } })
      const acked = []
      for (let i = 0; i < 60; i++) {
        try {
          await store.put({ id: 'job-' + i, state: 'queued', pad: 'x'.repeat(150) })
          acked.push('job-' + i)
        } catch {}
      }
      await store.close().catch(() => {})
      console.log(JSON.stringify(acked))`
      const { stdout } = await execFile('bash', ['-c', 'ulimit -f 8 && exec "$0" --input-type=module -e "$1"', process.execPath, script])
      const acked = JSON.parse(stdout)
      expect(acked.length).toBeGreaterThan(10) // the journal filled up after some
      expect(acked.length).toBeLessThan(60)
      store = await openJobStore({ dir, sync, ownThread })
      const loaded = new Set(store.loaded().map((j) => j.id))
      expect(acked.filter((id) => !loaded.has(id))).toEqual([]) // was: the last one acknowledged
    })
  })
})

describe.each(['fsync', 'write'])('job store on a thread of its own (%s mode)', (sync) => {
  it('writes the puts of one turn of the event loop with one write(2), on this thread', async () => {
    const dir = await tempDir('store-')
    store = await openJobStore({ dir, sync, ownThread: true })
    const { writeSync } = fsSync
    const writes = []
    fsSync.writeSync = function (fd, data, ...rest) {
      writes.push(data.toString().split('\n').filter(Boolean).length)
      return writeSync.call(this, fd, data, ...rest)
    }
    syncBuiltinESMExports()
    try {
      await Promise.all(Array.from({ length: 10 }, (_, i) => store.put({ id: `j${i}`, state: 'queued' })))
      await store.put({ id: 'k', state: 'queued' })
    } finally {
      fsSync.writeSync = writeSync
      syncBuiltinESMExports()
    }
    expect(writes).toEqual([10, 1])
    expect((await states(dir)).slice(-11)).toEqual([...Array.from({ length: 10 }, (_, i) => `j${i}:queued`), 'k:queued'])
  })
})
