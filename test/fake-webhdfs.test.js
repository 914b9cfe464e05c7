// The WebHDFS backend against a tiny in-memory WebHDFS (harness/fake-webhdfs.js), for answers a
// MiniDFSCluster does not give on demand: a cancel in the middle of GETSERVERDEFAULTS, a file of an
// odd block size, a local failure during a PUT, JSON that is not an object.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import http from 'node:http'
import dns from 'node:dns/promises'
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

  // HDFS keys datanodes by IP address (JMX LiveNodes, `excludedatanodes`), while a namenode's
  // Location names one by its host name: unresolved, the exclusion named nothing HDFS knew.
  // A cluster of a few hundred datanodes answers JMX with more than the 64 KiB of an error body.
  it.each([['', 0], [', among 400 datanodes (JMX over 64 KiB)', 400]])('a datanode named by host name in its Location is excluded by its IP transfer address%s', async (what, others) => {
    let failing = true
    const { address } = await dns.lookup('localhost') // as the backend resolves it
    const ip = address.includes(':') ? `[${address}]` : address
    const padding = Object.fromEntries(Array.from({ length: others }, (_, i) => [`dn${i + 2}:50010`, { infoAddr: `10.0.${i >> 8}.${i & 255}:9864`, xferaddr: `10.0.${i >> 8}.${i & 255}:50010`, capacity: 1e12, usedSpace: 1e9, version: '3.4.1', lastContact: 1 }]))
    fake = await startFakeWebHdfs({
      intercept: (req, res, { op, onDatanode }) => {
        const port = new URL(fake.url).port
        if (req.url.startsWith('/jmx')) return !!res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ beans: [{ LiveNodes: JSON.stringify({ ...padding, 'dn1:50010': { infoAddr: `${ip}:${port}`, xferaddr: '127.0.0.1:50010' } }) }] }))
        if (op === 'CREATE' && !onDatanode) {
          const loc = new URL(`http://localhost:${port}${req.url.replace('/webhdfs/v1', '/dn/webhdfs/v1')}`)
          return !!res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Location: loc.href }))
        }
        if (op === 'CREATE' && onDatanode && failing) {
          failing = false
          return !!res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ RemoteException: { exception: 'IOException', javaClassName: 'java.io.IOException', message: 'All datanodes are bad' } }))
        }
        return false
      }
    })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false })
    const root = await tempDir('fake-webhdfs-')
    const local = path.join(root, 'src.bin')
    await fs.writeFile(local, Buffer.alloc(1000, 1))
    const err = await upload(job({ direction: 'upload', local, remote: '/a.bin', overwrite: true }), { backend, roots: [root] }).then(() => null, (e) => e)
    expect(err?.code).toBe('REMOTE_UNAVAILABLE')
    await upload(job({ direction: 'upload', local, remote: '/b.bin', overwrite: true }), { backend, roots: [root] })
    const creates = fake.requests.filter((r) => r.includes('op=CREATE') && !r.startsWith('PUT /dn/'))
    expect(creates.at(-1)).toContain('excludedatanodes=127.0.0.1%3A50010')
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

// What a server (or a gateway in front of it) may answer that the backend must not trust.
describe('WebHDFS answers that are refused or checked, not followed or trusted', () => {
  const put = async (name = 'u.bin') => {
    const root = await tempDir('fake-hdfs-')
    const local = path.join(root, 'src.bin')
    await fs.writeFile(local, Buffer.alloc(4096, 7))
    return upload(job({ direction: 'upload', local, remote: `/${name}`, overwrite: true }), { backend, roots: [root] }).then(() => null, (e) => toSidecarError(e))
  }

  // A chunk size of 0 or less never ended the checksum's loop: the daemon's main thread hung.
  it.each([
    ['a negative bytesPerChecksum', { blockSize: 1 << 20, bytesPerChecksum: -512, checksumType: 'CRC32C' }],
    ['a block size given as a string', { blockSize: '1048576', bytesPerChecksum: 512, checksumType: 'CRC32C' }],
    ['a block size of 0', { blockSize: 0, bytesPerChecksum: 512, checksumType: 'CRC32C' }]
  ])('GETSERVERDEFAULTS with %s: the upload goes on without HDFS\'s checksum', async (what, defaults) => {
    fake = await startFakeWebHdfs({ defaults: { FsServerDefaults: defaults } })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: true })
    expect(await put()).toBeNull()
    expect(fake.files.get('/u.bin')).toHaveLength(4096)
  })

  it('a 401 to GETSERVERDEFAULTS is asked again by the next job, not taken as a cluster without checksums', async () => {
    let refused = 1
    fake = await startFakeWebHdfs({ intercept: (req, res, { op }) => op === 'GETSERVERDEFAULTS' && refused-- > 0 && !!res.writeHead(401).end() })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: true })
    expect(await backend.createChecksum({})).toBeNull()
    expect(await backend.createChecksum({})).toMatchObject({ crcType: 'CRC32C', bytesPerChecksum: 512 })
  })

  it.each([
    ['a 302 (a gateway\'s login page)', (res) => res.writeHead(302, { location: 'http://127.0.0.1:1/login' }).end(), /answered HTTP 302/],
    ['a Location that is not http(s)', (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"Location":"file:///etc/passwd"}'), /without a usable datanode Location/]
  ])('a CREATE answered with %s is REMOTE_REJECTED, and nothing is sent there', async (what, answer, message) => {
    fake = await startFakeWebHdfs({ intercept: (req, res, { op, onDatanode }) => op === 'CREATE' && !onDatanode && !!answer(res) })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false })
    expect(await put()).toMatchObject({ code: 'REMOTE_REJECTED', message: expect.stringMatching(message) })
  })

  it.each([['a string', '"not a status"'], ['an array', '[1,2,3]']])('a FileStatus that is %s is REMOTE_REJECTED, not a file', async (what, status) => {
    fake = await startFakeWebHdfs({ statusJson: JSON.parse(`{"FileStatus":${status}}`) })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false })
    await expect(backend.stat('/x')).rejects.toMatchObject({ code: 'REMOTE_REJECTED' })
  })

  // Cut to its first 500 characters before, a secret across the cut was no longer found, and shown in part.
  it('a secret is redacted before a long message is cut', async () => {
    const key = 'k3y-9f8e7d6c5b4a3928170605040302010'
    fake = await startFakeWebHdfs({ intercept: (req, res, { op }) => op === 'CREATE' && !!res.writeHead(403).end(`${'x'.repeat(460)} refused request with key ${key} (token)`) })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false, headers: { 'x-api-key': key } })
    const err = await put()
    expect(err.code).toBe('PERMISSION_DENIED')
    expect(err.message).not.toContain(key.slice(0, 8))
  })
})

describe('TLS failures', () => {
  it.each(['DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'CERT_HAS_EXPIRED', 'ERR_TLS_CERT_ALTNAME_INVALID', 'EPROTO'])('%s is the server refused (REMOTE_REJECTED), not INTERNAL or LOCAL_IO', (code) => {
    const err = toSidecarError(Object.assign(new Error('handshake failed'), { code }))
    expect({ code: err.code, retryable: err.retryable }).toEqual({ code: 'REMOTE_REJECTED', retryable: false })
    expect(err.message).toMatch(/^TLS: /)
  })
})

// A resumed download's bytes before its offset are of the version journaled for it; WebHDFS's
// OPEN has no If-Range, so a file replaced after that version was checked (between the check and
// the OPEN, or before a datanode's retry) gave the rest of the new file, and the job succeeded with
// the two spliced (its sha256 that of the splice). The version is asked again after the body.
describe('a resumed download of a file replaced after its version was checked', () => {
  it('fails SIZE_MISMATCH, drops its temp file, and the next attempt downloads the new file whole', async () => {
    const MiB = 1 << 20
    const size = 4 * MiB
    const v1 = Buffer.alloc(size, 1)
    const v2 = Buffer.alloc(size, 2)
    let current = { id: 1001, mtime: 1000, data: v1 }
    let stats = 0
    fake = await startFakeWebHdfs({
      async intercept (req, res, { op, onDatanode }) {
        if (op === 'GETFILESTATUS') {
          const { id, mtime, data } = current
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ FileStatus: { length: data.length, type: 'FILE', fileId: id, modificationTime: mtime, blockSize: MiB } }))
          if (++stats === 1) current = { id: 1002, mtime: 2000, data: v2 } // replaced right after the first check
          return true
        }
        if (op === 'OPEN' && onDatanode) {
          const offset = Number(new URL(req.url, 'http://x').searchParams.get('offset') ?? 0)
          const body = current.data.subarray(offset)
          res.writeHead(200, { 'content-length': body.length }).end(body)
          return true
        }
        return false
      }
    })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false })
    const root = await tempDir('fake-splice-')
    const j = job({ direction: 'download', local: path.join(root, 'f.bin'), remote: '/f.bin', overwrite: true, attempts: 2, remoteVersion: `1001:${size}:1000`, size })
    const part = path.join(root, `.f.bin.${j.id}.part`)
    await fs.writeFile(part, v1.subarray(0, size / 2)) // what the attempt before left
    const err = await download(j, { backend, roots: [root] }).then(() => null, (e) => toSidecarError(e))
    expect(err).toMatchObject({ code: 'SIZE_MISMATCH', retryable: true })
    expect(err.message).toMatch(/replaced during the resumed download/)
    await expect(fs.access(part)).rejects.toThrow(/ENOENT/)
    await expect(fs.access(j.local)).rejects.toThrow(/ENOENT/)
    j.attempts = 3
    const done = await download(j, { backend, roots: [root], onStart: ({ version }) => { j.remoteVersion = version } })
    expect(done.bytes).toBe(size)
    expect((await fs.readFile(j.local)).equals(v2)).toBe(true)
  })
})

// A RENAME (the publish) answered by something other than WebHDFS (a gateway's redirect to its
// login page, the page itself as a 200, a proxy's 204) was taken as done: the upload succeeded,
// nothing was under the final name, and its temp file was left.
describe('a publish answered by something other than WebHDFS', () => {
  it.each([
    ['a 302 to a login page', (res) => res.writeHead(302, { location: 'http://127.0.0.1:1/login' }).end()],
    ['a 200 HTML page', (res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>Please log in</body></html>')],
    ['a 204', (res) => res.writeHead(204).end()]
  ])('fails REMOTE_REJECTED on %s, and removes the temp file', async (what, answer) => {
    fake = await startFakeWebHdfs({
      intercept: (req, res, { op }) => {
        if (op !== 'RENAME') return false
        answer(res)
        return true
      }
    })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false })
    const root = await tempDir('fake-rename-')
    await fs.writeFile(path.join(root, 'src.bin'), Buffer.alloc(4096, 7))
    const err = await upload(job({ direction: 'upload', local: path.join(root, 'src.bin'), remote: '/final.bin', overwrite: true }), { backend, roots: [root] }).then(() => null, (e) => toSidecarError(e))
    expect(err?.code).toBe('REMOTE_REJECTED')
    expect([...fake.files.keys()]).toEqual([])
  })
})

// A datanode whose Location has no port (its scheme's default) was left out under a garbled name
// (its host with the last character cut: "excludedatanodes=localhos"), so it was not left out.
describe('a failed datanode on its scheme\'s default port', () => {
  it('is excluded by its transfer address', async () => {
    let failed = false
    fake = await startFakeWebHdfs({
      intercept: (req, res, { op, onDatanode }) => {
        if (req.url.startsWith('/jmx')) {
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ beans: [{ LiveNodes: JSON.stringify({ '127.0.0.1:9866': { infoAddr: '127.0.0.1:80', xferaddr: '127.0.0.1:9866' } }) }] }))
          return true
        }
        if (op === 'CREATE' && !onDatanode && !failed) {
          failed = true // a datanode on port 80 of 127.0.0.1, where nothing listens: refused
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ Location: `http://127.0.0.1${req.url.replace('/webhdfs/v1', '/dn/webhdfs/v1')}` }))
          return true
        }
        return false
      }
    })
    backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false, timeouts: { idleMs: 3000, connectMs: 1000 } })
    const root = await tempDir('fake-exclude-')
    await fs.writeFile(path.join(root, 'src.bin'), Buffer.alloc(1000, 7))
    const first = await upload(job({ direction: 'upload', local: path.join(root, 'src.bin'), remote: '/a.bin', overwrite: true }), { backend, roots: [root] }).then(() => null, (e) => toSidecarError(e))
    expect(first?.code).toBe('NETWORK_ERROR')
    await upload(job({ direction: 'upload', local: path.join(root, 'src.bin'), remote: '/b.bin', overwrite: true }), { backend, roots: [root] })
    const create = fake.requests.filter((r) => r.includes('op=CREATE') && !r.startsWith('PUT /dn/')).at(-1)
    expect(new URL(create.split(' ')[1], 'http://x').searchParams.get('excludedatanodes')).toBe('127.0.0.1:9866')
  })
})
