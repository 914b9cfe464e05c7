// Spool ingestion: when PHP cannot reach the daemon it writes the job body, with its own id, to
// `<spool.dir>/<id>.json` (temp file, fsync, rename). Those files are submitted like POSTed jobs at
// start, on change and every spool.intervalMs; the file is removed once the job is in the journal.
// The id makes this idempotent: a job both spooled and accepted over the socket runs once.
import fs from 'node:fs/promises'
import { watch, constants as C } from 'node:fs'
import path from 'node:path'
import { inDir } from './paths.js'

const NAME = /^([A-Za-z0-9_-]{8,64})\.json$/
// The PHP client's temp files (`.tmp-<id>-<random>`, renamed to <id>.json once written and synced):
// one still there after an hour belongs to a writer that died, whose caller got no id.
const TEMP = /^\.tmp-[A-Za-z0-9_-]{8,64}-[0-9a-f]+$/
const STALE_TEMP_MS = 60 * 60 * 1000
const MAX_BYTES = 64 * 1024
const LATER = new Set(['QUEUE_FULL', 'SHUTTING_DOWN', 'STORE_UNAVAILABLE'])
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }) // as POST /v1/jobs (submit.js)

// `halted()`: true once a stop was asked for during the daemon's start, whose first scan then ends
// at its next file (the files left are read at the next start).
export function createSpool ({ config, scheduler, logger, metrics, halted = () => false }) {
  const { dir, intervalMs } = config.spool
  const rejectedDir = path.join(dir, 'rejected')
  let running = null
  let again = false
  let timer = null
  let watcher = null
  let stopped = false
  // Files whose job is in the journal but which could not be removed (the spool's permissions):
  // removed at the next scans, not submitted again.
  const ingested = new Set()
  // Files a scan could not move or remove, with the error's message: logged once per message.
  const stuck = new Map()

  // rejected/, opened without following a symlink. PHP can write the spool: a symlink (or a file)
  // it put in place of rejected/ is removed, never followed, so that nothing is moved or written
  // outside the spool.
  async function openRejectedDir () {
    const open = () => fs.open(rejectedDir, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW)
    try {
      return await open()
    } catch (err) {
      if (err.code === 'ELOOP' || err.code === 'ENOTDIR') await fs.unlink(rejectedDir)
      else if (err.code !== 'ENOENT') throw err
    }
    await fs.mkdir(rejectedDir, { mode: 0o750 }).catch((err) => { if (err.code !== 'EEXIST') throw err })
    return open()
  }

  async function reject (name, error) {
    const rejected = await openRejectedDir()
    try {
      await fs.rename(path.join(dir, name), inDir(rejected, name)) // that directory, wherever it is now
      // Whatever is under the reason's name (a symlink to a file of ours) is replaced, not written through.
      const reason = inDir(rejected, `${name}.error.json`)
      await fs.unlink(reason).catch((err) => { if (err.code !== 'ENOENT') throw err })
      await fs.writeFile(reason, JSON.stringify({ error }) + '\n', { flag: C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW })
    } finally {
      await rejected.close()
    }
    metrics.spool('rejected')
    logger.warn({ file: name, error }, 'spooled job rejected')
  }

  async function ingestFile (name, id) {
    const file = path.join(dir, name)
    if (ingested.has(name)) return removeIngested(name)
    let body
    try {
      // The spool is writable by PHP: no symlink (it would make us read any file and quote it in
      // rejected/), and no FIFO or device (opened non-blocking, then refused: a FIFO would hang).
      const handle = await fs.open(file, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK)
      try {
        const st = await handle.stat()
        if (!st.isFile()) return reject(name, { code: 'INVALID_REQUEST', message: 'not a regular file' })
        if (st.size > MAX_BYTES) return reject(name, { code: 'PAYLOAD_TOO_LARGE', message: `over ${MAX_BYTES} bytes` })
        body = JSON.parse(strictUtf8.decode(await handle.readFile()))
      } finally {
        await handle.close()
      }
    } catch (err) {
      if (err.code === 'ENOENT') return
      if (err.code === 'ELOOP') return reject(name, { code: 'INVALID_REQUEST', message: 'a symbolic link' })
      if (err.code === 'EACCES' || err.code === 'EPERM') return reject(name, { code: 'INVALID_REQUEST', message: `the sidecar is not permitted to read it (${err.code})` })
      // Not err.message: JSON.parse quotes the content.
      if (err instanceof SyntaxError) return reject(name, { code: 'INVALID_JSON', message: 'the file is not valid JSON' })
      if (err.code === 'ERR_ENCODING_INVALID_ENCODED_DATA') return reject(name, { code: 'INVALID_JSON', message: 'the file is not valid UTF-8' })
      // Ours, not the file's (out of descriptors, an I/O error): it stays for the next scan.
      logger.warn({ file: name, err }, 'cannot read a spooled job; trying again at the next scan')
      return
    }
    if (body?.id !== id) return reject(name, { code: 'INVALID_REQUEST', message: 'the file name must be <id>.json of the job it holds' })
    try {
      const { created } = await scheduler.submit(body)
      metrics.spool(created ? 'ingested' : 'duplicate')
      logger.info({ job: id, created }, 'spooled job ingested')
    } catch (err) {
      if (LATER.has(err.code)) return false // try again on the next scan
      if (err.statusCode >= 400 && err.statusCode < 500) return reject(name, { code: err.code, message: err.message })
      // Ours, not the job's: it stays for the next scan, and the files after it go on.
      logger.error({ file: name, err }, 'cannot ingest a spooled job; trying again at the next scan')
      return
    }
    ingested.add(name)
    return removeIngested(name)
  }

  async function removeIngested (name) {
    await fs.unlink(path.join(dir, name)).catch((err) => { if (err.code !== 'ENOENT') throw err })
    ingested.delete(name)
    return true
  }

  // A file the daemon cannot move to rejected/ or remove (the spool's permissions, a directory
  // under its name in rejected/) stays, and the files after it are read all the same.
  async function scan () {
    const names = await fs.readdir(dir)
    for (const name of names) {
      if (stopped || halted()) return
      const m = NAME.exec(name)
      if (!m) continue
      try {
        if (await ingestFile(name, m[1]) === false) break
        stuck.delete(name)
      } catch (err) {
        if (stuck.get(name) !== err.message) logger.error({ file: name, err }, 'cannot move or remove a spooled job file; it stays in the spool')
        stuck.set(name, err.message)
      }
    }
    const listed = new Set(names)
    for (const name of ingested) if (!listed.has(name)) ingested.delete(name)
    for (const name of stuck.keys()) if (!listed.has(name)) stuck.delete(name)
    for (const name of names) if (TEMP.test(name)) await removeIfStale(name)
  }

  async function removeIfStale (name) {
    const file = path.join(dir, name)
    const st = await fs.lstat(file).catch(() => null)
    if (!st?.isFile() || Date.now() - st.mtimeMs < STALE_TEMP_MS) return
    await fs.unlink(file).catch(() => {})
    logger.info({ file: name }, 'removed a spool temp file left by a writer that died')
  }

  // One scan at a time; a request during a scan runs one more after it.
  function trigger () {
    if (stopped) return running
    if (running) {
      again = true
      return running
    }
    running = scan()
      .catch((err) => logger.error({ err }, 'spool scan failed'))
      .finally(() => {
        running = null
        if (again) {
          again = false
          trigger()
        }
      })
    return running
  }

  return {
    dir,
    trigger,
    async start () {
      await trigger()
      timer = setInterval(trigger, intervalMs)
      timer.unref()
      watcher = watch(dir, { persistent: false }, (event, name) => {
        if (name && NAME.test(name)) trigger()
      })
      watcher.on('error', (err) => logger.warn({ err }, 'spool watch failed; relying on the periodic scan'))
    },
    async stop () {
      stopped = true
      clearInterval(timer)
      watcher?.close()
      await running
    }
  }
}
