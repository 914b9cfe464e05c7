// End to end through the HTTP API against real servers: Apache httpd mod_dav, a Hadoop
// MiniDFSCluster with WebHDFS, a local dir; plus a fault server for retry and cancel paths.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import net from 'node:net'
import { request } from 'undici'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { startFaultServer } from './harness/faults.js'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile, sha256File, patternStream } from './helpers/files.js'
import { createHash } from 'node:crypto'

const MiB = 1 << 20
let httpd, hdfs, faults, sc, api, root

async function patternSha (size) {
  const hash = createHash('sha256')
  for await (const c of patternStream(size, size)) hash.update(c)
  return hash.digest('hex')
}

beforeAll(async () => {
  ;[httpd, hdfs, faults] = await Promise.all([startHttpd(), startHdfs(), startFaultServer()])
  await hdfs.command('mkdir /data www-data 755')
  await hdfs.command('mkdir /locked hdfs 755')
  root = await tempDir('sidecar-root-')
  sc = await startTestSidecar({
    roots: [root],
    targets: {
      local: { type: 'file', dir: await tempDir('sidecar-store-') },
      files: { type: 'http', url: httpd.uploadUrl },
      hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' },
      locked: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/locked' },
      forbidden: { type: 'http', url: httpd.forbiddenUrl },
      faults: { type: 'http', url: faults.url, atomic: false, concurrency: 2 }
    }
  })
  api = sc.api
})

afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await Promise.all([httpd?.stop(), hdfs?.stop(), faults?.stop()])
})

describe.each(['local', 'files', 'hdfs'])('round trips on target %s', (target) => {
  it.each([
    ['empty', 0],
    ['small', 1234567],
    ['multi-block (>128 MiB)', 130 * MiB + 7]
  ])('%s file: upload then download, sha256 equal', async (label, size) => {
    const src = path.join(root, `${target}-${size}.src`)
    const sha = await makeFile(src, size, size + 1)
    const up = await api.run({ direction: 'upload', target, local: src, remote: `/rt/${target}/${size}.bin`, sha256: sha })
    expect(up).toMatchObject({ state: 'succeeded', bytes: size, size, sha256: sha, attempts: 1, error: null })
    const dst = path.join(root, `${target}-${size}.back`)
    const down = await api.run({ direction: 'download', target, local: dst, remote: `/rt/${target}/${size}.bin` })
    expect(down).toMatchObject({ state: 'succeeded', bytes: size, sha256: sha })
    expect(await sha256File(dst)).toBe(sha)
    await fs.rm(src)
    await fs.rm(dst)
  })

  it('honours overwrite on upload and download', async () => {
    const a = path.join(root, `${target}-ow-a`)
    const b = path.join(root, `${target}-ow-b`)
    await fs.writeFile(a, 'first')
    await fs.writeFile(b, 'second version')
    const remote = `/ow/${target}/file.txt`
    expect(await api.run({ direction: 'upload', target, local: a, remote })).toMatchObject({ state: 'succeeded' })
    const refused = await api.run({ direction: 'upload', target, local: b, remote })
    expect(refused).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'REMOTE_EXISTS' } })
    expect(await api.run({ direction: 'upload', target, local: b, remote, overwrite: true })).toMatchObject({ state: 'succeeded' })

    const out = path.join(root, `${target}-ow-out`)
    await fs.writeFile(out, 'keep me')
    const kept = await api.run({ direction: 'download', target, local: out, remote })
    expect(kept).toMatchObject({ state: 'failed', error: { code: 'LOCAL_EXISTS' } })
    expect(await fs.readFile(out, 'utf8')).toBe('keep me')
    expect(await api.run({ direction: 'download', target, local: out, remote, overwrite: true })).toMatchObject({ state: 'succeeded' })
    expect(await fs.readFile(out, 'utf8')).toBe('second version')
  })

  it('fails a download of a missing remote file at once, leaving no temp file', async () => {
    const out = path.join(root, `${target}-missing`)
    const job = await api.run({ direction: 'download', target, local: out, remote: '/no/such/file.bin' })
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'REMOTE_NOT_FOUND' } })
    expect((await fs.readdir(root)).filter((n) => n.includes('missing'))).toEqual([])
  })

  it('fails on a sha256 mismatch and publishes nothing', async () => {
    const src = path.join(root, `${target}-sha`)
    await fs.writeFile(src, 'content')
    const remote = `/sha/${target}.txt`
    const job = await api.run({ direction: 'upload', target, local: src, remote, sha256: 'a'.repeat(64) })
    expect(job).toMatchObject({ state: 'failed', error: { code: 'SHA256_MISMATCH' } })
    const out = path.join(root, `${target}-sha-out`)
    expect((await api.run({ direction: 'download', target, local: out, remote })).error.code).toBe('REMOTE_NOT_FOUND')
  })
})

describe('remote errors', () => {
  it('maps an HDFS AccessControlException to PERMISSION_DENIED and keeps the Java class', async () => {
    const src = path.join(root, 'denied')
    await fs.writeFile(src, 'x')
    const job = await api.run({ direction: 'upload', target: 'locked', local: src, remote: '/x.txt' })
    expect(job).toMatchObject({
      state: 'failed',
      attempts: 1,
      error: { code: 'PERMISSION_DENIED', exception: 'AccessControlException', javaClassName: 'org.apache.hadoop.security.AccessControlException' }
    })
  })

  it('maps an httpd 403 to PERMISSION_DENIED', async () => {
    const src = path.join(root, 'denied-http')
    await fs.writeFile(src, 'x')
    const job = await api.run({ direction: 'upload', target: 'forbidden', local: src, remote: '/x.txt' })
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'PERMISSION_DENIED', status: 403 } })
  })

  it('retries 503 with backoff and succeeds', async () => {
    const out = path.join(root, 'flaky')
    const job = await api.run({ direction: 'download', target: 'faults', local: out, remote: '/flaky/k1/2/5000' })
    expect(job).toMatchObject({ state: 'succeeded', attempts: 3, sha256: await patternSha(5000) })
  })

  it('gives up after retry.attempts on a persistent 503', async () => {
    const job = await api.run({ direction: 'download', target: 'faults', local: path.join(root, 'down'), remote: '/status/503' })
    expect(job).toMatchObject({ state: 'failed', attempts: 3, error: { code: 'REMOTE_UNAVAILABLE', status: 503 } })
  })

  it('does not retry a 4xx', async () => {
    const job = await api.run({ direction: 'download', target: 'faults', local: path.join(root, 'bad'), remote: '/status/400' })
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'REMOTE_REJECTED', status: 400 } })
  })

  it('retries an upload whose PUT got 503', async () => {
    const src = path.join(root, 'flaky-up')
    await fs.writeFile(src, 'payload')
    const job = await api.run({ direction: 'upload', target: 'faults', local: src, remote: '/store/flaky-1-up.bin' })
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2 })
    expect(faults.store.get('flaky-1-up.bin')).toBe(7)
  })
})

describe('job API', () => {
  it('cancels a running transfer and removes its temp file', async () => {
    const out = path.join(root, 'cancelled')
    const { json } = await api.submit({ direction: 'download', target: 'faults', local: out, remote: `/slow/${8 * MiB}/${MiB}` })
    await waitFor(async () => (await api.job(json.id)).json.bytes > 0)
    const del = await api.call('DELETE', `/v1/jobs/${json.id}`)
    expect(del.json).toMatchObject({ state: 'cancelled', error: { code: 'CANCELLED' } })
    expect((await fs.readdir(root)).filter((n) => n.includes('cancelled'))).toEqual([])
    const again = await api.call('DELETE', `/v1/jobs/${json.id}`)
    expect(again).toMatchObject({ status: 409, json: { error: { code: 'JOB_FINISHED' } } })
  })

  it('long-polls with ?wait and lists by state', async () => {
    const out = path.join(root, 'polled')
    const { json } = await api.submit({ direction: 'download', target: 'faults', local: out, remote: `/slow/${MiB}/${4 * MiB}` })
    const early = await api.job(json.id, 0.05)
    expect(['queued', 'running']).toContain(early.json.state)
    const done = await api.job(json.id, 30)
    expect(done.json.state).toBe('succeeded')
    expect(done.json.rate).toBeGreaterThan(0)
    const list = await api.call('GET', '/v1/jobs?state=succeeded')
    expect(list.json.jobs.some((j) => j.id === json.id)).toBe(true)
    expect(list.json.jobs.every((j) => j.state === 'succeeded')).toBe(true)
  })

  it('treats a resubmitted id as the same job, a different body under that id as a conflict', async () => {
    const src = path.join(root, 'idem')
    await fs.writeFile(src, 'once')
    const body = { id: 'client-chosen-id-1', direction: 'upload', target: 'local', local: src, remote: '/idem.txt' }
    const first = await api.submit(body)
    const second = await api.submit(body)
    expect(first.status).toBe(202)
    expect(second.status).toBe(200)
    expect(second.json.id).toBe('client-chosen-id-1')
    const other = await api.submit({ ...body, remote: '/other.txt' })
    expect(other).toMatchObject({ status: 409, json: { error: { code: 'JOB_CONFLICT' } } })
  })

  it('accepts jobs over the unix socket, which has mode 0660', async () => {
    const st = await fs.stat(sc.socket)
    expect(st.mode & 0o777).toBe(0o660)
    const src = path.join(root, 'via-unix')
    await fs.writeFile(src, 'unix')
    const res = await request('http://localhost/v1/jobs', {
      method: 'POST',
      body: JSON.stringify({ direction: 'upload', target: 'local', local: src, remote: '/unix.txt' }),
      dispatcher: new (await import('undici')).Agent({ connect: { socketPath: sc.socket } })
    })
    expect(res.statusCode).toBe(202)
    const { id } = await res.body.json()
    expect((await api.job(id, 10)).json.state).toBe('succeeded')
  })

  it.each(['unix', 'tcp'])('runs the job of a raw %s client that writes and closes without reading', async (kind) => {
    const src = path.join(root, `raw-${kind}`)
    await fs.writeFile(src, 'fire and forget')
    const body = JSON.stringify({ direction: 'upload', target: 'local', local: src, remote: `/raw-${kind}.txt` })
    const raw = `POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
    const port = new URL(sc.url).port
    await new Promise((resolve, reject) => {
      const s = kind === 'unix' ? net.connect(sc.socket) : net.connect(port, '127.0.0.1')
      s.once('error', reject)
      s.once('connect', () => s.end(raw, () => { s.destroy(); resolve() }))
    })
    const job = await waitFor(async () => (await api.call('GET', '/v1/jobs?state=succeeded')).json.jobs.find((j) => j.remote === `/raw-${kind}.txt`))
    expect(job.sha256).toBe(await sha256File(src))
  })

  it('exposes transfer metrics', async () => {
    const res = await api.call('GET', '/metrics')
    expect(res.status).toBe(200)
    expect(res.text).toMatch(/sidecar_transfers_total\{direction="upload",backend="webhdfs",via="sidecar",mode="streamed",outcome="succeeded"\} [1-9]/)
    expect(res.text).toMatch(/sidecar_transfer_bytes_total\{direction="download",backend="http",via="sidecar",mode="streamed"\} [1-9]/)
    expect(res.text).toMatch(/sidecar_transfer_retries_total\{backend="http",code="REMOTE_UNAVAILABLE"\} [1-9]/)
  })
})

describe('bad input gets a coded 4xx and nothing runs', () => {
  let outside, link, linkDir
  beforeAll(async () => {
    outside = await tempDir('sidecar-outside-')
    await fs.writeFile(path.join(outside, 'secret'), 'secret')
    link = path.join(root, 'link-to-secret')
    await fs.symlink(path.join(outside, 'secret'), link)
    linkDir = path.join(root, 'link-dir')
    await fs.symlink(outside, linkDir)
    await fs.writeFile(path.join(root, 'ok.txt'), 'ok')
  })

  const ok = () => ({ direction: 'upload', target: 'local', local: path.join(root, 'ok.txt'), remote: '/bad/x' })
  const cases = [
    ['malformed JSON', () => '{"direction":', 400, 'INVALID_JSON'],
    ['an array', () => '[]', 400, 'INVALID_REQUEST'],
    ['a JSON string', () => '"upload"', 400, 'INVALID_JSON'],
    ['an unknown field', () => ({ ...ok(), url: 'http://evil/' }), 400, 'INVALID_REQUEST'],
    ['a bad direction', () => ({ ...ok(), direction: 'sideways' }), 400, 'INVALID_REQUEST'],
    ['an unknown target', () => ({ ...ok(), target: 'nope' }), 400, 'UNKNOWN_TARGET'],
    ['a URL as target', () => ({ ...ok(), target: 'http://127.0.0.1:1/' }), 400, 'UNKNOWN_TARGET'],
    ['a prototype key as target', () => ({ ...ok(), target: '__proto__' }), 400, 'UNKNOWN_TARGET'],
    ['a relative local path', () => ({ ...ok(), local: 'ok.txt' }), 400, 'INVALID_PATH'],
    ['a NUL byte in local', () => ({ ...ok(), local: path.join(root, 'ok.txt\u0000.jpg') }), 400, 'INVALID_PATH'],
    ['a local path outside the roots', () => ({ ...ok(), local: '/etc/passwd' }), 403, 'PATH_NOT_ALLOWED'],
    ['a .. escape in local', () => ({ ...ok(), local: `${root}/../../etc/passwd` }), 403, 'PATH_NOT_ALLOWED'],
    ['a symlink out of the root', () => ({ ...ok(), local: link }), 403, 'PATH_NOT_ALLOWED'],
    ['a download through a symlinked dir', () => ({ ...ok(), direction: 'download', local: path.join(linkDir, 'x') }), 403, 'PATH_NOT_ALLOWED'],
    ['a missing local file', () => ({ ...ok(), local: path.join(root, 'absent') }), 422, 'LOCAL_NOT_FOUND'],
    ['a .. in remote', () => ({ ...ok(), remote: '/a/../../etc/x' }), 400, 'INVALID_PATH'],
    ['a NUL in remote', () => ({ ...ok(), remote: '/a\u0000b' }), 400, 'INVALID_PATH'],
    ['a relative remote', () => ({ ...ok(), remote: 'a/b' }), 400, 'INVALID_PATH'],
    ['the base itself as remote', () => ({ ...ok(), remote: '/' }), 400, 'INVALID_PATH'],
    ['a CRLF in remote', () => ({ ...ok(), remote: '/a\r\nX-Injected: 1' }), 400, 'INVALID_PATH'],
    ['a bad sha256', () => ({ ...ok(), sha256: 'xyz' }), 400, 'INVALID_REQUEST'],
    ['a string overwrite', () => ({ ...ok(), overwrite: 'yes' }), 400, 'INVALID_REQUEST'],
    ['a bad id', () => ({ ...ok(), id: '../../x' }), 400, 'INVALID_REQUEST'],
    ['a body over 64 KiB', () => ({ ...ok(), remote: '/' + 'a'.repeat(70000) }), 413, 'PAYLOAD_TOO_LARGE'],
    // Not decoded as U+FFFD into a remote name nobody asked for.
    ['invalid UTF-8 in remote', () => {
      const [head, tail] = JSON.stringify(ok()).split('/bad/x')
      return Buffer.concat([Buffer.from(head + '/bad/'), Buffer.from([0xc0, 0xaf]), Buffer.from('x' + tail)]) // an overlong "/"
    }, 400, 'INVALID_JSON']
  ]
  it.each(cases)('%s', async (label, body, status, code) => {
    const before = sc.scheduler.jobs.size
    const res = await api.call('POST', '/v1/jobs', body())
    expect(res.status).toBe(status)
    expect(res.json.error.code).toBe(code)
    expect(typeof res.json.error.message).toBe('string')
    expect(sc.scheduler.jobs.size).toBe(before)
  })

  it.each([
    ['GET', '/v1/jobs/doesnotexist', 404, 'JOB_NOT_FOUND'],
    ['GET', '/v1/nothing', 404, 'NOT_FOUND'],
    ['PUT', '/v1/jobs', 405, 'METHOD_NOT_ALLOWED'],
    ['GET', '/v1/jobs?state=bogus', 400, 'INVALID_REQUEST'],
    ['GET', '/v1/jobs?limit=0', 400, 'INVALID_REQUEST'],
    // Routing is strict and case-sensitive: only the documented paths exist, for every method
    // (POST /v1/jobs, served before express, matches exactly too).
    ['GET', '/v1/jobs/', 404, 'NOT_FOUND'],
    ['GET', '/V1/JOBS', 404, 'NOT_FOUND'],
    ['GET', '/HEALTHZ', 404, 'NOT_FOUND'],
    ['PUT', '/v1/jobs/', 404, 'NOT_FOUND']
  ])('%s %s', async (method, p, status, code) => {
    const res = await api.call(method, p)
    expect(res.status).toBe(status)
    expect(res.json.error.code).toBe(code)
  })

  it.each(['/v1/jobs/', '/V1/JOBS', '/v1/Jobs', '/v1/jobs/?x=1'])('POST %s is no route (404 NOT_FOUND), and creates no job', async (p) => {
    const before = sc.scheduler.jobs.size
    const res = await api.call('POST', p, ok())
    expect(res).toMatchObject({ status: 404, json: { error: { code: 'NOT_FOUND' } } })
    expect(sc.scheduler.jobs.size).toBe(before)
  })

  it.each(['0x3', '', '1e1', '%203', '3.', '.5', '-1', '301', '300.001', 'Infinity'])('?wait=%s is 400 INVALID_REQUEST naming wait', async (w) => {
    const res = await api.call('GET', `/v1/jobs/doesnotexist?wait=${w}`)
    expect(res).toMatchObject({ status: 400, json: { error: { code: 'INVALID_REQUEST', message: expect.stringContaining('wait') } } })
  })

  // As ?wait=: plain digits only (Number() would take all of these).
  it.each(['0x10', '1e3', '%20%207%20', '5.0', ''])('GET /v1/jobs?limit=%s is 400 INVALID_REQUEST naming limit', async (l) => {
    const res = await api.call('GET', `/v1/jobs?limit=${l}`)
    expect(res).toMatchObject({ status: 400, json: { error: { code: 'INVALID_REQUEST', message: expect.stringContaining('limit') } } })
  })

  it.each([
    ['an object', '{"type":{"toString":1}}'],
    ['a list', JSON.stringify({ type: ['transfer'], via: 'php_curl', direction: 'upload', backend: 'http', mode: 'streamed', bytes: 1, seconds: 0.1, outcome: 'succeeded' })]
  ])('POST /v1/observations with a type that is %s is 400 INVALID_REQUEST, and counts nothing', async (what, body) => {
    const res = await api.call('POST', '/v1/observations', body)
    expect(res).toMatchObject({ status: 400, json: { error: { code: 'INVALID_REQUEST' } } }) // before: 500, or 202
    expect((await api.call('GET', '/metrics')).text).not.toContain('"undefined"')
  })

  it.each(['0', '2.5', '300', '007'])('?wait=%s is a valid wait', async (w) => {
    expect((await api.call('GET', `/v1/jobs/doesnotexist?wait=${w}`)).json.error.code).toBe('JOB_NOT_FOUND')
  })

  it.each(['tcp', 'unix'])('CONNECT over %s is answered 405 METHOD_NOT_ALLOWED as JSON, then closed; an Upgrade is a plain request', async (kind) => {
    const exchange = (text) => new Promise((resolve, reject) => {
      const s = kind === 'unix' ? net.connect(sc.socket) : net.connect(new URL(sc.url).port, '127.0.0.1')
      let out = ''
      s.once('error', reject)
      s.on('data', (d) => { out += d })
      s.once('close', () => resolve(out))
      s.once('connect', () => s.write(text))
    })
    const tunnel = await exchange('CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n') // resolves once the server closes
    expect(tunnel).toMatch(/^HTTP\/1.1 405 Method Not Allowed\r\n[\s\S]*\r\n\r\n\{"error":\{"code":"METHOD_NOT_ALLOWED","message":"CONNECT is not allowed"\}\}$/)
    const upgrade = await exchange('GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\r\n')
    expect(upgrade).toMatch(/^HTTP\/1.1 200 OK\r\n[\s\S]*"status":"ok"/)
  })

  it('a download never writes outside the roots even when the parent is swapped for a symlink', async () => {
    const dir = path.join(root, 'swap')
    await fs.mkdir(dir)
    const { json } = await api.submit({ direction: 'download', target: 'faults', local: path.join(dir, 'f'), remote: `/slow/${MiB}/${4 * MiB}` })
    await fs.rm(dir, { recursive: true })
    await fs.symlink(outside, dir)
    const job = (await api.job(json.id, 30)).json
    expect(job.state).toBe('failed')
    expect(await fs.readdir(outside)).toEqual(['secret'])
  })

  it('is still healthy', async () => {
    expect((await api.call('GET', '/healthz')).json.status).toBe('ok')
  })
})

describe('web pages cannot drive a tokenless sidecar', () => {
  // What a browser on the web host would send: from another site (Origin, Sec-Fetch-Site), or to
  // the attacker's own name resolving to 127.0.0.1 (DNS rebinding: Host is that name).
  const raw = (conn, lines, body = '') => new Promise((resolve, reject) => {
    const s = conn()
    let out = ''
    s.once('error', reject)
    s.on('data', (d) => { out += d })
    s.on('end', () => resolve(out))
    s.once('connect', () => s.write([...lines, `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close', '', body].join('\r\n')))
  })
  const tcp = () => net.connect(new URL(sc.url).port, '127.0.0.1')
  const unix = () => net.connect(sc.socket)
  const job = (name) => JSON.stringify({ direction: 'upload', target: 'local', local: path.join(root, 'ok.txt'), remote: `/browser/${name}` })

  it.each([
    ['a cross-site POST', tcp, ['POST /v1/jobs HTTP/1.1', 'Host: 127.0.0.1:8765', 'Origin: https://evil.example', 'Content-Type: text/plain']],
    ['an Origin of null', tcp, ['POST /v1/jobs HTTP/1.1', 'Host: localhost', 'Origin: null']],
    ['a fetch from another site', tcp, ['GET /v1/jobs HTTP/1.1', 'Host: localhost', 'Sec-Fetch-Site: cross-site']],
    ['a rebound name', tcp, ['GET /v1/jobs HTTP/1.1', 'Host: evil.example:8765']],
    ['a rebound name posting a job', tcp, ['POST /v1/jobs HTTP/1.1', 'Host: evil.example', 'Content-Type: application/json']],
    ['a rebound same-origin fetch', tcp, ['GET /metrics HTTP/1.1', 'Host: 127.0.0.1.evil.example', 'Sec-Fetch-Site: same-origin']],
    ['an Origin over the unix socket', unix, ['DELETE /v1/jobs/x HTTP/1.1', 'Host: localhost', 'Origin: https://evil.example']]
  ])('refuses %s with 403 BROWSER_REFUSED, creating nothing', async (name, conn, lines) => {
    const out = await raw(conn, lines, lines[0].startsWith('POST') ? job(name) : '')
    expect(out).toMatch(/^HTTP\/1.1 403[\s\S]*"code":"BROWSER_REFUSED"/)
    expect((await api.call('GET', '/v1/jobs')).json.jobs.some((j) => j.remote === `/browser/${name}`)).toBe(false)
    const [method, target] = lines[0].split(' ')
    expect(sc.logs.records().some((r) => r.msg === 'request refused' && r.code === 'BROWSER_REFUSED' && r.method === method && r.path === target)).toBe(true)
  })

  it.each([
    ['the loopback by name', tcp, 'Host: localhost:1234'],
    ['an IPv4 loopback address', tcp, 'Host: 127.0.0.2'],
    ['the IPv6 loopback', tcp, 'Host: [::1]:8765'],
    ['any name over the unix socket', unix, 'Host: sidecar.internal']
  ])('takes %s, and an address typed in a browser (Sec-Fetch-Site: none)', async (name, conn, host) => {
    expect(await raw(conn, ['POST /v1/jobs HTTP/1.1', host, 'Content-Type: application/json'], job(name))).toMatch(/^HTTP\/1.1 202/)
    expect(await raw(conn, ['GET /healthz HTTP/1.1', host, 'Sec-Fetch-Site: none'])).toMatch(/^HTTP\/1.1 200/)
  })
})

describe('token and logs', () => {
  const token = 'test-token-0123456789abcdef'
  let secured
  beforeAll(async () => {
    secured = await startTestSidecar({ roots: [root], token, targets: { local: { type: 'file', dir: await tempDir() } } })
  })
  afterAll(() => secured?.stop({ graceMs: 0 }))

  it('requires the bearer token everywhere but /healthz', async () => {
    const url = secured.url
    const no = await request(`${url}/v1/jobs`)
    expect(no.statusCode).toBe(401)
    expect((await no.body.json()).error.code).toBe('UNAUTHORIZED')
    const wrong = await request(`${url}/metrics`, { headers: { authorization: 'Bearer wrong-token-0123456789' } })
    expect(wrong.statusCode).toBe(401)
    await wrong.body.dump()
    expect((await request(`${url}/healthz`)).statusCode).toBe(200)
    const src = path.join(root, 'tok')
    await fs.writeFile(src, 't')
    const job = await secured.api.run({ direction: 'upload', target: 'local', local: src, remote: '/t' })
    expect(job.state).toBe('succeeded')
    // With a token, a page could not have sent it: no browser checks (a non-loopback listener is
    // reached by other names).
    const named = await request(`${url}/v1/jobs`, { headers: { authorization: `Bearer ${token}`, host: 'sidecar.example', origin: 'https://app.example' } })
    expect(named.statusCode).toBe(200)
    await named.body.dump()
  })

  it('never writes the token to the logs, and logs each job state with its id', async () => {
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(secured.logs.lines.join('\n')).not.toContain(token)
    const states = secured.logs.records().filter((r) => r.msg === 'job state').map((r) => r.state)
    expect(states).toEqual(expect.arrayContaining(['queued', 'running', 'succeeded']))
  })
})
