// Local directory backend: the store of the built-in `local` target, and a reference for the contract.
import fs from 'node:fs/promises'
import { createReadStream, createWriteStream, realpathSync, constants as C } from 'node:fs'
import path from 'node:path'
import { finished } from 'node:stream/promises'
import {
  RemoteExistsError, RemoteNotFoundError, RemoteRejectedError, PermissionDeniedError, RemoteQuotaExceededError
} from '../errors.js'
import { linkNoReplace } from '../publish-local.js'
import { inDir, openOnPool, openedPath } from '../paths.js'
import { fileSource, fileSink } from '../datapath.js'

const CHUNK = 1 << 20

// Publishing replaces a file by rename, so a new inode (or size, or mtime) means another file.
const versionOf = (st) => `${st.ino}:${st.size}:${Math.trunc(st.mtimeMs)}`

// What went wrong in the store, said of the remote path (the store's own path stays out).
const STORE_PROBLEMS = {
  EISDIR: 'is a directory',
  ENOTDIR: 'a parent is not a directory',
  EEXIST: 'a parent is not a directory', // mkdir of a parent that is a file
  ENAMETOOLONG: 'a name in the path is too long',
  ENOENT: 'does not exist',
  ELOOP: 'is a symbolic link, not followed',
  EFTYPE: 'is not a regular file',
  EXDEV: 'leads out of the store (a symbolic link on the way)',
  ENXIO: 'is not a regular file'
}

// Store files are opened without following a symlink and without blocking (a FIFO would hold a
// thread-pool thread for good), must be regular files, and must really lie in the store: whoever
// can write there must not make the daemon read or write other files through it.
const READ_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK
const WRITE_FLAGS = C.O_WRONLY | C.O_CREAT | C.O_TRUNC | C.O_NOFOLLOW | C.O_NONBLOCK
const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY

// An fs error in the store is the target's, not the job's local file's (which transfer.js handles):
// a remote code and a message naming `target:remote`. Other errors (aborts, ours) pass unchanged.
function storeError (err, where) {
  const code = err?.code
  if (typeof code !== 'string' || !/^E[A-Z]+$/.test(code)) return err
  const why = `${where}: ${STORE_PROBLEMS[code] ?? `${err.syscall ?? 'file system'} failed`} (${code})`
  if (code === 'EACCES' || code === 'EPERM') return new PermissionDeniedError(why, { cause: err })
  if (code === 'ENOSPC' || code === 'EDQUOT') return new RemoteQuotaExceededError(why, { cause: err })
  return new RemoteRejectedError(why, { cause: err })
}

export function createFileBackend (target) {
  const root = target.dir
  let realRoot = null // resolved when first needed (config validation creates the directory)

  // Throws unless the open `handle` (a file or directory) really lies in the store.
  async function inStore (handle, { self = false } = {}) {
    realRoot ??= realpathSync(root)
    const real = await openedPath(handle)
    if (!(real.startsWith(realRoot + path.sep) || (self && real === realRoot))) throw Object.assign(new Error('outside the store'), { code: 'EXDEV' })
  }

  // Closes `handle` and throws unless it is a regular file inside the store; returns its stat.
  async function checked (handle) {
    try {
      const st = await handle.stat()
      if (st.isDirectory()) throw Object.assign(new Error('is a directory'), { code: 'EISDIR' })
      if (!st.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'EFTYPE' })
      await inStore(handle)
      return st
    } catch (err) {
      await handle.close()
      throw err
    }
  }
  // The directory of `remote`, open and in the store. Directories missing on the way are created
  // one at a time, each in a directory already found to be in the store: a symlink on the way
  // (whoever can write the store may plant one) gets neither the file nor a new directory elsewhere.
  // With `create: false`, a missing directory is null.
  async function openParent (remote, { create = true } = {}) {
    let dir = await openOnPool(path.dirname(full(remote)), DIR_FLAGS).catch((err) => {
      if (err.code !== 'ENOENT' || !create) throw err
      return null
    })
    if (!dir) {
      dir = await openOnPool(root, DIR_FLAGS)
      for (const name of path.dirname(remote).split('/').filter(Boolean)) {
        let next
        try {
          await inStore(dir, { self: true })
          await fs.mkdir(inDir(dir, name)).catch((err) => { if (err.code !== 'EEXIST') throw err })
          next = await openOnPool(inDir(dir, name), DIR_FLAGS)
        } finally {
          await dir.close()
        }
        dir = next
      }
    }
    try {
      await inStore(dir, { self: true })
      return dir
    } catch (err) {
      await dir.close()
      throw err
    }
  }
  const full = (remote) => path.join(root, remote)
  const where = (remote) => target.name ? `${target.name}:${remote}` : remote
  const rethrow = (remote) => (err) => { throw storeError(err, where(remote)) }

  return {
    type: 'file',
    tempSuffix: target.tempSuffix,
    confirmsWrittenSize: true, // its sink writes every byte or fails

    // As openRead opens: a symlink, a FIFO or a file outside the store is refused, not described
    // (its size would tell of a file elsewhere).
    async stat (remote) {
      let handle
      try {
        handle = await openOnPool(full(remote), READ_FLAGS)
      } catch (err) {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null
        throw storeError(err, where(remote))
      }
      try {
        const s = await handle.stat()
        if (!s.isFile() && !s.isDirectory()) throw Object.assign(new Error('not a regular file'), { code: 'EFTYPE' })
        await inStore(handle)
        return { size: s.size, type: s.isDirectory() ? 'dir' : 'file', version: versionOf(s) }
      } catch (err) {
        throw storeError(err, where(remote))
      } finally {
        await handle.close()
      }
    },

    // With a `pool` (see datapath.js) the chunks are pool buffers the consumer releases.
    async openRead (remote, { offset = 0, length, pool } = {}) {
      let handle
      try {
        handle = await openOnPool(full(remote), READ_FLAGS)
      } catch (err) {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') throw new RemoteNotFoundError(`${remote} does not exist${target.name ? ` on target ${JSON.stringify(target.name)}` : ''}`)
        throw storeError(err, where(remote))
      }
      // open() takes a directory; reading it would fail later, as if the local side had.
      const st = await checked(handle).catch(rethrow(remote))
      if (pool) {
        const stream = fileSource(handle.fd, { pool, start: offset, end: length === undefined ? Infinity : offset + length })
        stream.once('close', () => handle.close().catch(() => {})) // not an unhandled rejection
        return { stream, size: st.size, version: versionOf(st), offset }
      }
      const end = length === undefined ? undefined : offset + length - 1
      return { stream: createReadStream(null, { fd: handle.fd, start: offset, end, highWaterMark: CHUNK }), size: st.size, version: versionOf(st), offset }
    },

    // With a `pool` and a `meter` the stream is a sink that hashes and gives pool buffers back.
    async openWrite (remote, { pool, meter } = {}) {
      // Created through its directory, once that is known to be in the store (a symlink on the way
      // must not put the file elsewhere).
      const dir = await openParent(remote).catch(rethrow(remote))
      let handle
      try {
        handle = await openOnPool(inDir(dir, path.basename(remote)), WRITE_FLAGS, 0o640)
      } catch (err) {
        throw storeError(err, where(remote))
      } finally {
        await dir.close()
      }
      await checked(handle).catch(rethrow(remote))
      // A failed write surfaces through `done` too, which transfer.js prefers to the pipeline's error.
      if (pool) {
        const stream = fileSink(handle.fd, { pool, meter })
        const done = finished(stream).finally(() => handle.close()).catch(rethrow(remote))
        return { stream, done }
      }
      // The stream owns the descriptor: it fsyncs (flush) and closes it when it ends or is destroyed.
      const stream = createWriteStream(null, { fd: handle.fd, highWaterMark: CHUNK, flush: true })
      const done = finished(stream).catch(rethrow(remote))
      return { stream, done }
    },

    // Renamed or linked through their directory, opened and found in the store now (the temp name
    // lies beside the final one): a directory on the way swapped for a symlink since the upload
    // started gets nothing published where the symlink points.
    async publish (tmp, remote, { overwrite } = {}) {
      if (path.posix.dirname(tmp) !== path.posix.dirname(remote)) throw new Error(`publish: ${tmp} is not beside ${remote}`)
      const dir = await openParent(remote, { create: false }).catch(rethrow(remote))
      try {
        const from = inDir(dir, path.basename(tmp))
        const to = inDir(dir, path.basename(remote))
        if (overwrite) {
          await fs.rename(from, to).catch(rethrow(remote))
        } else {
          // link() fails if the name exists, so two jobs cannot both publish without overwrite.
          try {
            await linkNoReplace(from, to)
          } catch (err) {
            if (err.code === 'EEXIST') throw new RemoteExistsError(`${remote} exists${target.name ? ` on target ${JSON.stringify(target.name)}` : ''} and overwrite is false`)
            throw storeError(err, where(remote))
          }
        }
        await dir.sync().catch(rethrow(remote))
      } finally {
        await dir.close()
      }
    },

    // Through its directory, found in the store, as publish: a symlink on the way is not followed
    // out of the store (a temp name is the caller's choice of id and path).
    async remove (remote) {
      let dir
      try {
        dir = await openParent(remote, { create: false })
      } catch (err) {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return
        throw storeError(err, where(remote))
      }
      try {
        await fs.rm(inDir(dir, path.basename(remote)), { force: true }).catch(rethrow(remote))
      } finally {
        await dir.close()
      }
    },

    async close () {}
  }
}
