// One contract, every backend, each against its real server: a local dir, Apache httpd mod_dav,
// and a Hadoop MiniDFSCluster with WebHDFS.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { createFileBackend } from '../src/backends/file.js'
import { createHttpBackend } from '../src/backends/http.js'
import { createWebHdfsBackend } from '../src/backends/webhdfs.js'
import { uploadTempPath } from '../src/backends/index.js'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { tempDir } from './helpers/sidecar.js'
import { startTcpProxy } from './harness/tcp-proxy.js'
import { startFaultServer } from './harness/faults.js'

const setups = {
  async file () {
    const dir = await tempDir('contract-file-')
    return { backend: createFileBackend({ dir }), stop: async () => {} }
  },
  async http () {
    const httpd = await startHttpd()
    const backend = createHttpBackend({ url: httpd.uploadUrl, atomic: true })
    return { backend, stop: async () => { await backend.close(); await httpd.stop() } }
  },
  async webhdfs () {
    const hdfs = await startHdfs()
    await hdfs.command('mkdir /contract www-data 755')
    const backend = createWebHdfsBackend({ namenodes: hdfs.namenodes, user: 'www-data', base: '/contract' })
    return { backend, stop: async () => { await backend.close(); await hdfs.stop() } }
  }
}

async function write (backend, remote, data) {
  const sink = await backend.openWrite(remote, { size: data.length })
  await Promise.all([pipeline(Readable.from([data]), sink.stream), sink.done])
}

async function read (backend, remote, opts) {
  const { stream, size } = await backend.openRead(remote, opts)
  const chunks = []
  for await (const c of stream) chunks.push(c)
  return { data: Buffer.concat(chunks), size }
}

describe.each(Object.keys(setups))('backend contract: %s', (name) => {
  let env
  beforeAll(async () => { env = await setups[name]() })
  afterAll(async () => { await env?.stop() })

  const data = Buffer.from('x'.repeat(100000) + 'end')

  it('stat of a missing file is null', async () => {
    expect(await env.backend.stat('/nope/missing.bin')).toBeNull()
  })

  it('writes a temp file in new parent directories, publishes it, reads it back', async () => {
    const tmp = uploadTempPath('/a/b/c.bin', 'job12345')
    await write(env.backend, tmp, data)
    expect((await env.backend.stat(tmp)).size).toBe(data.length)
    await env.backend.publish(tmp, '/a/b/c.bin', { overwrite: false })
    expect(await env.backend.stat(tmp)).toBeNull()
    const got = await read(env.backend, '/a/b/c.bin')
    expect(got.size).toBe(data.length)
    expect(got.data.equals(data)).toBe(true)
  })

  it('refuses to publish over an existing file without overwrite, replaces it with', async () => {
    await write(env.backend, '/over/target.bin', Buffer.from('old'))
    const tmp = uploadTempPath('/over/target.bin', 'job22222')
    await write(env.backend, tmp, Buffer.from('new content'))
    await expect(env.backend.publish(tmp, '/over/target.bin', { overwrite: false })).rejects.toMatchObject({ code: 'REMOTE_EXISTS' })
    expect((await read(env.backend, '/over/target.bin')).data.toString()).toBe('old')
    await env.backend.publish(tmp, '/over/target.bin', { overwrite: true })
    expect((await read(env.backend, '/over/target.bin')).data.toString()).toBe('new content')
  })

  it('reads from an offset', async () => {
    await write(env.backend, '/offset.bin', data)
    const got = await read(env.backend, '/offset.bin', { offset: 99990 })
    expect(got.data.toString()).toBe('xxxxxxxxxxend')
    expect(got.size).toBe(data.length)
  })

  it('round-trips an empty file', async () => {
    await write(env.backend, '/empty.bin', Buffer.alloc(0))
    expect((await env.backend.stat('/empty.bin')).size).toBe(0)
    expect((await read(env.backend, '/empty.bin')).data.length).toBe(0)
  })

  it('answers REMOTE_NOT_FOUND when reading a missing file', async () => {
    await expect(env.backend.openRead('/missing/file.bin')).rejects.toMatchObject({ code: 'REMOTE_NOT_FOUND', retryable: false })
  })

  it('keeps odd but legal names intact', async () => {
    const remote = '/odd dir/ü name %41 #1?.bin'
    await write(env.backend, remote, Buffer.from('odd'))
    expect((await read(env.backend, remote)).data.toString()).toBe('odd')
  })

  // HDFS and ext4 allow 255 bytes a name: the temp name beside it (uploadTempPath) must fit too.
  it('takes an upload to a 255-byte name through its temp name', async () => {
    for (const name of ['n'.repeat(255), 'é'.repeat(120) + 'x'.repeat(15)]) { // 255 bytes each
      const remote = `/long/${name}`
      const tmp = uploadTempPath(remote, 'job-long-name-0123456789abcdef0123456789abcdef0123456789abcdef01')
      expect(Buffer.byteLength(tmp.split('/').pop())).toBeLessThanOrEqual(255)
      await write(env.backend, tmp, Buffer.from(name))
      await env.backend.publish(tmp, remote, { overwrite: false })
      expect((await read(env.backend, remote)).data.toString()).toBe(name)
      expect(await env.backend.stat(tmp)).toBeNull()
    }
  })

  // mod_dav answers 403 to one of two MKCOLs racing for the same new collection.
  it('writes concurrently into the same new directories', async () => {
    for (let round = 0; round < 10; round++) {
      const names = Array.from({ length: 6 }, (_, i) => `/race${round}/d/e/f${i}.bin`)
      await Promise.all(names.map((n) => write(env.backend, n, Buffer.from(n))))
      for (const n of names) expect((await read(env.backend, n)).data.toString()).toBe(n)
    }
  })

  it('removes a file', async () => {
    await write(env.backend, '/gone.bin', Buffer.from('bye'))
    await env.backend.remove('/gone.bin')
    expect(await env.backend.stat('/gone.bin')).toBeNull()
  })
})

// Apache answers HEAD of a missing or empty file without Content-Length, after which node's HTTP
// client (20.x) closes the keep-alive connection: a new connection per "exists?" of every
// upload with overwrite false. stat asks for the first byte with a GET instead.
describe('http backend: stat keeps its connection', () => {
  let httpd, proxy, backend
  beforeAll(async () => {
    httpd = await startHttpd()
    proxy = await startTcpProxy({ target: `127.0.0.1:${httpd.port}` })
    backend = createHttpBackend({ url: `${proxy.url}${new URL(httpd.uploadUrl).pathname}`, atomic: true })
  })
  afterAll(async () => {
    await backend?.close()
    await proxy?.stop()
    await httpd?.stop()
  })

  it('tells missing, empty and present files apart over one connection', async () => {
    await write(backend, '/keep/empty.bin', Buffer.alloc(0))
    await write(backend, '/keep/four.bin', Buffer.from('four'))
    // Modified a while ago: a Last-Modified of the answer's own second is no validator (http.js).
    const then = new Date(Date.now() - 100000)
    await fs.utimes(path.join(httpd.davDir, 'keep', 'four.bin'), then, then)
    const before = proxy.stats.connections
    for (let i = 0; i < 10; i++) {
      expect(await backend.stat(`/keep/missing-${i}.bin`)).toBeNull()
      expect(await backend.stat('/keep/empty.bin')).toMatchObject({ size: 0, type: 'file' })
      expect(await backend.stat('/keep/four.bin')).toMatchObject({ size: 4, type: 'file', version: expect.any(String) })
    }
    expect(proxy.stats.connections - before).toBeLessThanOrEqual(1)
  })

  it('asks with HEAD where the GET is refused (an upload-only endpoint)', async () => {
    const faults = await startFaultServer() // its /store answers HEAD, PUT and DELETE; GET is 405
    const store = createHttpBackend({ url: `${faults.url}store/`, atomic: false })
    try {
      await write(store, '/up.bin', Buffer.from('uploaded'))
      expect(await store.stat('/up.bin')).toMatchObject({ size: 8, type: 'file' })
      expect(await store.stat('/missing.bin')).toBeNull()
    } finally {
      await store.close()
      await faults.stop()
    }
  })
})
