// HDFS's own checksum (MD5-of-MD5-of-CRC32C), computed locally while streaming and compared with
// GETFILECHECKSUM of a real MiniDFSCluster: on files of many sizes, several blocks included, and
// with a byte flipped on the wire, which only this end-to-end check can catch.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createHash } from 'node:crypto'
import fc from 'fast-check'
import { Agent, request } from 'undici'
import { crc32c, createHdfsChecksum, parseFileChecksum } from '../src/hdfs-checksum.js'
import { createWebHdfsBackend } from '../src/backends/webhdfs.js'
import { upload, download } from '../src/transfer.js'
import { startHdfs } from './harness/hdfs.js'
import { startHdfsProxies } from './harness/tcp-proxy.js'
import { tempDir } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'

const MiB = 1 << 20

describe('CRC32C and the HDFS checksum, locally', () => {
  it('matches the CRC32C check values (RFC 3720 B.4 and "123456789")', () => {
    expect(crc32c(Buffer.from('123456789')).toString(16)).toBe('e3069283')
    expect(crc32c(Buffer.alloc(32, 0)).toString(16)).toBe('8a9136aa')
    expect(crc32c(Buffer.alloc(32, 0xff)).toString(16)).toBe('62a8ab43')
    expect(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => i))).toString(16)).toBe('46dd794e')
    expect(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => 31 - i))).toString(16)).toBe('113fdb5c')
  })

  it('does not depend on how the stream is cut into buffers', () => {
    const data = Buffer.from(Array.from({ length: 5000 }, (_, i) => (i * 7919) & 0xff))
    const whole = createHdfsChecksum({ blockSize: 2048 })
    whole.update(data)
    const expected = whole.digest()
    fc.assert(fc.property(fc.array(fc.integer({ min: 0, max: 5000 }), { maxLength: 12 }), (cuts) => {
      const points = [...new Set([0, ...cuts, 5000])].sort((a, b) => a - b)
      const ck = createHdfsChecksum({ blockSize: 2048 })
      for (let i = 1; i < points.length; i++) ck.update(data.subarray(points[i - 1], points[i]))
      expect(ck.digest()).toEqual(expected)
    }))
  })

  it('equals a plain reference (CRC per chunk, MD5 per block, MD5 of those padded as Hadoop does)', () => {
    const reference = (data, blockSize) => {
      const blocks = []
      for (let b = 0; b < data.length; b += blockSize) {
        const md5 = createHash('md5')
        for (let c = b; c < Math.min(b + blockSize, data.length); c += 512) {
          const crc = Buffer.alloc(4)
          crc.writeUInt32BE(crc32c(data.subarray(c, Math.min(c + 512, b + blockSize, data.length))))
          md5.update(crc)
        }
        blocks.push(md5.digest())
      }
      let capacity = 32
      while (capacity < blocks.length * 16) capacity *= 2
      const md5 = createHash('md5').update(Buffer.concat([...blocks, Buffer.alloc(capacity - blocks.length * 16)])).digest('hex')
      return md5
    }
    for (const size of [1, 8, 511, 513, 4095, 4096, 4097, 3 * 4096 + 100, 17 * 4096]) {
      const data = Buffer.from(Array.from({ length: size }, (_, i) => (i * 2654435761) >>> 24))
      const ck = createHdfsChecksum({ blockSize: 4096 })
      ck.update(data.subarray(0, 3)) // then unaligned: the copy path
      ck.update(data.subarray(3))
      expect(ck.digest().bytes.slice(24), `size ${size}`).toBe(reference(data, 4096))
    }
  })

  it('reads the FileChecksum JSON, ignoring the padding after its 28 bytes', () => {
    const parsed = parseFileChecksum({ algorithm: 'MD5-of-0MD5-of-512CRC32C', bytes: 'ab'.repeat(28) + '00000000', length: 28 })
    expect(parsed).toEqual({ algorithm: 'MD5-of-0MD5-of-512CRC32C', bytes: 'ab'.repeat(28), bytesPerChecksum: 512, crcType: 'CRC32C' })
    expect(parseFileChecksum({ algorithm: 'COMPOSITE-CRC32C', bytes: '12345678', length: 4 })).toBeNull()
  })
})

describe('against a MiniDFSCluster with 1 MiB blocks', () => {
  let hdfs, proxies, dispatcher, root, backend
  const job = (over) => ({ id: `ck${Math.random().toString(36).slice(2, 10)}`, overwrite: false, expectedSha256: null, attempts: 1, target: 'hdfs', ...over })

  beforeAll(async () => {
    hdfs = await startHdfs({ blocksize: MiB })
    await hdfs.command('mkdir /ck www-data 755')
    proxies = await startHdfsProxies(hdfs)
    dispatcher = new Agent()
    root = await tempDir('ck-root-')
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: proxies.urls, user: 'www-data', base: '/ck', checksum: true })
  })
  afterAll(async () => {
    await dispatcher?.close()
    await proxies?.stop()
    await hdfs?.stop()
  })

  async function hdfsChecksum (remote) {
    const nn = await request(`${hdfs.namenodes[0]}/webhdfs/v1/ck${remote}?op=GETFILECHECKSUM&user.name=www-data&noredirect=true`)
    const dn = await request((await nn.body.json()).Location)
    return parseFileChecksum((await dn.body.json()).FileChecksum)
  }

  const sizes = [0, 1, 511, 512, 513, 100000, MiB - 1, MiB, MiB + 1, 2 * MiB, 3 * MiB + 7, 5 * MiB + 512]
  it.each(sizes)('upload and download of %i bytes: our checksum is HDFS\'s', async (size) => {
    const local = path.join(root, `f${size}`)
    await makeFile(local, size, size + 3)
    const up = await upload(job({ direction: 'upload', local, remote: `/f${size}` }), { backend, roots: [root] })
    const theirs = await hdfsChecksum(`/f${size}`)
    expect(up.checksum).toEqual({ algorithm: theirs.algorithm, bytes: theirs.bytes })
    const back = path.join(root, `f${size}.back`)
    const down = await download(job({ direction: 'download', local: back, remote: `/f${size}` }), { backend, roots: [root] })
    expect(down.checksum).toEqual(up.checksum)
    expect(down.sha256).toBe(up.sha256)
  })

  it('fails an upload with CHECKSUM_MISMATCH when a byte is flipped on the way to the datanode, and publishes nothing', async () => {
    const local = path.join(root, 'flip-up')
    const sha = await makeFile(local, 3 * MiB + 5, 11)
    proxies.datanodes[0].fault({ corruptAt: 2 * MiB, direction: 'up', connections: 1, match: /^PUT /m })
    const j = job({ direction: 'upload', local, remote: '/flip-up.bin' })
    const err = await upload(j, { backend, roots: [root] }).catch((e) => e)
    expect(err).toMatchObject({ code: 'CHECKSUM_MISMATCH', retryable: true, details: { algorithm: 'MD5-of-2048MD5-of-512CRC32C' } })
    const listing = await request(`${hdfs.namenodes[0]}/webhdfs/v1/ck?op=LISTSTATUS&user.name=www-data`)
    const names = (await listing.body.json()).FileStatuses.FileStatus.map((s) => s.pathSuffix)
    expect(names.filter((n) => n.includes('flip-up'))).toEqual([])
    // sha256 and size could not see it: the local file was read correctly and fully.
    expect(createHash('sha256').update(await fs.readFile(local)).digest('hex')).toBe(sha)
  })

  it('fails a download with CHECKSUM_MISMATCH when a byte is flipped on the way back, leaving no temp file', async () => {
    const local = path.join(root, 'flip-down-src')
    await makeFile(local, 2 * MiB + 9, 12)
    await upload(job({ direction: 'upload', local, remote: '/flip-down.bin' }), { backend, roots: [root] })
    proxies.datanodes[0].fault({ corruptAt: 1234567, connections: 1, match: /op=OPEN/ })
    const out = path.join(root, 'flip-down')
    const err = await download(job({ direction: 'download', local: out, remote: '/flip-down.bin' }), { backend, roots: [root] }).catch((e) => e)
    expect(err).toMatchObject({ code: 'CHECKSUM_MISMATCH' })
    expect((await fs.readdir(root)).filter((n) => n.includes('flip-down.'))).toEqual([])
  })

  it('asks for HDFS\'s checksum of a download while its body still flows', async () => {
    const local = path.join(root, 'early-src')
    await makeFile(local, 5 * MiB, 15)
    await upload(job({ direction: 'upload', local, remote: '/early.bin' }), { backend, roots: [root] })
    // The body trickles at 4 MiB/s, so it takes more than a second.
    proxies.datanodes[0].fault({ rate: 4 * MiB, connections: 1, match: /op=OPEN/ })
    const statusAsks = () => proxies.requests().filter((r) => /\/early\.bin\?op=GETFILESTATUS&/.test(r.line)).length
    const statusAsked = statusAsks()
    let received = 0
    const pending = download(job({ direction: 'download', local: path.join(root, 'early'), remote: '/early.bin' }),
      { backend, roots: [root], onProgress: (bytes) => { received = bytes } })
    const asked = () => proxies.requests().some((r) => /\/early\.bin\?\S*op=GETFILECHECKSUM/.test(r.line)) // not the upload's temp name
    for (let waited = 0; !asked() && waited < 5000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10))
    expect(asked()).toBe(true)
    expect(received).toBeLessThan(4 * MiB)
    const down = await pending
    expect(down.checksum).toEqual({ algorithm: 'MD5-of-2048MD5-of-512CRC32C', bytes: expect.stringMatching(/^[0-9a-f]{56}$/) })
    // One GETFILESTATUS serves both the checksum's block size and the open.
    expect(statusAsks() - statusAsked).toBe(1)
  })

  it('asks again after the body when the early checksum request fails', async () => {
    const local = path.join(root, 'again-src')
    await makeFile(local, 2 * MiB, 16)
    const up = await upload(job({ direction: 'upload', local, remote: '/again.bin' }), { backend, roots: [root] })
    // Every datanode try of the first GETFILECHECKSUM is answered 503; the one after the body passes.
    const before = proxies.datanodes[0].stats.answered
    proxies.datanodes[0].fault({ status: 503, connections: 3, match: /op=GETFILECHECKSUM/ })
    const down = await download(job({ direction: 'download', local: path.join(root, 'again'), remote: '/again.bin' }), { backend, roots: [root] })
    expect(proxies.datanodes[0].stats.answered - before).toBe(3)
    expect(down.checksum).toEqual(up.checksum)
  })

  it('with checksum: false, asks HDFS for no checksum and uploads all the same', async () => {
    const plain = createWebHdfsBackend({ name: 'hdfs', namenodes: proxies.urls, user: 'www-data', base: '/ck', checksum: false })
    const local = path.join(root, 'plain')
    await makeFile(local, 1000, 13)
    const defaultsAsked = () => proxies.requests().filter((r) => /GETSERVERDEFAULTS/.test(r.line)).length
    const before = defaultsAsked()
    const up = await upload(job({ direction: 'upload', local, remote: '/plain.bin' }), { backend: plain, roots: [root] })
    expect(up.checksum).toBeUndefined()
    const lines = proxies.requests().map((r) => r.line).filter((l) => l.includes('plain.bin'))
    expect(lines.some((l) => /op=CREATE/.test(l))).toBe(true)
    expect(lines.some((l) => /GETFILECHECKSUM/.test(l) || /blocksize=/.test(l))).toBe(false)
    expect(defaultsAsked()).toBe(before)
  })

  it('passes the block size it computes with on CREATE', async () => {
    const local = path.join(root, 'bs')
    await makeFile(local, 10, 14)
    await upload(job({ direction: 'upload', local, remote: '/bs.bin' }), { backend, roots: [root] })
    const create = proxies.requests().map((r) => r.line).find((l) => l.includes('bs.bin') && /op=CREATE/.test(l) && /noredirect/.test(l))
    expect(create).toMatch(/blocksize=1048576/)
  })
})
