// WebHDFS errors: RemoteException classes become stable codes (the class kept beside them), and
// permanent ones fail a job at its first attempt; a datanode that failed is left out of the next
// CREATE/OPEN (excludedatanodes). Against a real MiniDFSCluster of three datanodes, each behind a
// proxy (tcp-proxy.js) so that one of them can be made unreachable to the sidecar alone.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { Agent, request } from 'undici'
import { createWebHdfsBackend, remoteExceptionError, createRedactor } from '../src/backends/webhdfs.js'
import { upload, download } from '../src/transfer.js'
import { startHdfs } from './harness/hdfs.js'
import { startHdfsProxies } from './harness/tcp-proxy.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'

const MiB = 1 << 20
const remoteException = (exception, pkg = 'org.apache.hadoop.hdfs.protocol', message = 'boom\n\tat some.Java(Frame.java:1)') =>
  JSON.stringify({ RemoteException: { exception, javaClassName: `${pkg}.${exception}`, message } })

describe('RemoteException → code', () => {
  it.each([
    // class, HTTP status, code, retried
    ['FileNotFoundException', 404, 'REMOTE_NOT_FOUND', false],
    ['FileAlreadyExistsException', 403, 'REMOTE_EXISTS', false],
    ['AccessControlException', 403, 'PERMISSION_DENIED', false],
    ['AccessControlException', 500, 'PERMISSION_DENIED', false],
    ['NSQuotaExceededException', 403, 'REMOTE_QUOTA_EXCEEDED', false],
    ['DSQuotaExceededException', 403, 'REMOTE_QUOTA_EXCEEDED', false],
    ['ParentNotDirectoryException', 403, 'REMOTE_REJECTED', false],
    ['PathIsNotEmptyDirectoryException', 403, 'REMOTE_REJECTED', false],
    ['IllegalArgumentException', 400, 'REMOTE_REJECTED', false],
    ['StandbyException', 403, 'REMOTE_UNAVAILABLE', true],
    ['RetriableException', 403, 'REMOTE_UNAVAILABLE', true],
    ['SafeModeException', 403, 'REMOTE_UNAVAILABLE', true],
    ['ConnectException', 403, 'REMOTE_UNAVAILABLE', true],
    ['IOException', 403, 'REMOTE_UNAVAILABLE', true], // a datanode's "All datanodes are bad"
    ['SomethingNewException', 500, 'REMOTE_UNAVAILABLE', true],
    ['SomethingNewException', 403, 'REMOTE_REJECTED', false]
  ])('%s (HTTP %i) → %s, retried: %s', (exception, status, code, retryable) => {
    const err = remoteExceptionError(status, remoteException(exception))
    expect(err).toMatchObject({ code, retryable, details: { status, exception } })
    expect(err.message).toBe(`${exception}: boom`) // first line only: no stack trace
  })

  it.each([[503, 'REMOTE_UNAVAILABLE', true], [502, 'REMOTE_UNAVAILABLE', true], [404, 'REMOTE_NOT_FOUND', false],
    [401, 'PERMISSION_DENIED', false], [400, 'REMOTE_REJECTED', false]])('a bare HTTP %i → %s', (status, code, retryable) => {
    expect(remoteExceptionError(status, '<html>gateway</html>')).toMatchObject({ code, retryable, details: { status } })
  })

  it('redacts delegation parameters and configured secrets from messages', () => {
    const redact = createRedactor(['s3cr3t-header-value'])
    const err = remoteExceptionError(403, remoteException('IOException', 'java.io', 'bad url http://dn:9864/x?op=OPEN&delegation=KAAKSm9obi&user=s3cr3t-header-value'), redact)
    expect(err.message).not.toMatch(/KAAKSm9obi|s3cr3t/)
    expect(err.message).toContain('delegation=[redacted]')
  })
})

describe('against a MiniDFSCluster with three datanodes', () => {
  let hdfs, proxies, dispatcher, root, sc
  const job = (over) => ({ id: `err${Math.random().toString(36).slice(2, 10)}`, target: 'hdfs', overwrite: false, expectedSha256: null, attempts: 1, ...over })

  beforeAll(async () => {
    hdfs = await startHdfs({ datanodes: 3 })
    for (const dir of ['/data', '/quota', '/space']) await hdfs.command(`mkdir ${dir} www-data 755`)
    proxies = await startHdfsProxies(hdfs)
    dispatcher = new Agent()
    root = await tempDir('err-root-')
    const su = hdfs.superuser
    for (const [dir, q] of [['/quota', 'namespacequota=1&storagespacequota=-1'], ['/space', 'namespacequota=-1&storagespacequota=1000']]) {
      const res = await request(`${hdfs.namenodes[0]}/webhdfs/v1${dir}?op=SETQUOTA&${q}&user.name=${su}`, { method: 'PUT', dispatcher })
      expect(res.statusCode).toBe(200)
      await res.body.dump()
    }
    sc = await startTestSidecar({
      roots: [root],
      targets: { hdfs: { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/', retry: { attempts: 4, baseDelayMs: 20, maxDelayMs: 100 } } }
    })
  })
  afterAll(async () => {
    await sc?.stop({ graceMs: 0 })
    await dispatcher?.close()
    await proxies?.stop()
    await hdfs?.stop()
  })

  it.each([
    ['a namespace quota', '/quota/a.bin', 'REMOTE_QUOTA_EXCEEDED', 'NSQuotaExceededException'],
    ['a space quota', '/space/a.bin', 'REMOTE_QUOTA_EXCEEDED', 'DSQuotaExceededException'],
    ['a parent that is a file', '/data/file.bin/child.bin', 'REMOTE_REJECTED', 'ParentNotDirectoryException']
  ])('%s fails the job at the first attempt with %s', async (label, remote, code, exception) => {
    const local = path.join(root, `perm-${code}-${exception}`)
    await makeFile(local, 5000, 1)
    if (exception === 'ParentNotDirectoryException') {
      expect(await sc.api.run({ direction: 'upload', target: 'hdfs', local, remote: '/data/file.bin' })).toMatchObject({ state: 'succeeded' })
    }
    // overwrite, so no GETFILESTATUS first (through a file it answers AccessControlException)
    const failed = await sc.api.run({ direction: 'upload', target: 'hdfs', local, remote, overwrite: true })
    expect(failed).toMatchObject({ state: 'failed', attempts: 1, error: { code, exception, javaClassName: expect.stringContaining(exception) } })
    expect(failed.error.message).not.toMatch(/\tat |\n/)
  })

  it('leaves out a datanode that failed: later CREATE and OPEN name it in excludedatanodes, and no job fails on it again', async () => {
    const backend = createWebHdfsBackend({ name: 'hdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', checksum: false })
    const jmx = await request(`${hdfs.namenodes[0]}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo`)
    const live = Object.values(JSON.parse((await jmx.body.json()).beans[0].LiveNodes))
    const xfer0 = live.find((n) => n.infoAddr === hdfs.datanodes[0]).xferaddr
    await proxies.datanodes[0].refuse() // unreachable to us; HDFS itself still uses it
    const local = path.join(root, 'excl.bin')
    await makeFile(local, 2 * MiB, 4)
    const failures = []
    const excl = () => proxies.namenodes[0].requests.map((r) => decodeURIComponent(r.line)).filter((l) => /\/excl\/.*op=(CREATE|OPEN)/.test(l))
    const sinceExcluded = () => { const s = excl(); const f = s.findIndex((l) => l.includes('excludedatanodes=')); return f < 0 ? 0 : s.length - f }
    // At least 12 rounds, and more (up to 40) until six calls came after the first exclusion: the
    // dead datanode is picked at random, sometimes only late.
    for (let i = 0; i < 40 && (i < 12 || sinceExcluded() <= 5); i++) {
      for (let attempts = 1; ; attempts++) {
        try {
          await upload(job({ direction: 'upload', local, remote: `/excl/${i}.bin`, attempts }), { backend, roots: [root] })
          break
        } catch (err) {
          expect(err).toMatchObject({ retryable: true })
          failures.push({ i, code: err.code })
          if (attempts >= 3) throw err
        }
      }
      await download(job({ direction: 'download', local: path.join(root, `excl-${i}`), remote: `/excl/${i}.bin` }), { backend, roots: [root] })
    }
    // Random placement over three datanodes: without exclusion, 12 uploads hit the dead one again.
    expect(failures.length).toBeLessThanOrEqual(1)
    const steps = excl()
    const first = steps.findIndex((l) => l.includes('excludedatanodes='))
    expect(first).toBeGreaterThanOrEqual(0)
    expect(steps.length - first).toBeGreaterThan(5)
    for (const line of steps.slice(first)) expect(line).toContain(`excludedatanodes=${xfer0}`)
    await proxies.datanodes[0].accept()
    await fs.rm(local)
  })
})
