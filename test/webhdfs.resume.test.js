// Downloads that break continue from the bytes already on disk: WebHDFS with `offset`, httpd with
// `Range` (+ If-Range), a local store from `start`; verified at the end by size, sha256 and (for
// WebHDFS) HDFS's own checksum, so a wrong resume cannot pass. A changed remote file starts over.
// Faults come from tcp-proxy.js in front of the datanode and httpd: a reset or a stall mid-body, a
// trickle slow enough to kill -9 the daemon in the middle.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import net from 'node:net'
import { createWebHdfsBackend } from '../src/backends/webhdfs.js'
import { createHttpBackend } from '../src/backends/http.js'
import { createFileBackend } from '../src/backends/file.js'
import { upload, download } from '../src/transfer.js'
import { toSidecarError } from '../src/errors.js'
import { startHdfs } from './harness/hdfs.js'
import { startHttpd } from './harness/httpd.js'
import { startTcpProxy, startHdfsProxies } from './harness/tcp-proxy.js'
import { startTestSidecar, spawnSidecar, client, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile, sha256File } from './helpers/files.js'

const MiB = 1 << 20
let hdfs, proxies, httpd, httpProxy, root, hdfsBackend

beforeAll(async () => {
  ;[hdfs, httpd] = await Promise.all([startHdfs(), startHttpd()])
  await hdfs.command('mkdir /data www-data 755')
  proxies = await startHdfsProxies(hdfs)
  httpProxy = await startTcpProxy({ target: new URL(httpd.uploadUrl).host })
  root = await tempDir('resume-root-')
  hdfsBackend = createWebHdfsBackend({ name: 'hdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', checksum: true })
})
afterAll(async () => {
  await Promise.all([proxies?.stop(), httpProxy?.stop()])
  await Promise.all([hdfs?.stop(), httpd?.stop()])
})
afterEach(() => {
  for (const p of [...(proxies?.datanodes ?? []), httpProxy]) p?.fault(null)
})

async function putHdfs (remote, size, seed) {
  const local = path.join(root, `src-${seed}`)
  const sha = await makeFile(local, size, seed)
  await upload({ id: `put${seed}abcdef`, direction: 'upload', target: 'hdfs', local, remote, overwrite: true, attempts: 1 }, { backend: hdfsBackend, roots: [root] })
  await fs.rm(local)
  return sha
}

const openOffsets = (proxy, name) => proxy.requests.map((r) => r.line).filter((l) => l.includes(name) && l.includes('op=OPEN')).map((l) => Number(/[?&]offset=(\d+)/.exec(l)?.[1] ?? 0))
// What the scheduler would make of an attempt's failure.
const failure = (promise) => promise.then(() => null, (err) => toSidecarError(err))
// A file on httpd, last modified a while ago: this httpd sends no ETag, and a Last-Modified of
// the current second is too weak a validator for If-Range (RFC 9110 13.1.5).
async function davFile (name, size, seed, ageSeconds = 100) {
  const file = path.join(httpd.davDir, name)
  const sha = await makeFile(file, size, seed)
  const then = new Date(Date.now() - ageSeconds * 1000)
  await fs.utimes(file, then, then)
  return sha
}
const noPartFiles = async () => expect((await fs.readdir(root)).filter((n) => n.endsWith('.part'))).toEqual([])

describe('through the daemon: a broken download continues where it stopped', () => {
  let sc
  beforeAll(async () => {
    sc = await startTestSidecar({
      roots: [root],
      targets: {
        hdfs: { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', retry: { attempts: 4, baseDelayMs: 50, maxDelayMs: 200 }, timeouts: { idleMs: 1500 } },
        files: { type: 'http', url: new URL('/upload/', httpProxy.url).href, retry: { attempts: 4, baseDelayMs: 50, maxDelayMs: 200 } }
      }
    })
  })
  afterAll(async () => { await sc?.stop({ graceMs: 0 }) })

  it('WebHDFS: a reset mid-body resumes at the bytes on disk (OPEN offset), and HDFS\'s checksum agrees', async () => {
    const sha = await putHdfs('/reset.bin', 12 * MiB + 5, 21)
    proxies.datanodes[0].fault({ resetAfter: 5 * MiB, connections: 1, match: /op=OPEN/ })
    const job = await sc.api.run({ direction: 'download', target: 'hdfs', local: path.join(root, 'reset.bin'), remote: '/reset.bin' })
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2, bytes: 12 * MiB + 5, sha256: sha, checksum: { algorithm: 'MD5-of-0MD5-of-512CRC32C' } })
    expect(job.resumedFrom).toBeGreaterThan(MiB)
    expect(job.resumedFrom).toBeLessThanOrEqual(5 * MiB)
    expect(openOffsets(proxies.datanodes[0], 'reset.bin')).toEqual([0, job.resumedFrom])
    expect(await sha256File(path.join(root, 'reset.bin'))).toBe(sha)
    await noPartFiles()
  })

  it('WebHDFS: a stalled datanode times out and the retry resumes', async () => {
    const sha = await putHdfs('/stall.bin', 6 * MiB, 22)
    proxies.datanodes[0].fault({ stallAfter: 2 * MiB, connections: 1, match: /op=OPEN/ })
    const job = await sc.api.run({ direction: 'download', target: 'hdfs', local: path.join(root, 'stall.bin'), remote: '/stall.bin' })
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2, sha256: sha })
    expect(job.resumedFrom).toBeGreaterThan(MiB)
    expect(openOffsets(proxies.datanodes[0], 'stall.bin')).toEqual([0, job.resumedFrom])
    await noPartFiles()
  })

  it('httpd: a reset mid-body resumes with Range and If-Range', async () => {
    const sha = await davFile('reset-http.bin', 9 * MiB + 3, 23)
    httpProxy.fault({ resetAfter: 4 * MiB, connections: 1, match: /^GET \/upload\/reset-http/ })
    const job = await sc.api.run({ direction: 'download', target: 'files', local: path.join(root, 'reset-http.bin'), remote: '/reset-http.bin' })
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2, bytes: 9 * MiB + 3, sha256: sha })
    expect(job.resumedFrom).toBeGreaterThan(0) // what had reached the disk; bytes still in buffers are lost
    // The resumed GET (the stat that checks the version after it asks for the first byte only).
    const resumed = httpProxy.requests.filter((r) => r.line.startsWith('GET /upload/reset-http') && !/range: bytes=0-0\r?\n/i.test(r.head)).at(-1).head.toLowerCase()
    expect(resumed).toContain(`range: bytes=${job.resumedFrom}-`)
    expect(resumed).toMatch(/if-range: \S/)
    await noPartFiles()
  })

  it('a failed download does not keep its temp file for a resume that will not come', async () => {
    await putHdfs('/gone.bin', 10 * MiB, 24)
    proxies.datanodes[0].fault({ resetAfter: MiB, match: /op=OPEN/ }) // every attempt
    const job = await sc.api.run({ direction: 'download', target: 'hdfs', local: path.join(root, 'gone.bin'), remote: '/gone.bin' })
    expect(job).toMatchObject({ state: 'failed', attempts: 4, error: { code: 'NETWORK_ERROR' } })
    await noPartFiles()
  })
})

describe('resume decisions, attempt by attempt', () => {
  // The scheduler's part: attempts, and the journaled remote version (see onStart in scheduler.js).
  function attempts (job, backend) {
    const starts = []
    const deps = {
      backend,
      roots: [root],
      onStart: (info) => {
        starts.push(info)
        if (info.version !== undefined) job.remoteVersion = info.version
      }
    }
    return { starts, run: () => download(job, deps) }
  }
  const newJob = (local, remote, target) => ({ id: `rs${Math.random().toString(36).slice(2, 10)}`, direction: 'download', target, local, remote, overwrite: true, expectedSha256: null })

  it('WebHDFS: a remote file replaced between attempts is downloaded from the start', async () => {
    await putHdfs('/changed.bin', 4 * MiB, 25)
    const job = newJob(path.join(root, 'changed.bin'), '/changed.bin', 'hdfs')
    const { starts, run } = attempts(job, hdfsBackend)
    proxies.datanodes[0].fault({ resetAfter: 2 * MiB, connections: 1, match: /op=OPEN/ })
    expect(await failure(run())).toMatchObject({ code: 'NETWORK_ERROR' })
    const sha = await putHdfs('/changed.bin', 4 * MiB, 26) // same size, other bytes, new inode
    const done = await run()
    expect(starts.map((s) => s.resumedFrom)).toEqual([0, 0])
    expect(done.sha256).toBe(sha)
    expect(await sha256File(job.local)).toBe(sha)
  })

  it('httpd: a changed file answers the If-Range request with all of it, used from the start', async () => {
    const file = path.join(httpd.davDir, 'changed-http.bin')
    await davFile('changed-http.bin', 5 * MiB, 27, 100)
    const backend = createHttpBackend({ url: new URL('/upload/', httpProxy.url).href, atomic: true })
    const job = newJob(path.join(root, 'changed-http.bin'), '/changed-http.bin', 'files')
    const { starts, run } = attempts(job, backend)
    httpProxy.fault({ resetAfter: 2 * MiB, connections: 1, match: /^GET \/upload\/changed-http/ })
    expect(await failure(run())).toMatchObject({ retryable: true })
    const sha = await davFile('changed-http.bin.new', 5 * MiB, 28, 50)
    await fs.rename(file + '.new', file)
    const before = httpProxy.requests.length
    const done = await run()
    expect(starts.map((s) => s.resumedFrom)).toEqual([0, 0])
    expect(done.sha256).toBe(sha)
    expect(httpProxy.requests.length - before).toBe(1) // the If-Range GET itself carried the new file
  })

  it('a local store resumes from `start`, continuing the hash kept in memory', async () => {
    const dir = await tempDir('resume-store-')
    const sha = await makeFile(path.join(dir, 'f.bin'), 7 * MiB + 1, 29)
    const store = createFileBackend({ dir })
    let broken = false
    const backend = {
      ...store,
      async openRead (remote, opts) {
        const src = await store.openRead(remote, opts)
        if (broken) return src
        broken = true
        let seen = 0
        src.stream.on('data', (c) => {
          seen += c.length
          if (seen > 3 * MiB) src.stream.destroy(Object.assign(new Error('disk hiccup'), { code: 'ECONNRESET' }))
        })
        return src
      }
    }
    const job = newJob(path.join(root, 'store.bin'), '/f.bin', 'local')
    const { starts, run } = attempts(job, backend)
    expect(await failure(run())).toMatchObject({ retryable: true })
    const done = await run()
    expect(starts[1].resumedFrom).toBeGreaterThan(2 * MiB)
    expect(done.sha256).toBe(sha)
  })
})

describe('kill -9 of the daemon in the middle of a download', () => {
  let proc, api, config, stateDir
  beforeAll(async () => {
    stateDir = await tempDir('resume-state-')
    const port = await new Promise((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = s.address()
        s.close(() => resolve(port))
      })
    })
    config = {
      listen: [`127.0.0.1:${port}`],
      stateDir,
      roots: [root],
      retry: { attempts: 5, baseDelayMs: 50, maxDelayMs: 500 },
      targets: {
        hdfs: { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/data' },
        files: { type: 'http', url: new URL('/upload/', httpProxy.url).href }
      }
    }
    api = client(`http://127.0.0.1:${port}`)
  })
  afterEach(async () => { await proc?.kill('SIGKILL') })
  const start = async () => { proc = await spawnSidecar(config, { dir: stateDir }) }

  it.each([
    ['hdfs', () => proxies.datanodes[0], /op=OPEN/, '/killed.bin'],
    ['files', () => httpProxy, /^GET \/upload\/killed/, '/killed-http.bin']
  ])('target %s: after the restart the download continues from the temp file, hashed again', async (target, proxy, match, remote) => {
    const size = 16 * MiB
    const sha = target === 'hdfs' ? await putHdfs(remote, size, 30) : await davFile(remote.slice(1), size, 31)
    proxy().fault({ rate: 4 * MiB, match })
    await start()
    const local = path.join(root, `killed-${target}.bin`)
    const { json } = await api.submit({ direction: 'download', target, local, remote })
    await waitFor(async () => (await api.job(json.id)).json.bytes > 5 * MiB, { intervalMs: 10 })
    await proc.kill('SIGKILL')
    proxy().fault(null)
    await start()
    const job = (await api.job(json.id, 60)).json
    expect(job).toMatchObject({ state: 'succeeded', bytes: size, sha256: sha })
    expect(job.attempts).toBeGreaterThanOrEqual(2)
    expect(job.resumedFrom).toBeGreaterThan(4 * MiB)
    expect(await sha256File(local)).toBe(sha)
    await noPartFiles()
  }, 60000)
})
