// The http backend remembers the collections it made (or found) so that an upload costs no MKCOL
// per level. Someone may remove them on the server meanwhile: an upload below a forgotten
// collection must make it again, not fail for good (mod_dav answers 409 to a PUT or MKCOL whose
// parent collection is missing, RFC 4918 9.7.1 and 9.3.1).
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

let httpd, sc, local
beforeAll(async () => {
  httpd = await startHttpd()
  const root = await tempDir('collections-root-')
  local = path.join(root, 'a.txt')
  await fs.writeFile(local, 'payload\n')
  sc = await startTestSidecar({ roots: [root], targets: { web: { type: 'http', url: httpd.uploadUrl, retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } } } })
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await httpd?.stop()
})

const upload = (remote) => sc.api.run({ direction: 'upload', target: 'web', local, remote })
const stored = (remote) => fs.readFile(path.join(httpd.davDir, remote), 'utf8')

describe('collections removed on the server after the backend made them', () => {
  it('an upload into one that is gone makes it again (its PUT answered 409, retried)', async () => {
    expect(await upload('/p/q/a.txt')).toMatchObject({ state: 'succeeded' })
    await fs.rm(path.join(httpd.davDir, 'p'), { recursive: true })
    expect(await upload('/p/q/b.txt')).toMatchObject({ state: 'succeeded' })
    expect(await stored('/p/q/b.txt')).toBe('payload\n')
  })

  it('an upload below one that is gone makes the path again (a MKCOL answered 409), in every later job too', async () => {
    expect(await upload('/x/y/a.txt')).toMatchObject({ state: 'succeeded' })
    await fs.rm(path.join(httpd.davDir, 'x'), { recursive: true })
    for (const name of ['f1', 'f2']) {
      expect(await upload(`/x/y/z/${name}.txt`)).toMatchObject({ state: 'succeeded', attempts: 1 })
      expect(await stored(`/x/y/z/${name}.txt`)).toBe('payload\n')
    }
  })
})

// mod_dav answers a MOVE with Overwrite: T onto a collection by deleting the collection, tree and
// all; a PUT onto one with 409, which is final. An upload-only location (GET, HEAD and PROPFIND
// refused) must still take uploads, also into new collections made by several jobs at once.
describe('names that are collections, and locations that will not say what they hold', () => {
  let only
  beforeAll(async () => {
    only = await startTestSidecar({
      roots: [path.dirname(local)],
      targets: {
        web: { type: 'http', url: httpd.uploadUrl, retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } },
        direct: { type: 'http', url: httpd.uploadUrl, atomicPut: true, retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } },
        inbox: { type: 'http', url: httpd.uploadOnlyUrl, concurrency: 8, retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } },
        nopf: { type: 'http', url: httpd.noPropfindUrl, retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } }
      }
    })
  })
  afterAll(async () => {
    await only?.stop({ graceMs: 0 })
  })
  const run = (target, remote, extra = {}) => only.api.run({ direction: 'upload', target, local, remote, overwrite: true, ...extra })
  const tree = async (dir) => {
    await fs.mkdir(path.join(httpd.davDir, dir, 'sub'), { recursive: true })
    await fs.writeFile(path.join(httpd.davDir, dir, 'sub', 'kept.txt'), 'precious\n')
    await httpd.chownToServer(path.join(httpd.davDir, dir))
  }

  it('overwrite does not replace a collection (MOVE): REMOTE_REJECTED, its tree kept; a file is still replaced', async () => {
    await tree('reports')
    const job = await run('web', '/reports')
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'REMOTE_REJECTED' } })
    expect(job.error.message).toMatch(/is a collection/)
    expect(await stored('/reports/sub/kept.txt')).toBe('precious\n')
    expect((await fs.readdir(httpd.davDir)).filter((n) => n.startsWith('.reports.'))).toEqual([]) // no temp left
    await fs.writeFile(path.join(httpd.davDir, 'replaced.txt'), 'old\n')
    await httpd.chownToServer(path.join(httpd.davDir, 'replaced.txt'))
    expect(await run('web', '/replaced.txt')).toMatchObject({ state: 'succeeded' })
    expect(await stored('/replaced.txt')).toBe('payload\n')
  })

  // Without PROPFIND (nginx's own dav module), a file's first byte tells it is one.
  it('on a server without PROPFIND, overwrite still replaces a file, and not a collection', async () => {
    await fs.writeFile(path.join(httpd.davDir, 'nopf.txt'), 'old\n')
    await httpd.chownToServer(path.join(httpd.davDir, 'nopf.txt'))
    expect(await run('nopf', '/nopf.txt')).toMatchObject({ state: 'succeeded' })
    expect(await stored('/nopf.txt')).toBe('payload\n')
    await tree('nopf-dir')
    expect(await run('nopf', '/nopf-dir')).toMatchObject({ state: 'failed', error: { code: 'REMOTE_REJECTED' } })
    expect(await stored('/nopf-dir/sub/kept.txt')).toBe('precious\n')
  })

  it('a PUT onto a collection (409) fails at once, not retried as a collection gone', async () => {
    await tree('coll')
    const job = await run('direct', '/coll')
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code: 'REMOTE_REJECTED' } })
    expect(await stored('/coll/sub/kept.txt')).toBe('precious\n')
  })

  it('an upload-only location takes uploads over 1 MiB that must not replace a file (the early check refused is left to the MOVE)', async () => {
    const big = path.join(path.dirname(local), 'big.bin')
    await fs.writeFile(big, Buffer.alloc(2 << 20, 7))
    expect(await only.api.run({ direction: 'upload', target: 'inbox', local: big, remote: '/in/big.bin', overwrite: false })).toMatchObject({ state: 'succeeded' })
    expect((await fs.stat(path.join(httpd.davDir, 'in', 'big.bin'))).size).toBe(2 << 20)
    const again = await only.api.run({ direction: 'upload', target: 'inbox', local: big, remote: '/in/big.bin', overwrite: false })
    expect(again).toMatchObject({ state: 'failed', error: { code: 'REMOTE_EXISTS' } })
  })

  it('an upload-only location takes uploads of several jobs at once into the same new collections', async () => {
    for (let round = 0; round < 3; round++) {
      const jobs = await Promise.all(Array.from({ length: 8 }, (_, i) => only.api.run({ direction: 'upload', target: 'inbox', local, remote: `/day${round}/a/b/f${i}.txt` })))
      expect(jobs.map((j) => `${j.state} ${j.error?.message ?? ''}`.trim())).toEqual(Array(8).fill('succeeded'))
    }
  })
})
