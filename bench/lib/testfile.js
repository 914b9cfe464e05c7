// The test file: one 16 MiB random block repeated, so creating 1 GiB costs 16 MiB of entropy
// instead of 1 GiB. Each copy gets its block index stamped into its first 8 bytes, so no two
// blocks are identical and a transfer that reorders or repeats blocks fails the sha256 check.
import { randomFillSync, createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'

const BLOCK = 16 << 20

// Writes `bytes` bytes to `file` and returns their sha256 (hex), computed while writing.
export async function createTestFile (file, bytes) {
  const block = randomFillSync(Buffer.allocUnsafe(BLOCK))
  const hash = createHash('sha256')
  const fh = await fs.open(file, 'w', 0o644)
  try {
    for (let offset = 0, index = 0; offset < bytes; offset += BLOCK, index++) {
      block.writeBigUInt64BE(BigInt(index), 0)
      const chunk = block.subarray(0, Math.min(BLOCK, bytes - offset))
      hash.update(chunk)
      await fh.write(chunk, 0, chunk.length, offset)
    }
  } finally {
    await fh.close()
  }
  return hash.digest('hex')
}

// `count` small files `dir`/f0 … f<count-1> of `bytes` bytes each (file i filled with i % 251, so no
// two neighbours are alike); returns their paths.
export async function createSmallFiles (dir, count, bytes) {
  const files = []
  for (let i = 0; i < count; i++) {
    files.push(path.join(dir, `f${i}`))
    await fs.writeFile(files[i], Buffer.alloc(bytes, i % 251))
  }
  return files
}
