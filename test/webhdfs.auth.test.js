// WebHDFS authentication: `user.name`, a delegation token from the config (`delegation=`), and
// configured headers (e.g. Authorization for a gateway). The secrets travel where they must and
// nowhere else: never in a job record, an error, a log line or --check-config, although datanode
// Locations carry `delegation=` and error messages from servers may quote them.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import http from 'node:http'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHdfs } from './harness/hdfs.js'
import { startHdfsProxies } from './harness/tcp-proxy.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'
import { validateConfig, describeConfig } from '../src/config.js'

const TOKEN = 'HAAEd3d3LWRhdGEEd3d3LWRhdGEAigGUm2VdGooBlL9x4RoBAhRlj1oZh7G8SnGzVSq8kXNz_SECRET'
const GATEWAY = 'Bearer gateway-secret-0123456789'

describe('against a real (insecure) cluster: the token and headers are sent to the namenode', () => {
  let hdfs, proxies, sc, root
  beforeAll(async () => {
    hdfs = await startHdfs()
    await hdfs.command('mkdir /data www-data 755')
    proxies = await startHdfsProxies(hdfs)
    root = await tempDir('auth-root-')
    sc = await startTestSidecar({
      roots: [root],
      targets: { hdfs: { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', delegation: TOKEN, headers: { Authorization: GATEWAY } } }
    })
  })
  afterAll(async () => {
    await sc?.stop({ graceMs: 0 })
    await proxies?.stop()
    await hdfs?.stop()
  })

  it('uploads and downloads with delegation= and the Authorization header on every namenode call, none to a datanode of another origin', async () => {
    const src = path.join(root, 'a.bin')
    const sha = await makeFile(src, 200000, 1)
    expect(await sc.api.run({ direction: 'upload', target: 'hdfs', local: src, remote: '/a.bin' })).toMatchObject({ state: 'succeeded', sha256: sha })
    expect(await sc.api.run({ direction: 'download', target: 'hdfs', local: path.join(root, 'a.back'), remote: '/a.bin' })).toMatchObject({ state: 'succeeded', sha256: sha })
    const nn = proxies.namenodes[0].requests.filter((r) => r.line.includes('/webhdfs/v1/'))
    expect(nn.length).toBeGreaterThan(4)
    for (const r of nn) {
      expect(r.line).toContain(`delegation=${TOKEN}`)
      expect(r.head.toLowerCase()).toContain(`authorization: ${GATEWAY.toLowerCase()}`)
    }
    const dn = proxies.datanodes[0].requests
    expect(dn.length).toBeGreaterThan(1)
    for (const r of dn) expect(r.head.toLowerCase()).not.toContain('authorization')
  })

  it('keeps both out of job records and log lines', async () => {
    const missing = await sc.api.run({ direction: 'download', target: 'hdfs', local: path.join(root, 'none'), remote: '/missing.bin' })
    expect(missing.error.code).toBe('REMOTE_NOT_FOUND')
    const everything = (await sc.api.call('GET', '/v1/jobs')).text + sc.logs.lines.join('\n')
    expect(everything).not.toContain(TOKEN)
    expect(everything).not.toContain('gateway-secret')
  })
})

// A gateway in front of the cluster (Knox-like): the namenode answers with Locations on its own
// origin, which carry `delegation=`; the "datanode" behind it wants the Authorization header, and
// its errors quote the URL it was asked for, token included.
async function startGateway () {
  const data = Buffer.alloc(300000, 7)
  const seen = []
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://gw')
    seen.push({ url: req.url, authorization: req.headers.authorization })
    const op = url.searchParams.get('op')
    const file = url.pathname.replace(/^\/(dn\/)?webhdfs\/v1/, '')
    const json = (status, body) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
    if (req.headers.authorization !== GATEWAY) return json(401, { RemoteException: { exception: 'AuthenticationException', javaClassName: 'org.apache.hadoop.security.authentication.client.AuthenticationException', message: 'no gateway credentials' } })
    if (!url.pathname.startsWith('/dn/')) {
      if (op === 'GETFILESTATUS') return json(200, { FileStatus: { fileId: 1, length: data.length, modificationTime: 1, blockSize: 134217728, type: 'FILE' } })
      if (op === 'OPEN') return json(200, { Location: `http://${req.headers.host}/dn/webhdfs/v1${file}?op=OPEN&delegation=${url.searchParams.get('delegation')}&namenoderpcaddress=nn:8020&offset=0` })
      return json(400, { RemoteException: { exception: 'IllegalArgumentException', javaClassName: 'java.lang.IllegalArgumentException', message: `unsupported ${op}` } })
    }
    if (file === '/broken.bin') {
      return json(403, { RemoteException: { exception: 'IOException', javaClassName: 'java.io.IOException', message: `Failed to read ${req.url} for token ${url.searchParams.get('delegation')}` } })
    }
    res.writeHead(200, { 'content-length': data.length }).end(data)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}`, seen, data, stop: () => new Promise((resolve) => server.close(resolve)) }
}

describe('behind a gateway', () => {
  let gw, sc, root
  beforeAll(async () => {
    gw = await startGateway()
    root = await tempDir('gw-root-')
    sc = await startTestSidecar({
      roots: [root],
      targets: { gw: { type: 'webhdfs', namenodes: [gw.url], delegation: TOKEN, headers: { Authorization: GATEWAY }, checksum: false, retry: { attempts: 2, baseDelayMs: 10, maxDelayMs: 10 } } }
    })
  })
  afterAll(async () => {
    await sc?.stop({ graceMs: 0 })
    await gw?.stop()
  })

  it('sends the headers to a Location on the namenode\'s own origin', async () => {
    const job = await sc.api.run({ direction: 'download', target: 'gw', local: path.join(root, 'ok.bin'), remote: '/ok.bin' })
    expect(job).toMatchObject({ state: 'succeeded', bytes: gw.data.length })
    expect(gw.seen.filter((s) => s.url.startsWith('/dn/')).every((s) => s.authorization === GATEWAY)).toBe(true)
    expect(await fs.readFile(path.join(root, 'ok.bin'))).toEqual(gw.data)
  })

  it('never lets the token quoted in a datanode error reach the job, the API or the logs', async () => {
    const job = await sc.api.run({ direction: 'download', target: 'gw', local: path.join(root, 'broken.bin'), remote: '/broken.bin' })
    expect(job).toMatchObject({ state: 'failed', attempts: 2, error: { code: 'REMOTE_UNAVAILABLE', exception: 'IOException' } })
    expect(job.error.message).toContain('delegation=[redacted]')
    await new Promise((resolve) => setTimeout(resolve, 50)) // let the logger flush
    const everything = JSON.stringify(job) + (await sc.api.call('GET', '/v1/jobs')).text + sc.logs.lines.join('\n')
    expect(everything).not.toContain(TOKEN)
    expect(everything).not.toContain('gateway-secret')
  })

  it('hides the token and header values in --check-config output', async () => {
    const config = validateConfig({
      stateDir: await tempDir('gw-state-'),
      roots: [],
      targets: { gw: { type: 'webhdfs', namenodes: [gw.url], delegation: TOKEN, headers: { Authorization: GATEWAY } } }
    })
    const shown = JSON.stringify(describeConfig(config))
    expect(shown).not.toContain(TOKEN)
    expect(shown).not.toContain('gateway-secret')
    expect(describeConfig(config).targets.gw).toMatchObject({ delegation: '[set]', headers: { authorization: '[set]' } })
  })

  it('refuses headers the sidecar sets itself, and a malformed token', () => {
    const base = { stateDir: '/tmp', roots: [] }
    expect(() => validateConfig({ ...base, targets: { gw: { type: 'webhdfs', namenodes: ['http://nn:9870'], headers: { 'Content-Length': '1' } } } })).toThrow(/targets\.gw\.headers\.Content-Length/)
    expect(() => validateConfig({ ...base, targets: { gw: { type: 'webhdfs', namenodes: ['http://nn:9870'], delegation: 'a b' } } })).toThrow(/targets\.gw\.delegation/)
  })
})
