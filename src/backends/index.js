// Every backend implements one contract:
//   stat(remote) → {size, type} | null
//   openRead(remote, {offset, length, signal}) → {stream: Readable, size} (size: to the end of the file)
//   openWrite(remote, {size, signal}) → {stream: Writable, done: Promise}
//   publish(tmp, remote, {overwrite, signal}) — atomic move of a finished upload into place
//   remove(remote), close()
import path from 'node:path'
import { createFileBackend } from './file.js'
import { createHttpBackend } from './http.js'
import { createWebHdfsBackend } from './webhdfs.js'

const FACTORIES = { file: createFileBackend, http: createHttpBackend, webhdfs: createWebHdfsBackend }

export function createBackend (target, deps) {
  return FACTORIES[target.type](target, deps)
}

// Where an upload is written before it is published: beside the final name, hidden (leading dot,
// so Hadoop input formats and directory listings skip it), and unique per job.
export function uploadTempPath (remote, jobId) {
  return path.posix.join(path.posix.dirname(remote), `.${path.posix.basename(remote)}.${jobId}._COPYING_`)
}
