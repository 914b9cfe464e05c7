// The daemon side of the PHP hand-off: spool ingestion, observations, completion callbacks and the
// /v1/stream download proxy (against the real httpd and MiniDFSCluster).
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import http from 'node:http'
import net from 'node:net'
import crypto from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { request } from 'undici'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'
import { freePort } from './helpers/ports.js'

const MiB = 1 << 20
const secret = 'callback-secret-0123456789'
let httpd, hdfs, sc, api, root, hooks, received

async function startHooks () {
  received = []
  let failFirst = 1
  const server = http.createServer(async (req, res) => {
    let body = ''
    for await (const c of req) body += c
    if (req.url.startsWith('/hooks/flaky') && failFirst-- > 0) return res.writeHead(500).end()
    received.push({ url: req.url, headers: req.headers, body })
    res.writeHead(204).end()
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}`, stop: () => new Promise((resolve) => server.close(resolve)) }
}

beforeAll(async () => {
  ;[httpd, hdfs, hooks] = await Promise.all([startHttpd(), startHdfs(), startHooks()])
  await hdfs.command('mkdir /data www-data 755')
  root = await tempDir('handoff-root-')
  const stateDir = await tempDir('handoff-state-')
  await fs.mkdir(path.join(stateDir, 'spool'))
  await fs.writeFile(path.join(root, 'early.txt'), 'spooled while the daemon was down')
  await fs.writeFile(path.join(stateDir, 'spool', 'early-job-0001.json'), JSON.stringify({
    id: 'early-job-0001', direction: 'upload', target: 'local', local: path.join(root, 'early.txt'), remote: '/early.txt'
  }))
  sc = await startTestSidecar({
    stateDir,
    roots: [root],
    extra: {
      spool: { intervalMs: 100 },
      callbacks: { allow: [`${hooks.url}/hooks/`], secret, attempts: 3, baseDelayMs: 20, maxDelayMs: 50 }
    },
    targets: {
      local: { type: 'file', dir: await tempDir('handoff-store-') },
      files: { type: 'http', url: httpd.uploadUrl },
      hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' },
      gone: { type: 'http', url: `http://127.0.0.1:${await freePort()}/` } // nothing listens there
    }
  })
  api = sc.api
})

afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await Promise.all([httpd?.stop(), hdfs?.stop(), hooks?.stop()])
})

const spoolFile = (id) => path.join(sc.config.spool.dir, `${id}.json`)
// As the PHP client writes it: a temp name, then a rename. A plain writeFile can be seen by the
// daemon's scan while still empty, and rejected as INVALID_JSON.
async function spoolWrite (file, data) {
  const tmp = path.join(path.dirname(file), `.tmp-test-${path.basename(file)}`)
  await fs.writeFile(tmp, data)
  await fs.rename(tmp, file)
}

describe('spool', () => {
  it('ingests files spooled before the start', async () => {
    expect((await api.job('early-job-0001', 10)).json).toMatchObject({ state: 'succeeded' })
    expect(await fs.readdir(sc.config.spool.dir)).toEqual([])
  })

  it('ingests a file spooled while running and removes it', async () => {
    await fs.writeFile(path.join(root, 'late.txt'), 'late')
    await spoolWrite(spoolFile('late-job-0001'), JSON.stringify({ id: 'late-job-0001', direction: 'upload', target: 'local', local: path.join(root, 'late.txt'), remote: '/late.txt' }))
    const job = await waitFor(async () => (await api.job('late-job-0001')).json?.state === 'succeeded')
    expect(job).toBe(true)
    await waitFor(async () => !(await fs.readdir(sc.config.spool.dir)).includes('late-job-0001.json'))
  })

  it('runs a job once when it was both accepted over the socket and spooled', async () => {
    await fs.writeFile(path.join(root, 'both.txt'), 'both')
    const body = { id: 'both-job-0001', direction: 'upload', target: 'local', local: path.join(root, 'both.txt'), remote: '/both.txt' }
    expect((await api.submit(body)).status).toBe(202)
    await spoolWrite(spoolFile('both-job-0001'), JSON.stringify(body))
    await waitFor(async () => !(await fs.readdir(sc.config.spool.dir)).includes('both-job-0001.json'))
    const job = (await api.job('both-job-0001', 10)).json
    expect(job).toMatchObject({ state: 'succeeded', attempts: 1 })
    expect(sc.logs.records().filter((r) => r.job === 'both-job-0001' && r.state === 'queued')).toHaveLength(1)
    expect((await api.call('GET', '/metrics')).text).toMatch(/sidecar_spool_files_total\{outcome="duplicate"\} 1/)
  })

  it('moves an invalid spool file to rejected/ with the reason', async () => {
    await spoolWrite(spoolFile('bad-job-00001'), JSON.stringify({ id: 'bad-job-00001', direction: 'upload', target: 'local', local: '/etc/passwd', remote: '/x' }))
    const rejected = path.join(sc.config.spool.dir, 'rejected')
    await waitFor(async () => (await fs.readdir(rejected).catch(() => [])).includes('bad-job-00001.json.error.json'))
    const reason = JSON.parse(await fs.readFile(path.join(rejected, 'bad-job-00001.json.error.json'), 'utf8'))
    expect(reason.error.code).toBe('PATH_NOT_ALLOWED')
    expect((await api.job('bad-job-00001')).status).toBe(404)
  })

  // The spool is writable by PHP: a symlink must not make the daemon read (and quote) any file,
  // a FIFO must not hang the scan.
  it('rejects a symlink and a FIFO without reading through them, and goes on ingesting', async () => {
    const secret = path.join(await tempDir('spool-secret-'), 'secret.txt')
    await fs.writeFile(secret, 'TOPSECRET-' + 'x'.repeat(50))
    await fs.symlink(secret, spoolFile('link-job-0001'))
    execFileSync('mkfifo', [spoolFile('fifo-job-0001')])
    const rejected = path.join(sc.config.spool.dir, 'rejected')
    await waitFor(async () => {
      const names = await fs.readdir(rejected).catch(() => [])
      return names.includes('link-job-0001.json.error.json') && names.includes('fifo-job-0001.json.error.json')
    })
    for (const id of ['link-job-0001', 'fifo-job-0001']) {
      const text = await fs.readFile(path.join(rejected, `${id}.json.error.json`), 'utf8')
      expect(JSON.parse(text).error.code).toBe('INVALID_REQUEST')
      expect(text).not.toContain('TOPSECRET')
    }
    await fs.writeFile(path.join(root, 'after.txt'), 'after')
    await spoolWrite(spoolFile('after-job-0001'), JSON.stringify({ id: 'after-job-0001', direction: 'upload', target: 'local', local: path.join(root, 'after.txt'), remote: '/after.txt' }))
    expect((await api.job('after-job-0001', 0)).status).toBe(404)
    await waitFor(async () => (await api.job('after-job-0001')).status === 200)
  })

  it('rejects a file that is not UTF-8', async () => {
    await fs.writeFile(path.join(root, 'utf.txt'), 'u')
    const job = JSON.stringify({ id: 'utf8-job-0001', direction: 'upload', target: 'local', local: path.join(root, 'utf.txt'), remote: '/utf-X.txt' })
    await spoolWrite(spoolFile('utf8-job-0001'), Buffer.from(job).map((b) => b === 0x58 ? 0xff : b)) // the X
    const file = path.join(sc.config.spool.dir, 'rejected', 'utf8-job-0001.json.error.json')
    await waitFor(async () => fs.access(file).then(() => true, () => false))
    expect(JSON.parse(await fs.readFile(file, 'utf8')).error).toEqual({ code: 'INVALID_JSON', message: 'the file is not valid UTF-8' })
    expect((await api.job('utf8-job-0001')).status).toBe(404)
  })

  it('rejects invalid JSON without quoting the content', async () => {
    await spoolWrite(spoolFile('json-job-0001'), 'TOPSECRET-not-json')
    const file = path.join(sc.config.spool.dir, 'rejected', 'json-job-0001.json.error.json')
    await waitFor(async () => fs.access(file).then(() => true, () => false))
    const text = await fs.readFile(file, 'utf8')
    expect(JSON.parse(text).error.code).toBe('INVALID_JSON')
    expect(text).not.toContain('TOPSECRET')
  })
})

describe('observations', () => {
  it('records direct php-curl transfers and hand-off times in the metrics', async () => {
    const t = { type: 'transfer', via: 'php_curl', direction: 'download', backend: 'http', mode: 'buffered', bytes: 8 * MiB, seconds: 0.05, peakMemoryBytes: 20 * MiB, outcome: 'succeeded' }
    expect((await api.call('POST', '/v1/observations', t)).status).toBe(202)
    expect((await api.call('POST', '/v1/observations', { type: 'handoff', transport: 'unix', acked: true, seconds: 0.00006 })).status).toBe(202)
    const text = (await api.call('GET', '/metrics')).text
    expect(text).toMatch(/sidecar_transfer_bytes_total\{direction="download",backend="http",via="php_curl",mode="buffered"\} 8388608/)
    expect(text).toMatch(/sidecar_php_peak_memory_bytes_count\{direction="download",backend="http",mode="buffered"\} 1/)
    expect(text).toMatch(/sidecar_php_handoff_seconds_count\{transport="unix",acked="true"\} 1/)
  })

  it.each([
    [{ type: 'transfer', via: 'curl_cli', direction: 'download', backend: 'http', mode: 'buffered', bytes: 1, seconds: 1, outcome: 'succeeded' }],
    [{ type: 'transfer', via: 'php_curl', direction: 'download', backend: 'http', mode: 'buffered', bytes: -1, seconds: 1, outcome: 'succeeded' }],
    [{ type: 'handoff', transport: 'unix', acked: 'yes', seconds: 0.1 }],
    [{ type: 'handoff', transport: 'unix', acked: true, seconds: 0.1, path: '/var/www' }],
    [{ type: 'other' }]
  ])('refuses %j with 400', async (body) => {
    const res = await api.call('POST', '/v1/observations', body)
    expect(res.status).toBe(400)
    expect(res.json.error.code).toBe('INVALID_REQUEST')
  })
})

describe('callbacks', () => {
  it('POSTs the final record, signed, to an allowed URL', async () => {
    await fs.writeFile(path.join(root, 'cb.txt'), 'cb')
    const { json } = await api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'cb.txt'), remote: '/cb.txt', callback: `${hooks.url}/hooks/done` })
    const hit = await waitFor(() => received.find((r) => r.headers['x-sidecar-job'] === json.id))
    const ts = hit.headers['x-sidecar-timestamp']
    const expected = 'sha256=' + crypto.createHmac('sha256', secret).update(`${ts}.${hit.body}`).digest('hex')
    expect(hit.headers['x-sidecar-signature']).toBe(expected)
    expect(JSON.parse(hit.body)).toMatchObject({ id: json.id, state: 'succeeded' })
    await waitFor(async () => (await api.job(json.id)).json.callbackState === 'delivered')
  })

  it('retries a failed delivery', async () => {
    await fs.writeFile(path.join(root, 'cb2.txt'), 'cb2')
    const { json } = await api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'cb2.txt'), remote: '/cb2.txt', callback: `${hooks.url}/hooks/flaky` })
    await waitFor(() => received.find((r) => r.headers['x-sidecar-job'] === json.id))
    await waitFor(async () => (await api.job(json.id)).json.callbackState === 'delivered')
  })

  it.each([
    ['another host', 'http://127.0.0.2:9/hooks/x'],
    ['a path outside the prefix', '/admin'],
    ['a dot-dot escape', '/hooks/../admin'],
    ['credentials', 'http://user:pw@127.0.0.1/hooks/']
  ])('refuses a callback to %s', async (label, url) => {
    await fs.writeFile(path.join(root, 'cb3.txt'), 'x')
    const callback = url.startsWith('/') ? `${hooks.url}${url}` : url
    const res = await api.submit({ direction: 'upload', target: 'local', local: path.join(root, 'cb3.txt'), remote: '/cb3.txt', callback })
    expect(res.status).toBe(400)
    expect(res.json.error.code).toBe('CALLBACK_NOT_ALLOWED')
  })
})

describe.each(['local', 'files', 'hdfs'])('GET /v1/stream on %s', (target) => {
  let data
  beforeAll(async () => {
    const src = path.join(root, `stream-${target}`)
    await makeFile(src, 3 * MiB + 5, 9)
    data = await fs.readFile(src)
    expect((await api.run({ direction: 'upload', target, local: src, remote: '/s/data.bin' })).state).toBe('succeeded')
  })

  const get = async (p, headers) => {
    const res = await request(`${sc.url}/v1/stream/${target}${p}`, { headers })
    return { status: res.statusCode, headers: res.headers, body: Buffer.from(await res.body.arrayBuffer()) }
  }

  it('streams the whole file with its length', async () => {
    const r = await get('/s/data.bin')
    expect(r.status).toBe(200)
    expect(r.headers['content-length']).toBe(String(data.length))
    expect(r.headers['accept-ranges']).toBe('bytes')
    expect(r.body.equals(data)).toBe(true)
  })

  it('serves a byte range and a suffix range', async () => {
    const r = await get('/s/data.bin', { range: 'bytes=1048570-1048600' })
    expect(r.status).toBe(206)
    expect(r.headers['content-range']).toBe(`bytes 1048570-1048600/${data.length}`)
    expect(r.body.equals(data.subarray(1048570, 1048601))).toBe(true)
    const tail = await get('/s/data.bin', { range: 'bytes=-10' })
    expect(tail.body.equals(data.subarray(data.length - 10))).toBe(true)
  })

  // RFC 9110 14.1.3: a suffix of an empty file is all of it, not a range past its end.
  it('answers the last bytes of an empty file with the whole (empty) file', async () => {
    const empty = path.join(root, `empty-${target}`)
    await fs.writeFile(empty, '')
    expect((await api.run({ direction: 'upload', target, local: empty, remote: '/s/empty.bin', overwrite: true })).state).toBe('succeeded')
    const r = await get('/s/empty.bin', { range: 'bytes=-5' })
    expect([r.status, r.headers['content-length'], r.body.length]).toEqual([200, '0', 0])
    expect((await get('/s/empty.bin', { range: 'bytes=0-' })).status).toBe(416)
  })

  // One request line for every stream, also one its client left before the end.
  it('logs a stream its client leaves, as aborted, with the status it had', async () => {
    // Larger than what the kernel's buffers take ahead of the client.
    const big = path.join(root, `stream-big-${target}`)
    await makeFile(big, 40 * MiB, 3)
    expect((await api.run({ direction: 'upload', target, local: big, remote: '/s/big.bin', overwrite: true })).state).toBe('succeeded')
    const left = await new Promise((resolve, reject) => {
      const req = http.get(`${sc.url}/v1/stream/${target}/s/big.bin`, (res) => {
        res.once('data', () => {
          req.destroy()
          resolve(res.statusCode)
        })
      })
      req.on('error', () => {})
      req.setTimeout(10000, () => reject(new Error('no answer')))
    })
    expect(left).toBe(200)
    await waitFor(() => sc.logs.records().some((l) => l.msg === 'request' && l.path === `/v1/stream/${target}/s/big.bin` && l.aborted))
    const line = sc.logs.records().find((l) => l.msg === 'request' && l.path === `/v1/stream/${target}/s/big.bin` && l.aborted)
    expect(line).toMatchObject({ method: 'GET', status: 200, aborted: true })
  })

  it('answers 416 past the end and 404 for a missing file', async () => {
    const r = await get('/s/data.bin', { range: `bytes=${data.length}-` })
    expect(r.status).toBe(416)
    expect(r.headers['content-range']).toBe(`bytes */${data.length}`)
    const missing = await get('/s/none.bin')
    expect(missing.status).toBe(404)
    expect(JSON.parse(missing.body).error.code).toBe('REMOTE_NOT_FOUND')
  })
})

describe('stream confinement', () => {
  it('refuses an encoded .. and an unknown target', async () => {
    const raw = (p) => new Promise((resolve) => {
      const s = net.connect(new URL(sc.url).port, '127.0.0.1', () => s.write(`GET ${p} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`))
      let out = ''
      s.on('data', (d) => { out += d })
      s.on('end', () => resolve(out))
    })
    expect(await raw('/v1/stream/local/%2e%2e/%2e%2e/etc/passwd')).toMatch(/^HTTP\/1.1 400[\s\S]*INVALID_PATH/)
    expect(await raw('/v1/stream/local/../../etc/passwd')).toMatch(/^HTTP\/1.1 (400|404)/)
    expect(await raw('/v1/stream/nope/x')).toMatch(/^HTTP\/1.1 400[\s\S]*UNKNOWN_TARGET/)
  })

  it('answers 503 NETWORK_ERROR with Retry-After when the target cannot be reached', async () => {
    for (const method of ['GET', 'HEAD']) {
      const r = await request(`${sc.url}/v1/stream/gone/a.bin`, { method })
      expect(r.statusCode).toBe(503)
      expect(r.headers['retry-after']).toBe('1')
      const body = await r.body.text()
      if (method === 'GET') expect(JSON.parse(body).error.code).toBe('NETWORK_ERROR')
    }
  })
})
