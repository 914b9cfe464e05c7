// Every transfer is checked before its figure counts: sizes always, content where it is on this
// machine (downloads, and uploads to httpd, whose files are on the local disk).
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'

const READ_CHUNK = 1 << 20
const SAMPLE = 64 << 10
const SAMPLE_EVERY = 16 << 20 // the test file's block size: each block carries its index

export function check (condition, message) {
  if (!condition) throw new Error(`verification failed: ${message}`)
}

export async function sha256File (file) {
  const hash = createHash('sha256')
  const fh = await fs.open(file, 'r')
  try {
    const buf = Buffer.allocUnsafe(READ_CHUNK)
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, READ_CHUNK, null)
      if (bytesRead === 0) break
      hash.update(buf.subarray(0, bytesRead))
    }
  } finally {
    await fh.close()
  }
  return hash.digest('hex')
}

async function readAt (fh, offset, length) {
  const buf = Buffer.alloc(length)
  const { bytesRead } = await fh.read(buf, 0, length, offset)
  return buf.subarray(0, bytesRead)
}

// Compares 64 KiB at the start of every 16 MiB block and at the end of `copy` with `source`:
// a cheap check for many large copies (blocks are stamped with their index, see testfile.js).
async function sameSamples (copy, source, bytes) {
  const [a, b] = await Promise.all([fs.open(copy, 'r'), fs.open(source, 'r')])
  try {
    const offsets = []
    for (let o = 0; o < bytes; o += SAMPLE_EVERY) offsets.push(o)
    offsets.push(Math.max(0, bytes - SAMPLE))
    for (const o of offsets) {
      const [x, y] = await Promise.all([readAt(a, o, SAMPLE), readAt(b, o, SAMPLE)])
      if (!x.equals(y)) return false
    }
    return true
  } finally {
    await Promise.all([a.close(), b.close()])
  }
}

/**
 * Checks a local copy of `source` ({ path, bytes, sha256 }): its size, then its sha256
 * (how = 'sha256') or samples against the source (how = 'sample'). Returns what was checked.
 */
export async function verifyLocalCopy (file, source, how = 'sha256') {
  const { size } = await fs.stat(file)
  check(size === source.bytes, `${file} has ${size} bytes, expected ${source.bytes}`)
  if (how === 'sha256') {
    const digest = await sha256File(file)
    check(digest === source.sha256, `${file} sha256 ${digest}, expected ${source.sha256}`)
    return 'size + sha256'
  }
  check(await sameSamples(file, source.path, source.bytes), `${file} differs from ${source.path}`)
  return 'size + samples'
}

// A remote copy: byte for byte when the target keeps it on this machine (httpd), else its size.
export async function verifyRemoteCopy (target, name, source, how = 'sha256') {
  const local = target.localPath(name)
  if (local) return `httpd file ${await verifyLocalCopy(local, source, how)}`
  const size = await target.remoteSize(name)
  check(size === source.bytes, `${target.name}:${name} has ${size} bytes, expected ${source.bytes}`)
  return 'remote size'
}

// What the daemon reports of a finished job: success, the byte count and the sha256 it moved.
// A job run with `digest: "none"` reports no sha256 (`hashed` false).
export function verifyJob (job, source, what, { hashed = true } = {}) {
  check(job.state === 'succeeded', `${what}: job ${job.id} ${job.state} ${JSON.stringify(job.error)}`)
  check(job.bytes === source.bytes, `${what}: job moved ${job.bytes} bytes, expected ${source.bytes}`)
  if (hashed) check(job.sha256 === source.sha256, `${what}: job sha256 ${job.sha256}, expected ${source.sha256}`)
  else check(job.sha256 === null || job.sha256 === undefined, `${what}: job with digest "none" reports sha256 ${job.sha256}`)
}
