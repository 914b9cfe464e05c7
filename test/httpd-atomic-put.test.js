// http targets with `atomicPut`: a small upload is one PUT to the final name, which the server
// (Apache mod_dav_fs, test/httpd-put.test.js) stores under a temp name of its own and renames into
// place only once every byte arrived. Checked against the real httpd, with tcp-proxy.js in front to
// see each request and to lose or hold the PUT's answer.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'
import { startTcpProxy } from './harness/tcp-proxy.js'
import { client, spawnSidecar, startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { freePort } from './helpers/ports.js'
import { makeFile, sha256File } from './helpers/files.js'

const KiB = 1024
const MiB = 1 << 20
let httpd, proxy, sidecar, root

beforeAll(async () => {
  httpd = await startHttpd()
  proxy = await startTcpProxy({ target: new URL(httpd.uploadUrl).host })
  root = await tempDir('atomic-put-root-')
  const url = new URL('/upload/', proxy.url).href
  sidecar = await startTestSidecar({
    roots: [root],
    targets: {
      // idleMs ends a held answer's attempt; the retry waits 300–600 ms (a cancel comes meanwhile).
      direct: { type: 'http', url, atomicPut: true, timeouts: { idleMs: 1500 }, retry: { attempts: 3, baseDelayMs: 600, maxDelayMs: 600 } },
      moved: { type: 'http', url }
    }
  })
})
afterAll(async () => {
  await sidecar?.stop()
  await proxy?.stop()
  await httpd?.stop()
})
afterEach(() => proxy.fault(null))

// The request lines the proxy saw while `fn` ran.
async function requestsDuring (fn) {
  const before = proxy.requests.length
  const result = await fn()
  return { result, lines: proxy.requests.slice(before).map((r) => r.line) }
}

async function davFile (name, content) {
  const file = path.join(httpd.davDir, name)
  await fs.mkdir(path.dirname(file), { recursive: true })
  await fs.writeFile(file, content)
  await httpd.chownToServer(path.join(httpd.davDir, name.split('/')[0]))
}

describe('http target with atomicPut', () => {
  it('uploads a small file with one PUT to its final name: no temp name, no MOVE', async () => {
    const local = path.join(root, 'one.bin')
    const sha = await makeFile(local, 4 * KiB, 1)
    const { result: job, lines } = await requestsDuring(() => sidecar.api.run({ direction: 'upload', target: 'direct', local, remote: '/a/one.bin' }))
    expect(job).toMatchObject({ state: 'succeeded', attempts: 1, bytes: 4 * KiB, sha256: sha })
    expect(lines).toEqual(['MKCOL /upload/a/ HTTP/1.1', 'PUT /upload/a/one.bin HTTP/1.1'])
    expect(await sha256File(path.join(httpd.davDir, 'a/one.bin'))).toBe(sha)
    expect(await fs.readdir(path.join(httpd.davDir, 'a'))).toEqual(['one.bin'])

    // The same job to a target without it: PUT to a temp name, then MOVE.
    const moved = await requestsDuring(() => sidecar.api.run({ direction: 'upload', target: 'moved', local, remote: '/a/two.bin' }))
    expect(moved.result.state).toBe('succeeded')
    expect(moved.lines.filter((l) => !l.startsWith('MKCOL')).map((l) => l.split(' ')[0])).toEqual(['PUT', 'MOVE'])
  })

  it('overwrite false: an existing name is refused by the PUT itself (412) and left as it was', async () => {
    await davFile('b/taken.bin', 'theirs')
    const local = path.join(root, 'taken.bin')
    await makeFile(local, 4 * KiB, 2)
    const { result: job, lines } = await requestsDuring(() => sidecar.api.run({ direction: 'upload', target: 'direct', local, remote: '/b/taken.bin' }))
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'REMOTE_EXISTS' } })
    expect(lines.filter((l) => !l.startsWith('MKCOL'))).toEqual(['PUT /upload/b/taken.bin HTTP/1.1'])
    expect(await fs.readFile(path.join(httpd.davDir, 'b/taken.bin'), 'utf8')).toBe('theirs')

    const replaced = await sidecar.api.run({ direction: 'upload', target: 'direct', local, remote: '/b/taken.bin', overwrite: true })
    expect(replaced.state).toBe('succeeded')
    expect(await sha256File(path.join(httpd.davDir, 'b/taken.bin'))).toBe(replaced.sha256)
  })

  it('an expected sha256, or a file over 1 MiB that must not replace one, still goes through a temp name and MOVE', async () => {
    const small = path.join(root, 'expected.bin')
    const sha = await makeFile(small, 4 * KiB, 3)
    const expected = await requestsDuring(() => sidecar.api.run({ direction: 'upload', target: 'direct', local: small, remote: '/c/expected.bin', sha256: sha }))
    expect(expected.result.state).toBe('succeeded')
    expect(expected.lines.filter((l) => !l.startsWith('MKCOL')).map((l) => l.split(' ')[0])).toEqual(['PUT', 'MOVE'])

    const large = path.join(root, 'large.bin')
    await makeFile(large, MiB + 1, 4)
    const big = await requestsDuring(() => sidecar.api.run({ direction: 'upload', target: 'direct', local: large, remote: '/c/large.bin' }))
    expect(big.result.state).toBe('succeeded')
    // GET of the first byte: over 1 MiB, "does it exist?" is asked before the upload.
    expect(big.lines.map((l) => l.split(' ')[0])).toEqual(['GET', 'PUT', 'MOVE'])
  })

  it('a file over 1 MiB that may replace one (overwrite) is one PUT to its final name; a PUT cut halfway leaves the old file', async () => {
    await davFile('h/big.bin', 'the old file')
    const stored = path.join(httpd.davDir, 'h/big.bin')
    const old = await sha256File(stored)
    const local = path.join(root, 'big.bin')
    const sha = await makeFile(local, 8 * MiB + 3, 9)
    // The first PUT's connection is reset after 3 MiB of its body: httpd drops what it got.
    proxy.fault({ resetAfter: 3 * MiB, direction: 'up', connections: 1, match: /^PUT \/upload\/h\/big\.bin/ })
    const seen = new Set()
    const { result: job, lines } = await requestsDuring(async () => {
      const submitted = await sidecar.api.submit({ direction: 'upload', target: 'direct', local, remote: '/h/big.bin', overwrite: true })
      expect(submitted.status).toBe(202)
      await waitFor(() => proxy.requests.some((r) => r.line.startsWith('PUT /upload/h/big.bin')))
      for (;;) {
        seen.add(await sha256File(stored))
        const job = (await sidecar.api.job(submitted.json.id)).json
        if (['succeeded', 'failed', 'cancelled'].includes(job.state)) return job
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
    })
    expect(job, JSON.stringify(job.error)).toMatchObject({ state: 'succeeded', attempts: 2, bytes: 8 * MiB + 3, sha256: sha })
    // Readers saw the old file, then the new one: never a part of it, never no file.
    expect([...seen].every((v) => v === old || v === sha), [...seen].join(', ')).toBe(true)
    expect(await sha256File(stored)).toBe(sha)
    expect(lines.filter((l) => !l.startsWith('MKCOL'))).toEqual(['PUT /upload/h/big.bin HTTP/1.1', 'PUT /upload/h/big.bin HTTP/1.1'])
    expect(await fs.readdir(path.join(httpd.davDir, 'h'))).toEqual(['big.bin'])
  })

  it('a PUT stored but its answer lost: the next attempt finds its own file under the name and succeeds', async () => {
    const local = path.join(root, 'lost.bin')
    const sha = await makeFile(local, 8 * KiB, 5)
    proxy.fault({ resetAfter: 0, connections: 1, match: /^PUT \/upload\/d\/lost\.bin/ })
    const { result: job, lines } = await requestsDuring(() => sidecar.api.run({ direction: 'upload', target: 'direct', local, remote: '/d/lost.bin' }))
    expect(job, JSON.stringify(job.error)).toMatchObject({ state: 'succeeded', attempts: 2, sha256: sha })
    // attempt 1: PUT (stored, answer reset); attempt 2: PUT (412), GET (read back: the same bytes)
    expect(lines.filter((l) => !l.startsWith('MKCOL')).map((l) => l.split(' ')[0])).toEqual(['PUT', 'PUT', 'GET'])
    expect(await sha256File(path.join(httpd.davDir, 'd/lost.bin'))).toBe(sha)
  })

  it('…but a name another writer took meanwhile, with other bytes, is still REMOTE_EXISTS', async () => {
    const local = path.join(root, 'raced.bin')
    await makeFile(local, 8 * KiB, 6)
    await davFile('e/.keep', '')
    // The first PUT never reaches httpd (the proxy answers 503 itself); another writer takes the name.
    proxy.fault({ status: 503, connections: 1, match: /^PUT \/upload\/e\/raced\.bin/ })
    const submitted = await sidecar.api.submit({ direction: 'upload', target: 'direct', local, remote: '/e/raced.bin' })
    expect(submitted.status).toBe(202)
    await waitFor(() => proxy.stats.answered > 0)
    await davFile('e/raced.bin', 'another writer')
    const job = (await sidecar.api.job(submitted.json.id, 30)).json
    expect(job).toMatchObject({ state: 'failed', error: { code: 'REMOTE_EXISTS' } })
    expect(job.attempts).toBeGreaterThanOrEqual(2)
    expect(await fs.readFile(path.join(httpd.davDir, 'e/raced.bin'), 'utf8')).toBe('another writer')
  })

  it('refuses a cancel once the PUT has sent its last byte (the server may have published it)', async () => {
    const local = path.join(root, 'held.bin')
    const sha = await makeFile(local, 4 * KiB, 7)
    // httpd stores the file; its answer is held back (the target's idleMs then ends the attempt).
    proxy.fault({ stallAfter: 0, connections: 1, match: /^PUT \/upload\/f\/held\.bin/ })
    const submitted = await sidecar.api.submit({ direction: 'upload', target: 'direct', local, remote: '/f/held.bin' })
    await waitFor(() => fs.stat(path.join(httpd.davDir, 'f/held.bin')).then(() => true, () => false))
    // Refused while the answer is held, and after the attempt timed out, while it waits to retry.
    const refusals = []
    let waitingToRetry = 0
    for (let job = null; !['succeeded', 'failed', 'cancelled'].includes(job?.state);) {
      const cancel = await sidecar.api.call('DELETE', `/v1/jobs/${submitted.json.id}`)
      refusals.push(`${cancel.status} ${cancel.json.error?.code}`)
      job = (await sidecar.api.job(submitted.json.id)).json
      if (job.state === 'queued' && job.attempts === 1) waitingToRetry++
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    expect(new Set(refusals)).toEqual(new Set(['409 JOB_FINISHED']))
    expect(waitingToRetry).toBeGreaterThan(0)
    const job = (await sidecar.api.job(submitted.json.id, 30)).json
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2, sha256: sha })
  })

  // kill -9 right after httpd stored the PUT: the job's start ("running", attempt 1) is journaled
  // lazily, so the journal may still say "queued, 0 attempts", and after the restart the job's
  // first attempt meets its own file (412). It is recognised by its bytes, as in a retry.
  it('a PUT stored, then kill -9 before its answer: after the restart the job finds its file and succeeds', async () => {
    const stateDir = await tempDir('atomic-put-state-')
    const port = await freePort()
    const config = {
      listen: [`127.0.0.1:${port}`],
      stateDir,
      roots: [root],
      journal: { sync: 'write' },
      targets: { direct: { type: 'http', url: new URL('/upload/', proxy.url).href, atomicPut: true } }
    }
    const api = client(`http://127.0.0.1:${port}`)
    const local = path.join(root, 'killed.bin')
    const sha = await makeFile(local, 4 * KiB, 8)
    proxy.fault({ stallAfter: 0, connections: 1, match: /^PUT \/upload\/g\/killed\.bin/ })
    let proc = await spawnSidecar(config, { dir: stateDir })
    try {
      const submitted = await api.submit({ direction: 'upload', target: 'direct', local, remote: '/g/killed.bin' })
      expect(submitted.status).toBe(202)
      await waitFor(() => fs.stat(path.join(httpd.davDir, 'g/killed.bin')).then(() => true, () => false), { intervalMs: 2 })
      await proc.kill('SIGKILL')
      proxy.fault(null)
      proc = await spawnSidecar(config, { dir: stateDir })
      const job = (await api.job(submitted.json.id, 30)).json
      expect(job, JSON.stringify(job.error)).toMatchObject({ state: 'succeeded', sha256: sha })
      expect(await sha256File(path.join(httpd.davDir, 'g/killed.bin'))).toBe(sha)
    } finally {
      await proc.kill('SIGKILL')
      api.close()
    }
  })
})
