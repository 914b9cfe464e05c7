// The `digest` option, per target and per job: "sha256" (the default) hashes every byte, "none"
// does not (the size is still checked, and HDFS's own checksum where `checksum` is on); a job's
// value overrides its target's, and a job with an expected sha256 always hashes. Against a real
// Apache httpd (mod_dav) and a real MiniDFSCluster.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { makeFile, sha256File } from './helpers/files.js'
import { validateConfig, ConfigError } from '../src/config.js'
import { parseJobRequest } from '../src/jobs.js'
import { hashingThread } from '../src/digest.js'

const MiB = 1 << 20
let httpd, hdfs, sc, root, small, large, smallSha, largeSha

beforeAll(async () => {
  ;[httpd, hdfs] = await Promise.all([startHttpd(), startHdfs()])
  await hdfs.command('mkdir /data www-data 755')
  root = await tempDir('digest-root-')
  small = path.join(root, 'small.bin')
  large = path.join(root, 'large.bin')
  await makeFile(small, 100000)
  await makeFile(large, 12 * MiB) // over 8 MiB: hashed by the hashing thread when hashed at all
  ;[smallSha, largeSha] = await Promise.all([sha256File(small), sha256File(large)])
  const hdfsTarget = { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' }
  sc = await startTestSidecar({
    roots: [root],
    targets: {
      dav: { type: 'http', url: httpd.uploadUrl },
      davNone: { type: 'http', url: httpd.uploadUrl, digest: 'none' },
      hdfsNone: { ...hdfsTarget, digest: 'none' }
    }
  })
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await Promise.all([httpd?.stop(), hdfs?.stop()])
})

const davFile = (remote) => path.join(httpd.davDir, remote)

describe('digest', () => {
  it('"none" on a target: uploads and downloads succeed with the size checked and no sha256', async () => {
    for (const [local, sha] of [[small, smallSha], [large, largeSha]]) {
      const name = path.basename(local)
      const up = await sc.api.run({ direction: 'upload', target: 'davNone', local, remote: `/none/${name}` })
      expect(up).toMatchObject({ state: 'succeeded', sha256: null, bytes: (await fs.stat(local)).size })
      expect(await sha256File(davFile(`none/${name}`))).toBe(sha)
      const back = path.join(root, `back-${name}`)
      const down = await sc.api.run({ direction: 'download', target: 'davNone', local: back, remote: `/none/${name}` })
      expect(down).toMatchObject({ state: 'succeeded', sha256: null })
      expect(await sha256File(back)).toBe(sha)
    }
  })

  it('a job\'s digest overrides its target\'s, both ways', async () => {
    const hashed = await sc.api.run({ direction: 'upload', target: 'davNone', local: small, remote: '/override/hashed.bin', digest: 'sha256' })
    expect(hashed).toMatchObject({ state: 'succeeded', sha256: smallSha, digest: 'sha256' })
    const plain = await sc.api.run({ direction: 'upload', target: 'dav', local: small, remote: '/override/plain.bin', digest: 'none' })
    expect(plain).toMatchObject({ state: 'succeeded', sha256: null, digest: 'none' })
    const byDefault = await sc.api.run({ direction: 'upload', target: 'dav', local: small, remote: '/override/default.bin' })
    expect(byDefault).toMatchObject({ state: 'succeeded', sha256: smallSha, digest: null })
  })

  it('a job with an expected sha256 hashes even with digest "none", and a wrong one fails it', async () => {
    const ok = await sc.api.run({ direction: 'upload', target: 'davNone', local: small, remote: '/expect/ok.bin', digest: 'none', sha256: smallSha })
    expect(ok).toMatchObject({ state: 'succeeded', sha256: smallSha })
    const wrong = await sc.api.run({ direction: 'upload', target: 'davNone', local: small, remote: '/expect/wrong.bin', digest: 'none', sha256: '0'.repeat(64) })
    expect(wrong).toMatchObject({ state: 'failed', error: { code: 'SHA256_MISMATCH' } })
  })

  it('"none" on WebHDFS still compares HDFS\'s checksum, on the hashing thread for a large file', async () => {
    await hashingThread.stop()
    const up = await sc.api.run({ direction: 'upload', target: 'hdfsNone', local: large, remote: '/none/large.bin' })
    expect(up).toMatchObject({ state: 'succeeded', sha256: null })
    expect(up.checksum?.algorithm).toMatch(/CRC32C$/)
    expect(hashingThread.running).toBe(true)
    const back = path.join(root, 'hdfs-back.bin')
    const down = await sc.api.run({ direction: 'download', target: 'hdfsNone', local: back, remote: '/none/large.bin' })
    expect(down).toMatchObject({ state: 'succeeded', sha256: null, checksum: up.checksum })
    expect(await sha256File(back)).toBe(largeSha)
  })

  it('the same id with another digest is another request (409 JOB_CONFLICT)', async () => {
    const job = { id: 'digest-conflict-1', direction: 'upload', target: 'dav', local: small, remote: '/conflict/a.bin' }
    expect((await sc.api.submit(job)).status).toBe(202)
    expect((await sc.api.submit(job)).status).toBe(200)
    const again = await sc.api.submit({ ...job, digest: 'none' })
    expect(again).toMatchObject({ status: 409, json: { error: { code: 'JOB_CONFLICT' } } })
  })

  it('refuses an unknown digest, in a job (400) and in a target (config error naming the field)', async () => {
    const r = await sc.api.submit({ direction: 'upload', target: 'dav', local: small, remote: '/x.bin', digest: 'md5' })
    expect(r).toMatchObject({ status: 400, json: { error: { code: 'INVALID_REQUEST' } } })
    expect(() => parseJobRequest({ direction: 'upload', target: 'dav', local: small, remote: '/x.bin', digest: null }, sc.config)).not.toThrow()
    const dir = await tempDir('digest-config-')
    expect(() => validateConfig({ stateDir: dir, roots: [dir], targets: { t: { type: 'http', url: 'http://h/', digest: 'md5' } } }))
      .toThrow(expect.objectContaining({ field: 'targets.t.digest', constructor: ConfigError }))
  })
})
