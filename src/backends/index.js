// Every backend implements one contract:
//   stat(remote) → {size, type, version} | null
//   openRead(remote, {offset, length, signal, ifVersion, status}) → {stream: Readable, size, version, offset}
//     status: the remote's stat() if the caller has it already (webhdfs then asks no second time)
//     size: to the end of the file; version: an opaque validator of the file's content (null if the
//     server gives none), so a download resumed at `offset` can tell it still reads the same file;
//     offset: where the stream really starts (0 when the server ignored the range)
//   openWrite(remote, {size, signal}) → {stream: Writable, done: Promise}
//   publish(tmp, remote, {overwrite, size, signal}) — atomic move of a finished upload into place
//   remove(remote), close()
//   tempSuffix — suffix of upload temp names (target option, default "._COPYING_")
// Optional, for targets that keep their own checksum of stored data (webhdfs):
//   createChecksum({remote, status, blockSize, signal}) → {update(buf), digest()} | null
//   verifyChecksum(remote, digest, {signal}) → {algorithm, bytes} | null (null: not comparable)
//   = compareChecksum(remote, digest, await fileChecksum(remote, {signal})), the two steps apart so
//   that a download can ask for the target's checksum while its body still flows
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
export function uploadTempPath (remote, jobId, suffix = '._COPYING_') {
  return path.posix.join(path.posix.dirname(remote), `.${path.posix.basename(remote)}.${jobId}${suffix}`)
}
