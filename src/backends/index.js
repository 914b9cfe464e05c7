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
// so Hadoop input formats and directory listings skip it), and unique per job. A name too long for
// that (HDFS and Linux file systems allow 255 bytes) is cut, by whole characters, so that an
// upload to any valid name can have its temp file; the job id keeps it unique.
export function uploadTempPath (remote, jobId, suffix = '._COPYING_') {
  const tail = `.${jobId}${suffix}`
  let room = 255 - 1 - Buffer.byteLength(tail)
  let name = ''
  for (const ch of path.posix.basename(remote)) {
    room -= Buffer.byteLength(ch)
    if (room < 0) break
    name += ch
  }
  return path.posix.join(path.posix.dirname(remote), `.${name}${tail}`)
}
