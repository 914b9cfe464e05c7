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
