// The hashing thread of digest.js. Messages are lists of operations, applied in order:
//   ['o', id, checksumSpec|null, sha256]   open a digest (sha256 false: the checksum only)
//   ['u', id, SharedArrayBuffer, offset, length] or ['u', id, Uint8Array]   hash a chunk
//   ['d', id]                      finish a digest: its sha256 (hex, or null) and HDFS checksum
//   ['x', id]                      drop a digest
// and each is answered by one reply { done, results }: how many 'u' and 'd' operations it
// completed (in order) and the results of its 'd' operations (null for a digest it does not know).
import { parentPort } from 'node:worker_threads'
import { createHash } from 'node:crypto'
import { createHdfsChecksum } from './hdfs-checksum.js'

const states = new Map()

parentPort.on('message', (ops) => {
  let done = 0
  const results = []
  for (const op of ops) {
    const [kind, id] = op
    if (kind === 'o') {
      states.set(id, { sha256: op[3] === false ? null : createHash('sha256'), checksum: op[2] ? createHdfsChecksum(op[2]) : null })
    } else if (kind === 'u') {
      const state = states.get(id) // none if dropped: answered all the same
      const chunk = op.length === 5 ? Buffer.from(op[2], op[3], op[4]) : Buffer.from(op[2].buffer, op[2].byteOffset, op[2].length)
      state?.sha256?.update(chunk)
      state?.checksum?.update(chunk)
      done++
    } else if (kind === 'd') {
      const state = states.get(id)
      states.delete(id)
      results.push(state ? [state.sha256?.digest('hex') ?? null, state.checksum?.digest() ?? null] : null)
      done++
    } else if (kind === 'x') {
      states.delete(id)
    }
  }
  if (done) parentPort.postMessage({ done, results })
})
