// express is loaded with the first request that needs it (src/http/app.js): a daemon that takes
// hand-offs, answers their status and is probed and scraped never loads it. The fast paths of
// GET /healthz and GET /metrics answer as express's routes do.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createRequire } from 'node:module'
import net from 'node:net'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { startTestSidecar, tempDir, client, waitFor } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'
import { PRODUCTION_FLAGS } from './helpers/node-flags.js'

const BIN = fileURLToPath(new URL('../bin/transfer-sidecar.js', import.meta.url))

const require = createRequire(import.meta.url)
const expressLoaded = () => Object.keys(require.cache).some((file) => file.includes(`${path.sep}node_modules${path.sep}express${path.sep}`))
const TOKEN = 'lazy-express-token'

let sc, root, anonymous

beforeAll(async () => {
  root = await tempDir('lazy-root-')
  await fs.writeFile(path.join(root, 'a.txt'), 'a')
  sc = await startTestSidecar({ roots: [root], token: TOKEN, targets: { local: { type: 'file', dir: await tempDir('lazy-store-') } } })
  anonymous = client(sc.url)
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

describe('express, loaded when first needed', () => {
  it('is not loaded by hand-offs, their status, /healthz and /metrics; the first other route loads it', async () => {
    expect(expressLoaded()).toBe(false)
    expect(await sc.api.call('GET', '/healthz')).toMatchObject({ status: 200, json: { status: 'ok' } })
    const metrics = await sc.api.call('GET', '/metrics')
    expect(metrics.status).toBe(200)
    expect(metrics.text).toMatch(/^# HELP /m)
    expect((await anonymous.call('GET', '/metrics')).status).toBe(401)
    const job = await sc.api.run({ direction: 'upload', target: 'local', local: path.join(root, 'a.txt'), remote: '/a.txt' })
    expect(job.state).toBe('succeeded')
    expect((await sc.api.job(job.id)).json.state).toBe('succeeded')
    expect(expressLoaded()).toBe(false)

    // A list, then everything else, is express's.
    const list = await sc.api.call('GET', '/v1/jobs?limit=5')
    expect(list).toMatchObject({ status: 200, json: { jobs: [{ id: job.id }] } })
    expect(expressLoaded()).toBe(true)
  })

  it('answers GET /healthz and GET /metrics as express answers their other forms', async () => {
    const fast = await sc.api.call('GET', '/healthz')
    const routed = await sc.api.call('GET', '/healthz?from=express')
    expect(routed.json).toEqual(fast.json)
    expect(fast.headers['content-type']).toBe(routed.headers['content-type'])
    expect(Number(fast.headers['content-length'])).toBe(Buffer.byteLength(fast.text))

    // No token is needed for /healthz, one is for /metrics: the same 401 from both.
    expect((await anonymous.call('GET', '/healthz')).status).toBe(200)
    const refused = await anonymous.call('GET', '/metrics')
    const refusedRouted = await anonymous.call('GET', '/metrics?from=express')
    expect(refused).toMatchObject({ status: 401, json: { error: { code: 'UNAUTHORIZED' } } })
    expect(refusedRouted.json).toEqual(refused.json)
    expect(refused.headers['www-authenticate']).toBe(refusedRouted.headers['www-authenticate'])

    const scraped = await sc.api.call('GET', '/metrics')
    const scrapedRouted = await sc.api.call('GET', '/metrics?from=express')
    expect(scraped.headers['content-type']).toBe(scrapedRouted.headers['content-type'])
    expect(Number(scraped.headers['content-length'])).toBe(Buffer.byteLength(scraped.text))
    const names = (text) => [...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1])
    expect(names(scraped.text)).toEqual(names(scrapedRouted.text))

    // Each is logged like every other request, under its path.
    const logged = sc.logs.records().filter((l) => l.msg === 'request' && (l.path === '/healthz' || l.path === '/metrics'))
    expect(logged.filter((l) => l.path === '/metrics' && l.status === 401).length).toBeGreaterThanOrEqual(2)
  })
})

// A failed load (the daemon out of file descriptors when the first express route is asked for) is
// tried again by the next request, not kept: every express route answered 500 until a restart.
describe('express, loaded again after a load that failed', () => {
  it('answers the express routes once descriptors are free again', async () => {
    const LIMIT = 64
    const dir = await tempDir('lazy-emfile-')
    const port = await freePort()
    await fs.mkdir(path.join(dir, 'root'))
    const config = path.join(dir, 'config.json')
    await fs.writeFile(config, JSON.stringify({ listen: [`127.0.0.1:${port}`], stateDir: path.join(dir, 'state'), roots: [path.join(dir, 'root')], targets: { local: { type: 'file', dir: path.join(dir, 'store') } } }))
    const child = spawn('prlimit', [`--nofile=${LIMIT}:${LIMIT}`, process.execPath, ...PRODUCTION_FLAGS, BIN], { env: { ...process.env, SIDECAR_CONFIG: config }, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    child.stdout.on('data', (d) => { output += d })
    child.stderr.on('data', (d) => { output += d })
    const fillers = []
    try {
      await waitFor(() => output.includes('listening'), { timeoutMs: 20000 })
      const list = async () => (await raw(port, 'GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')).split('\r\n')[0]
      // Connections until the daemon has no descriptor left (it accepts them, then cannot).
      const first = net.connect(port, '127.0.0.1')
      await new Promise((resolve) => first.once('connect', resolve))
      for (let i = 0; i < LIMIT; i++) {
        const s = net.connect(port, '127.0.0.1')
        s.on('error', () => {})
        fillers.push(s)
        await new Promise((resolve) => { s.once('connect', resolve); s.once('error', resolve) })
      }
      await waitFor(async () => (await fs.readdir(`/proc/${child.pid}/fd`)).length >= LIMIT)
      const refused = await new Promise((resolve) => {
        let out = ''
        first.on('data', (d) => { out += d })
        first.on('end', () => resolve(out.split('\r\n')[0]))
        first.write('GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')
      })
      expect(refused).toBe('HTTP/1.1 500 Internal Server Error') // express could not be read
      for (const s of fillers) s.destroy()
      await waitFor(async () => (await fs.readdir(`/proc/${child.pid}/fd`)).length < LIMIT / 2)
      expect(await list()).toBe('HTTP/1.1 200 OK')
    } finally {
      for (const s of fillers) s.destroy()
      child.kill('SIGKILL')
    }
  })
})

function raw (port, request) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(request))
    let out = ''
    s.on('data', (d) => { out += d })
    s.on('end', () => resolve(out))
    s.on('error', reject)
  })
}
