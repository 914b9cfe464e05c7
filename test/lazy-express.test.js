// express is loaded with the first request that needs it (src/http/app.js): a daemon that takes
// hand-offs, answers their status and is probed and scraped never loads it. The fast paths of
// GET /healthz and GET /metrics answer as express's routes do.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createRequire } from 'node:module'
import { startTestSidecar, tempDir, client } from './helpers/sidecar.js'

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
