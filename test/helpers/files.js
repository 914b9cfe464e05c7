import fs from 'node:fs/promises'
import { createReadStream, createWriteStream } from 'node:fs'
import { createHash } from 'node:crypto'
import { pipeline } from 'node:stream/promises'
import { Readable } from 'node:stream'

// Deterministic pseudo-random content of any size, generated as a stream (never in memory whole).
export function patternStream (size, seed = 1) {
  let left = size
  let x = seed >>> 0 || 1
  return new Readable({
    read () {
      if (left === 0) return this.push(null)
      const n = Math.min(left, 1 << 20)
      const buf = Buffer.allocUnsafe(n)
      for (let i = 0; i + 4 <= n; i += 4) {
        x ^= x << 13; x ^= x >>> 17; x ^= x << 5
        buf.writeUInt32LE(x >>> 0, i)
      }
      for (let i = n - (n % 4); i < n; i++) buf[i] = i & 0xff
      left -= n
      this.push(buf)
    }
  })
}

export async function makeFile (file, size, seed) {
  await pipeline(patternStream(size, seed), createWriteStream(file))
  return sha256File(file)
}

export async function sha256File (file) {
  const hash = createHash('sha256')
  await pipeline(createReadStream(file), hash)
  return hash.digest('hex')
}

export async function exists (p) {
  return fs.lstat(p).then(() => true, () => false)
}
