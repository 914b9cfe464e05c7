// A download resumed after a restart first hashes again what its temp file holds (transfer.js
// hashPrefix): gigabytes, seconds of work. A cancel or a shutdown must stop it as it stops a
// transfer, not wait for the whole prefix (it did: 1 GiB took ~0.8–1 s to cancel here).
import { describe, it, expect } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createHash } from 'node:crypto'
import { hashPrefix } from '../src/transfer.js'
import { BufferPool } from '../src/datapath.js'
import { hashingThread } from '../src/digest.js'
import { tempDir } from './helpers/sidecar.js'

describe('the re-hash of a resumed download', () => {
  it('stops at an abort of its signal, and hashes the whole prefix otherwise', async () => {
    const file = path.join(await tempDir('rehash-'), 'part')
    const data = Buffer.alloc(32 << 20, 7)
    await fs.writeFile(file, data)
    const handle = await fs.open(file, 'r')
    try {
      const pool = BufferPool.forTransfer()
      const aborted = AbortSignal.abort(new Error('cancelled'))
      await expect(hashPrefix(handle, data.length, null, { checksum: null, pool, size: data.length, sha256: true, signal: aborted })).rejects.toThrow()
      const state = await hashPrefix(handle, data.length, 'v1', { checksum: null, pool, size: data.length, sha256: true })
      expect(state.bytes).toBe(data.length)
      const { sha256 } = await state.digest.digest()
      expect(sha256).toBe(createHash('sha256').update(data).digest('hex'))
    } finally {
      await handle.close()
      await hashingThread.stop()
    }
  })
})
