// Atomic publish on WebHDFS: the bytes go to a hidden temp name (suffix configurable per target),
// its length is checked with GETFILESTATUS, then RENAME puts it in place (OVERWRITE or NONE); a
// cancelled or failed upload leaves no temp file; a RENAME whose answer is lost is not mistaken
// for a failure. Against a real MiniDFSCluster behind proxies (tcp-proxy.js).
import { it, expect, beforeAll, afterAll, afterEach } from 'vitest'
import path from 'node:path'
import { Agent, request } from 'undici'
import { startHdfs } from './harness/hdfs.js'
import { startHdfsProxies } from './harness/tcp-proxy.js'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'

const MiB = 1 << 20
let hdfs, proxies, sc, root, dispatcher

beforeAll(async () => {
  hdfs = await startHdfs()
  await hdfs.command('mkdir /data www-data 755')
  proxies = await startHdfsProxies(hdfs)
  dispatcher = new Agent()
  root = await tempDir('publish-root-')
  const target = { type: 'webhdfs', namenodes: proxies.urls, user: 'www-data', base: '/data', retry: { attempts: 3, baseDelayMs: 20, maxDelayMs: 50 } }
  sc = await startTestSidecar({
    roots: [root],
    targets: { hdfs: target, suffixed: { ...target, tempSuffix: '.partial' } }
  })
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  await dispatcher?.close()
  await proxies?.stop()
  await hdfs?.stop()
})
afterEach(() => {
  for (const p of [...proxies.namenodes, ...proxies.datanodes]) p.fault(null)
})

async function list (dir) {
  const res = await request(`${hdfs.namenodes[0]}/webhdfs/v1/data${dir}?op=LISTSTATUS&user.name=www-data`, { dispatcher })
  if (res.statusCode === 404) return (await res.body.dump(), [])
  return (await res.body.json()).FileStatuses.FileStatus.map((s) => s.pathSuffix)
}
const lines = (filter) => proxies.namenodes[0].requests.map((r) => decodeURIComponent(r.line)).filter((l) => l.includes(filter))

it('writes to the temp name, checks its length, renames it over the final name', async () => {
  const src = path.join(root, 'p.bin')
  await makeFile(src, 300000, 1)
  const job = await sc.api.run({ direction: 'upload', target: 'hdfs', local: src, remote: '/pub/p.bin' })
  expect(job.state).toBe('succeeded')
  const tmp = `/data/pub/.p.bin.${job.id}._COPYING_`
  const ops = lines(`.p.bin.${job.id}`).map((l) => /op=(\w+)/.exec(l)[1])
  expect(ops).toEqual(['CREATE', 'GETFILESTATUS', 'GETFILECHECKSUM', 'RENAME'])
  expect(lines(`${tmp}?op=RENAME`)[0]).toMatch(/destination=\/data\/pub\/p\.bin&renameoptions=NONE/)
  expect(await list('/pub')).toEqual(['p.bin'])
  const again = await sc.api.run({ direction: 'upload', target: 'hdfs', local: src, remote: '/pub/p.bin', overwrite: true })
  expect(lines(`.p.bin.${again.id}._COPYING_?op=RENAME`)[0]).toMatch(/renameoptions=OVERWRITE/)
})

it('uses the target\'s temp suffix', async () => {
  const src = path.join(root, 's.bin')
  await makeFile(src, 1000, 2)
  const job = await sc.api.run({ direction: 'upload', target: 'suffixed', local: src, remote: '/pub/s.bin' })
  expect(job.state).toBe('succeeded')
  expect(lines(`/data/pub/.s.bin.${job.id}.partial?op=CREATE`)).toHaveLength(1)
})

it('removes the temp file of a cancelled upload', async () => {
  const src = path.join(root, 'c.bin')
  await makeFile(src, 12 * MiB, 3)
  proxies.datanodes[0].fault({ rate: 2 * MiB, direction: 'up', match: /op=CREATE/ })
  const { json } = await sc.api.submit({ direction: 'upload', target: 'hdfs', local: src, remote: '/cancel/c.bin' })
  await waitFor(async () => (await list('/cancel')).length > 0 && (await sc.api.job(json.id)).json.bytes > MiB)
  expect((await sc.api.call('DELETE', `/v1/jobs/${json.id}`)).json.state).toBe('cancelled')
  await waitFor(async () => (await list('/cancel')).length === 0, { timeoutMs: 10000 })
})

it('removes the temp file of an upload that failed for good', async () => {
  const src = path.join(root, 'f.bin')
  await makeFile(src, 4 * MiB, 4)
  proxies.datanodes[0].fault({ resetAfter: MiB, direction: 'up', match: /op=CREATE/ })
  const job = await sc.api.run({ direction: 'upload', target: 'hdfs', local: src, remote: '/failed/f.bin' })
  expect(job).toMatchObject({ state: 'failed', attempts: 3, error: { code: 'NETWORK_ERROR' } })
  await waitFor(async () => (await list('/failed')).length === 0, { timeoutMs: 10000 })
})

it('takes a RENAME whose answer was lost for done when the file is in place', async () => {
  const src = path.join(root, 'r.bin')
  await makeFile(src, 100000, 5)
  // The namenode renames, then the connection breaks before its answer reaches us; asked again,
  // it answers FileNotFoundException for the temp name, which is gone because it worked.
  proxies.namenodes[0].fault({ resetAfter: 0, connections: 1, match: /op=RENAME/ })
  const job = await sc.api.run({ direction: 'upload', target: 'hdfs', local: src, remote: '/lost/r.bin' })
  expect(job).toMatchObject({ state: 'succeeded', attempts: 1 })
  expect(lines('/lost/.r.bin').filter((l) => l.includes('op=RENAME'))).toHaveLength(2)
  expect(await list('/lost')).toEqual(['r.bin'])
})
