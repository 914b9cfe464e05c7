// The WebHDFS backend against a tiny in-memory WebHDFS (harness/fake-webhdfs.js), for answers a
// MiniDFSCluster does not give on demand: a cancel in the middle of GETSERVERDEFAULTS, a file of an
// odd block size, a local failure during a PUT, JSON that is not an object.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import http from 'node:http'
import path from 'node:path'
import { startFakeWebHdfs } from './harness/fake-webhdfs.js'
import { createWebHdfsBackend } from '../src/backends/webhdfs.js'
import { download, upload } from '../src/transfer.js'
import { toSidecarError } from '../src/errors.js'
import { tempDir } from './helpers/sidecar.js'

let fake, backend
afterEach(async () => {
  await backend?.close()
  await fake?.stop()
  backend = fake = null
})

const job = (over) => ({ id: `fk${Math.random().toString(36).slice(2, 10)}`, overwrite: false, expectedSha256: null, attempts: 1, target: 'hdfs', ...over })

describe('WebHDFS backend against an emulated WebHDFS', () => {
  it('a job cancelled while GETSERVERDEFAULTS is asked does not turn HDFS checksums off for the jobs after it', async () => {
    fake = await startFakeWebHdfs({ defaultsDelayMs: 300 })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: true })
    const ac = new AbortController()
    const cancelled = backend.createChecksum({ signal: ac.signal })
    const other = backend.createChecksum({}) // another job, asking at the same time, not cancelled
    setTimeout(() => ac.abort(), 50)
    const settled = await Promise.allSettled([cancelled, other])
    expect(settled[0].status).toBe('rejected') // cancelled: neither a checksum nor "none"
    expect(await backend.createChecksum({})).not.toBeNull() // the cluster's defaults are known after all
    expect(settled[1]).toMatchObject({ status: 'fulfilled', value: { crcType: 'CRC32C', bytesPerChecksum: 512 } })
  })

  it('downloads a file whose block size is no multiple of the cluster\'s bytesPerChecksum, its checksum not compared', async () => {
    // Written by a client with dfs.bytes-per-checksum=100 and a block size of 10^6 bytes (a
    // multiple of 100, not of the cluster's 512): legal, and not comparable with our checksum.
    fake = await startFakeWebHdfs({
      blockSize: 1000000,
      checksum: () => ({ algorithm: 'MD5-of-0MD5-of-100CRC32C', bytes: '00'.repeat(28), length: 28 })
    })
    fake.files.set('/odd.bin', Buffer.from('some bytes'))
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: true })
    const root = await tempDir()
    const local = path.join(root, 'odd.bin')
    const result = await download(job({ direction: 'download', local, remote: '/odd.bin' }), { backend, roots: [root] })
    expect(result).toMatchObject({ bytes: 10 })
    expect(result.checksum).toBeUndefined()
    expect(await fs.readFile(local, 'utf8')).toBe('some bytes')
  })

  it.each([[{}], [null], [{ FileStatus: { type: 'FILE' } }]])('a 200 GETFILESTATUS of %j is REMOTE_REJECTED, not INTERNAL', async (answer) => {
    fake = await startFakeWebHdfs({ statusJson: answer })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false })
    await expect(backend.stat('/any')).rejects.toMatchObject({ code: 'REMOTE_REJECTED' })
  })
})

describe('WebHDFS backend: whose fault a failure is', () => {
  it('a local file that changes size during its upload does not get the datanode excluded', async () => {
    fake = await startFakeWebHdfs()
    const warnings = []
    const logger = { child: () => ({ warn: (o, m) => warnings.push({ ...o, m }), info () {}, debug () {}, error () {} }) }
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false, timeouts: { idleMs: 5000, connectMs: 1000 } }, { logger })
    const root = await tempDir('fake-webhdfs-')
    const local = path.join(root, 'src.bin')
    await fs.writeFile(local, Buffer.alloc(200000, 1))
    const err = await upload(job({ direction: 'upload', local, remote: '/a.bin', overwrite: true }), { backend, roots: [root], onStart: () => fs.truncate(local, 100000) }).then(() => null, (e) => e)
    expect(err?.code).toBe('SIZE_MISMATCH')
    await fs.writeFile(local, Buffer.alloc(1000, 2))
    await upload(job({ direction: 'upload', local, remote: '/b.bin', overwrite: true }), { backend, roots: [root] })
    expect(warnings.filter((w) => w.m === 'datanode excluded')).toEqual([])
    const creates = fake.requests.filter((r) => r.includes('op=CREATE') && !r.startsWith('PUT /dn/'))
    expect(creates.at(-1)).not.toContain('excludedatanodes')
  })

  it('a namenode answering JSON that is not an object fails the job as REMOTE_REJECTED, not INTERNAL', async () => {
    const server = http.createServer((req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('null'))
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [`http://127.0.0.1:${server.address().port}`], user: 'u', base: '/', checksum: false, timeouts: { idleMs: 3000, connectMs: 1000 } })
      const root = await tempDir('fake-webhdfs-')
      await fs.writeFile(path.join(root, 'a'), 'hello')
      const err = await upload(job({ direction: 'upload', local: path.join(root, 'a'), remote: '/a', overwrite: true }), { backend, roots: [root] }).then(() => null, (e) => e)
      expect(toSidecarError(err)).toMatchObject({ code: 'REMOTE_REJECTED', message: expect.stringMatching(/expected a JSON object/) })
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })
})
