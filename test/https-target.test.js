// Targets over HTTPS: a real Apache httpd with mod_ssl and mod_dav, and a real MiniDFSCluster serving
// WebHDFS over HTTPS only (namenode and datanode); and callbacks to an https server. The daemon
// uploads, downloads and calls back over TLS, trusting a private CA through node's
// NODE_EXTRA_CA_CERTS, and refuses a server whose certificate it cannot verify. A daemon with no
// https target or callback never loads node's TLS (src/node-http.js, src/metrics.js): it would cost
// RSS for nothing.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import https from 'node:https'
import http from 'node:http'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { spawnSidecar, client, tempDir, waitFor } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'
import { makeFile, sha256File } from './helpers/files.js'
import { selfSignedCert } from './helpers/tls.js'

const TLS_MODULES = ['NativeModule https', 'NativeModule tls', 'NativeModule _tls_wrap']

let dir, tls, secure, plain, hdfs
const daemons = []

beforeAll(async () => {
  dir = await tempDir('https-target-')
  tls = await selfSignedCert(dir)
  ;[secure, plain, hdfs] = await Promise.all([startHttpd({ tls }), startHttpd(), startHdfs({ tls })])
  await hdfs.command('mkdir /data www-data 755')
}, 180000)

afterAll(async () => {
  for (const d of daemons) await d.proc.kill('SIGKILL')
  await Promise.all([secure?.stop(), plain?.stop(), hdfs?.stop()])
})

// A daemon process with one target `t` (an http target at `url`, or `target`); `env` for the
// process (NODE_EXTRA_CA_CERTS); `extra` config.
async function daemon (url, { env, nodeArgs, target = { type: 'http', url }, extra = {} } = {}) {
  const port = await freePort()
  const stateDir = await tempDir('https-state-')
  const proc = await spawnSidecar({
    listen: [`127.0.0.1:${port}`],
    stateDir,
    roots: [dir],
    retry: { attempts: 2, baseDelayMs: 20, maxDelayMs: 100 },
    targets: { t: target },
    ...extra
  }, { dir: stateDir, env, nodeArgs })
  const d = { proc, port, api: client(`http://127.0.0.1:${port}`) }
  daemons.push(d)
  return d
}

describe('an http target over https (httpd with mod_ssl)', () => {
  it('uploads and downloads every byte over TLS, the private CA given by NODE_EXTRA_CA_CERTS', async () => {
    expect(secure.uploadUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/upload\/$/)
    const { api } = await daemon(secure.uploadUrl, { env: { NODE_EXTRA_CA_CERTS: tls.cert } })
    const src = path.join(dir, 'up.bin')
    await makeFile(src, 3 * 1024 * 1024 + 17, 5)

    const up = await api.run({ direction: 'upload', target: 't', local: src, remote: '/tls/up.bin' })
    expect(up.state, JSON.stringify(up.error)).toBe('succeeded')
    expect(up.sha256).toBe(await sha256File(src))
    expect(await sha256File(path.join(secure.davDir, 'tls', 'up.bin'))).toBe(up.sha256)

    const back = path.join(dir, 'back.bin')
    const down = await api.run({ direction: 'download', target: 't', local: back, remote: '/tls/up.bin' })
    expect(down.state, JSON.stringify(down.error)).toBe('succeeded')
    expect(await sha256File(back)).toBe(up.sha256)
  })

  it('refuses a server whose certificate it cannot verify, and says why', async () => {
    const { api } = await daemon(secure.uploadUrl)
    const src = path.join(dir, 'untrusted.bin')
    await makeFile(src, 4096, 6)
    const job = await api.run({ direction: 'upload', target: 't', local: src, remote: '/tls/untrusted.bin' })
    expect(job.state).toBe('failed')
    expect(job.error.message).toMatch(/certificate/i)
    await expect(fs.stat(path.join(secure.davDir, 'tls', 'untrusted.bin'))).rejects.toThrow(/ENOENT/)
  })
})

// GET /v1/stream from an https target: its body is read with node's own client on a connection of
// its own, like a plain-http one (http-get.js): not from the pool of the target's small requests,
// which streams held by slow clients filled, and without the server's idle timer running while the
// client does not read (the download was cut with TIMEOUT).
describe('GET /v1/stream from an http target over https', () => {
  let d
  // `rate`: bytes the client reads every 100 ms (a slow reader, never idle); `hold`: it reads nothing.
  const get = (remote, { rate = 0, hold = false, port = d.port } = {}) => new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: `/v1/stream/t${remote}`, agent: false }, (res) => {
      let bytes = 0
      let timer = null
      const done = (complete) => {
        clearInterval(timer)
        resolve({ status: res.statusCode, length: Number(res.headers['content-length']), bytes, complete })
      }
      res.once('end', () => done(res.complete))
      res.once('error', () => done(false))
      if (hold) {
        res.pause()
        return resolve({ res, req })
      }
      if (!rate) return res.on('data', (chunk) => { bytes += chunk.length })
      res.pause()
      timer = setInterval(() => {
        for (let n = 0, chunk; n < rate && (chunk = res.read(Math.min(rate - n, res.readableLength || 1))) !== null; n += chunk.length) bytes += chunk.length
        if (res.readableEnded || (res.readableLength === 0 && res.complete)) res.resume()
      }, 100)
    })
    req.on('error', reject)
  })
  beforeAll(async () => {
    await makeFile(path.join(secure.davDir, 'stream-big.bin'), 12 * 1024 * 1024, 8)
    await makeFile(path.join(secure.davDir, 'stream-small.bin'), 1000, 9)
    await secure.chownToServer(secure.davDir)
    d = await daemon(secure.uploadUrl, { env: { NODE_EXTRA_CA_CERTS: tls.cert }, target: { type: 'http', url: secure.uploadUrl, concurrency: 1, timeouts: { idleMs: 2000 } } })
  })

  // 640 KiB/s: the server's socket then waits for the client longer than idleMs at a time.
  it('a client reading slowly but steadily gets every byte', async () => {
    const got = await get('/stream-big.bin', { rate: 64 * 1024 })
    expect(got).toMatchObject({ status: 200, length: 12 * 1024 * 1024, bytes: 12 * 1024 * 1024, complete: true })
  }, 60000)

  it('streams held open by their clients leave the target\'s other requests free', async () => {
    // concurrency 1: the target's pool of small requests has 2 sockets; idleMs long enough that
    // the held streams are not cut meanwhile.
    const patient = await daemon(secure.uploadUrl, { env: { NODE_EXTRA_CA_CERTS: tls.cert }, target: { type: 'http', url: secure.uploadUrl, concurrency: 1, timeouts: { idleMs: 60000 } } })
    const held = await Promise.all([1, 2].map(() => get('/stream-big.bin', { hold: true, port: patient.port })))
    try {
      const small = get('/stream-small.bin', { port: patient.port })
      const waited = new Promise((resolve) => setTimeout(() => resolve('still waiting behind the held streams'), 10000))
      expect(await Promise.race([small, waited])).toMatchObject({ status: 200, bytes: 1000 })
    } finally {
      for (const h of held) h.req.destroy()
    }
  })
})

describe('a webhdfs target over https (MiniDFSCluster, HTTPS only)', () => {
  it('uploads, checks HDFS\'s checksum and downloads over TLS, the namenode\'s redirects to the datanode included', async () => {
    expect(hdfs.namenodes[0]).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/)
    const target = { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data', checksum: true }
    const { api } = await daemon(null, { target, env: { NODE_EXTRA_CA_CERTS: tls.cert } })
    const src = path.join(dir, 'hdfs-up.bin')
    await makeFile(src, 3 * 1024 * 1024 + 5, 8)

    const up = await api.run({ direction: 'upload', target: 't', local: src, remote: '/tls/up.bin' })
    expect(up.state, JSON.stringify(up.error)).toBe('succeeded')
    expect(up.sha256).toBe(await sha256File(src))
    expect(up.checksum?.algorithm).toMatch(/^MD5-of-\d+MD5-of-512CRC32C$/)

    const back = path.join(dir, 'hdfs-back.bin')
    const down = await api.run({ direction: 'download', target: 't', local: back, remote: '/tls/up.bin' })
    expect(down.state, JSON.stringify(down.error)).toBe('succeeded')
    expect(await sha256File(back)).toBe(up.sha256)
    expect(down.checksum).toEqual(up.checksum)
  })

  it('refuses a namenode whose certificate it cannot verify', async () => {
    const target = { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' }
    const { api } = await daemon(null, { target })
    const src = path.join(dir, 'hdfs-untrusted.bin')
    await makeFile(src, 4096, 9)
    const job = await api.run({ direction: 'upload', target: 't', local: src, remote: '/tls/untrusted.bin' })
    expect(job.state).toBe('failed')
    expect(job.error.message).toMatch(/certificate/i)
  })
})

describe('callbacks over https', () => {
  // A node https server with the test certificate, recording the callbacks it is sent.
  async function hookServer () {
    const received = []
    const server = https.createServer({ cert: await fs.readFile(tls.cert), key: await fs.readFile(tls.key) }, (req, res) => {
      const chunks = []
      req.on('data', (c) => chunks.push(c))
      req.on('end', () => {
        received.push({ url: req.url, event: req.headers['x-sidecar-event'], body: JSON.parse(Buffer.concat(chunks)) })
        res.writeHead(204).end()
      })
    })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    return { received, base: `https://127.0.0.1:${server.address().port}/hooks/`, close: () => server.close() }
  }

  it('delivers a job\'s final record to an https callback it can verify, and gives up on one it cannot', async () => {
    const hooks = await hookServer()
    try {
      const extra = { callbacks: { allow: [hooks.base], attempts: 2, baseDelayMs: 20, maxDelayMs: 50, timeoutMs: 5000 } }
      const src = path.join(dir, 'cb.bin')
      await makeFile(src, 4096, 10)

      const trusted = await daemon(plain.uploadUrl, { env: { NODE_EXTRA_CA_CERTS: tls.cert }, extra })
      const job = await trusted.api.run({ direction: 'upload', target: 't', local: src, remote: '/cb/a.bin', callback: `${hooks.base}a` })
      expect(job.state).toBe('succeeded')
      await waitFor(async () => (await trusted.api.job(job.id)).json.callbackState === 'delivered')
      expect(hooks.received).toEqual([{ url: '/hooks/a', event: 'job.finished', body: expect.objectContaining({ id: job.id, state: 'succeeded' }) }])

      const untrusted = await daemon(plain.uploadUrl, { extra })
      const other = await untrusted.api.run({ direction: 'upload', target: 't', local: src, remote: '/cb/b.bin', callback: `${hooks.base}b` })
      expect(other.state).toBe('succeeded')
      await waitFor(async () => (await untrusted.api.job(other.id)).json.callbackState === 'failed')
      expect(hooks.received.map((r) => r.url)).toEqual(['/hooks/a']) // nothing reached the server from it
    } finally {
      hooks.close()
    }
  })
})

describe('node TLS and the CRC addon only on demand', () => {
  it('a daemon whose targets are plain http has loaded neither node:https, tls nor the CRC addon after a transfer and a /metrics scrape', async () => {
    const out = path.join(dir, 'modules.json')
    // Preloaded into the daemon: its list of loaded built-ins and its memory map, written when it exits.
    const probe = 'data:text/javascript,' + encodeURIComponent(
      `import fs from 'node:fs'; process.on('exit', () => fs.writeFileSync(${JSON.stringify(out)}, JSON.stringify({ modules: process.moduleLoadList, maps: fs.readFileSync('/proc/self/maps', 'utf8') })))`)
    const { proc, api } = await daemon(plain.uploadUrl, { nodeArgs: ['--import', probe] })
    const src = path.join(dir, 'plain.bin')
    await makeFile(src, 64 * 1024, 7)
    const job = await api.run({ direction: 'upload', target: 't', local: src, remote: '/plain/plain.bin' })
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded')
    expect((await api.call('GET', '/metrics')).status).toBe(200)
    expect(await proc.kill('SIGTERM')).toEqual({ code: 0, signal: null })

    const { modules, maps } = JSON.parse(await fs.readFile(out, 'utf8'))
    expect(modules).toContain('NativeModule http') // the probe saw the daemon's modules
    expect(modules.filter((m) => TLS_MODULES.includes(m))).toEqual([])
    expect(maps).toMatch(/\/bin\/node$/m) // …and its mappings
    expect(maps.split('\n').filter((line) => line.includes('@node-rs/crc32'))).toEqual([])
  })
})
