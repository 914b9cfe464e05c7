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

// "." + `name` + `tail`, the name cut by whole characters so that the whole fits in the 255 bytes
// HDFS and Linux file systems allow a name: the hidden temp name beside a file of any valid name
// (`tail` holds the job id, which keeps it unique).
export function hiddenName (name, tail) {
  let room = 255 - 1 - Buffer.byteLength(tail)
  let cut = ''
  for (const ch of name) {
    room -= Buffer.byteLength(ch)
    if (room < 0) break
    cut += ch
  }
  return `.${cut}${tail}`
}

// Where an upload is written before it is published: beside the final name, hidden (leading dot,
// so Hadoop input formats and directory listings skip it), and unique per job.
export function uploadTempPath (remote, jobId, suffix = '._COPYING_') {
  return path.posix.join(path.posix.dirname(remote), hiddenName(path.posix.basename(remote), `.${jobId}${suffix}`))
}
