// digest.js: the same sha256 and HDFS checksum inline and in the hashing thread, pool buffers held
// until hashed, the thread stopping when idle, and a dead thread failing its digests (not hanging).
import { describe, it, expect, afterEach } from 'vitest'
import { createHash, randomBytes } from 'node:crypto'
import { Digest, WORKER_MIN_BYTES, hashingThread } from '../src/digest.js'
import { BufferPool } from '../src/datapath.js'
import { createHdfsChecksum } from '../src/hdfs-checksum.js'
import fs from 'node:fs/promises'
import path from 'node:path'
import { upload, download } from '../src/transfer.js'
import { newJob } from '../src/jobs.js'
import { createFileBackend } from '../src/backends/file.js'
import { tempDir } from './helpers/sidecar.js'

const big = WORKER_MIN_BYTES

// Feeds `data` through pool buffers in pieces of `piece` bytes, releasing each as a sink would.
async function feed (digest, pool, data, piece) {
  for (let i = 0; i < data.length; i += piece) {
    let buf = pool.acquire()
    while (!buf) {
      await new Promise((resolve) => pool.whenAvailable(resolve, { next: true }))
      buf = pool.acquire()
    }
    const n = data.copy(buf, 0, i, Math.min(i + piece, data.length))
    const view = buf.subarray(0, n)
    digest.update(view)
    pool.release(view) // written; the digest still holds it while it hashes
  }
}

afterEach(async () => {
  await hashingThread.stop()
})

describe('Digest', () => {
  const data = randomBytes(3 * 1024 * 1024 + 777)
  const sha = createHash('sha256').update(data).digest('hex')

  it('hashes small transfers inline and large ones in the thread, with the same results', async () => {
    const spec = { blockSize: 1024 * 1024, bytesPerChecksum: 512, crcType: 'CRC32C' }
    const reference = createHdfsChecksum(spec)
    reference.update(data)
    const expected = reference.digest()

    const inline = new Digest({ checksum: createHdfsChecksum(spec), size: data.length })
    expect(inline.inWorker).toBe(false)
    inline.update(data)
    expect(await inline.digest()).toEqual({ sha256: sha, checksum: expected })

    const pool = new BufferPool({ count: 4, size: 256 * 1024 })
    const threaded = new Digest({ checksum: createHdfsChecksum(spec), pool, size: big })
    expect(threaded.inWorker).toBe(true)
    await feed(threaded, pool, data, 100_000 + 7) // odd pieces: chunks and CRC windows cut anywhere
    expect(await threaded.digest()).toEqual({ sha256: sha, checksum: expected })
    expect(pool.available).toBe(4) // every buffer back once hashed
    expect(hashingThread.running).toBe(true)
  })

  it('keeps a pool buffer out until the thread has hashed it', async () => {
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const d = new Digest({ pool, size: big })
    const buf = pool.acquire()
    buf.fill(7)
    d.update(buf)
    pool.release(buf) // the writer is done with it
    expect(pool.available).toBe(3) // the thread is not
    const { sha256 } = await d.digest()
    expect(sha256).toBe(createHash('sha256').update(Buffer.alloc(64 * 1024, 7)).digest('hex'))
    expect(pool.available).toBe(4)
  })

  it('copies chunks that are not pool buffers', async () => {
    const d = new Digest({ size: big })
    const chunk = Buffer.from(data)
    d.update(chunk)
    chunk.fill(0) // reused by its owner at once
    expect((await d.digest()).sha256).toBe(sha)
  })

  it('runs many digests side by side without mixing them', async () => {
    const pools = [0, 1, 2].map(() => new BufferPool({ count: 4, size: 64 * 1024 }))
    const parts = [0, 1, 2].map((i) => randomBytes(500_000 + i * 1000))
    const digests = pools.map((pool) => new Digest({ pool, size: big }))
    await Promise.all(digests.map((d, i) => feed(d, pools[i], parts[i], 64 * 1024)))
    const dropped = new Digest({ size: big })
    dropped.update(randomBytes(1000))
    dropped.dispose()
    const results = await Promise.all(digests.map((d) => d.digest()))
    expect(results.map((r) => r.sha256)).toEqual(parts.map((p) => createHash('sha256').update(p).digest('hex')))
  })

  it('stops the thread when no digest is open for a while, and starts it again when needed', async () => {
    const d = new Digest({ size: big })
    d.update(Buffer.from('x'))
    await d.digest()
    expect(hashingThread.running).toBe(true)
    await hashingThread.stop()
    expect(hashingThread.running).toBe(false)
    const again = new Digest({ size: big })
    again.update(Buffer.from('x'))
    expect((await again.digest()).sha256).toBe(createHash('sha256').update('x').digest('hex'))
  })

  it('fails the digests of a thread that died, and gives their buffers back', async () => {
    const pool = new BufferPool({ count: 4, size: 64 * 1024 })
    const d = new Digest({ pool, size: big })
    const buf = pool.acquire()
    d.update(buf)
    pool.release(buf)
    const result = d.digest()
    await hashingThread.stop() // as if it had crashed
    await expect(result).rejects.toMatchObject({ code: 'HASHING_FAILED', message: expect.stringMatching(/hashing thread/) })
    expect(pool.available).toBe(4)
    const next = new Digest({ size: big }) // a new thread serves new digests
    next.update(Buffer.from('y'))
    expect((await next.digest()).sha256).toBe(createHash('sha256').update('y').digest('hex'))
  })

  // The sinks hash as they write (datapath.js, transfer.js PartFile): a chunk arriving after the
  // thread died must fail the transfer's digest, not throw out of a file read's callback (an
  // uncaught exception: the daemon would exit with every running transfer).
  it.each(['upload', 'download'])('fails the %s whose thread dies mid-transfer, without an uncaught exception', async (direction) => {
    const root = await tempDir('digest-root-')
    const store = await tempDir('digest-store-')
    const size = 48 * 1024 * 1024
    await fs.writeFile(path.join(root, 'src'), Buffer.alloc(size, 1))
    await fs.writeFile(path.join(store, 'src'), Buffer.alloc(size, 2))
    const backend = createFileBackend({ dir: store, name: 'local', tempSuffix: '._COPYING_' })
    const job = newJob(direction === 'upload'
      ? { direction, target: 'local', local: path.join(root, 'src'), remote: '/dst', overwrite: true }
      : { direction, target: 'local', local: path.join(root, 'dst'), remote: '/src', overwrite: true }, new Date().toISOString())
    job.attempts = 1
    let stopped = false
    const onProgress = (bytes) => {
      if (!stopped && bytes > 8 * 1024 * 1024) {
        stopped = true
        hashingThread.stop() // as if it had crashed
      }
    }
    const run = direction === 'upload' ? upload : download
    const err = await run(job, { backend, roots: [root], onProgress }).catch((e) => e)
    expect(err.message).toMatch(/hashing thread/)
    // Retried: the next attempt starts a new thread.
    expect(err).toMatchObject({ code: 'HASHING_FAILED', retryable: true })
    expect(stopped).toBe(true)
  })
})

// HASHING_FAILED is retried because "the next attempt starts a new one" (README): a download
// resumed from the digest a failed attempt kept in memory must not go on with that digest when
// its thread has died meanwhile, or the retry fails the same way (after reading the whole rest).
describe('a download resumed after the hashing thread died', () => {
  it('hashes its first bytes again in a new thread, and succeeds', async () => {
    const root = await tempDir('digest-root-')
    const store = await tempDir('digest-store-')
    const size = 24 * 1024 * 1024
    const data = randomBytes(size)
    await fs.writeFile(path.join(store, 'src'), data)
    const backend = createFileBackend({ dir: store, name: 'local', tempSuffix: '._COPYING_' })
    let attempt = 0
    const broken = {
      ...backend,
      async openRead (remote, opts) {
        const src = await backend.openRead(remote, opts)
        if (attempt > 1) return src
        // The first attempt breaks half-way (a reset: retryable, its bytes kept for a resume).
        let seen = 0
        src.stream.on('data', (chunk) => {
          seen += chunk.length
          if (seen > size / 2) src.stream.destroy(Object.assign(new Error('reset'), { code: 'ECONNRESET' }))
        })
        return src
      }
    }
    const job = newJob({ direction: 'download', target: 'local', local: path.join(root, 'dst'), remote: '/src', overwrite: true }, new Date().toISOString())
    const deps = {
      backend: broken,
      roots: [root],
      onStart: ({ size, version, resumedFrom }) => Object.assign(job, { size, remoteVersion: version, resumedFrom })
    }
    attempt = job.attempts = 1
    const first = await download(job, deps).catch((e) => e)
    expect(first).toMatchObject({ code: 'ECONNRESET' })
    await hashingThread.stop() // crashed while the job waited for its retry
    attempt = job.attempts = 2
    const result = await download(job, deps)
    expect(job.resumedFrom).toBeGreaterThan(0)
    expect(result.sha256).toBe(createHash('sha256').update(data).digest('hex'))
  })
})
