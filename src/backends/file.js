// Local directory backend: the store of the built-in `local` target, and a reference for the contract.
import fs from 'node:fs/promises'
import { createReadStream, createWriteStream } from 'node:fs'
import path from 'node:path'
import { finished } from 'node:stream/promises'
import { RemoteExistsError, RemoteNotFoundError } from '../errors.js'
import { syncDir } from '../store.js'
import { linkNoReplace } from '../publish-local.js'
import { fileSource, fileSink } from '../datapath.js'

const CHUNK = 1 << 20

// Publishing replaces a file by rename, so a new inode (or size, or mtime) means another file.
const versionOf = (st) => `${st.ino}:${st.size}:${Math.trunc(st.mtimeMs)}`

export function createFileBackend (target) {
  const root = target.dir
  const full = (remote) => path.join(root, remote)

  return {
    type: 'file',
    tempSuffix: target.tempSuffix,

    async stat (remote) {
      try {
        const s = await fs.stat(full(remote))
        return { size: s.size, type: s.isDirectory() ? 'dir' : 'file', version: versionOf(s) }
      } catch (err) {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null
        throw err
      }
    },

    // With a `pool` (see datapath.js) the chunks are pool buffers the consumer releases.
    async openRead (remote, { offset = 0, length, pool } = {}) {
      let handle
      try {
        handle = await fs.open(full(remote), 'r')
      } catch (err) {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') throw new RemoteNotFoundError(`${remote} does not exist`)
        throw err
      }
      const st = await handle.stat()
      if (pool) {
        const stream = fileSource(handle.fd, { pool, start: offset, end: length === undefined ? Infinity : offset + length })
        stream.once('close', () => handle.close())
        return { stream, size: st.size, version: versionOf(st), offset }
      }
      const end = length === undefined ? undefined : offset + length - 1
      return { stream: createReadStream(null, { fd: handle, start: offset, end, highWaterMark: CHUNK }), size: st.size, version: versionOf(st), offset }
    },

    // With a `pool` and a `meter` the stream is a sink that hashes and gives pool buffers back.
    async openWrite (remote, { pool, meter } = {}) {
      const file = full(remote)
      await fs.mkdir(path.dirname(file), { recursive: true })
      const handle = await fs.open(file, 'w', 0o640)
      if (pool) {
        const stream = fileSink(handle.fd, { pool, meter })
        const done = finished(stream).finally(() => handle.close())
        return { stream, done }
      }
      // The stream owns the handle: it fsyncs (flush) and closes it when it ends or is destroyed.
      const stream = createWriteStream(null, { fd: handle, highWaterMark: CHUNK, flush: true })
      const done = finished(stream)
      return { stream, done }
    },

    async publish (tmp, remote, { overwrite } = {}) {
      const from = full(tmp)
      const to = full(remote)
      if (overwrite) {
        await fs.rename(from, to)
      } else {
        // link() fails if the name exists, so two jobs cannot both publish without overwrite.
        try {
          await linkNoReplace(from, to)
        } catch (err) {
          if (err.code === 'EEXIST') throw new RemoteExistsError(`${remote} exists and overwrite is false`)
          throw err
        }
      }
      await syncDir(path.dirname(to))
    },

    async remove (remote) {
      await fs.rm(full(remote), { force: true })
    },

    async close () {}
  }
}
