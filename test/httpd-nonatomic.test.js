// An http target with `atomic: false` PUTs straight to the final name. With `overwrite: false` its
// early existence check cannot be the only guard: another writer may take the name between that
// check and the PUT, whose file the upload then replaced. The PUT carries If-None-Match: *, so
// httpd itself refuses (412, REMOTE_EXISTS) and the other writer's file stays.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import http from 'node:http'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

let httpd, proxy, sc, root
const raced = new Set() // names another writer takes when their PUT arrives

beforeAll(async () => {
  httpd = await startHttpd()
  const upstream = new URL(httpd.uploadUrl)
  // In front of httpd: before it forwards a PUT to a name in `raced`, "another writer" stores it.
  proxy = http.createServer(async (req, res) => {
    const name = decodeURIComponent(new URL(req.url, 'http://x').pathname.slice(upstream.pathname.length))
    if (req.method === 'PUT' && raced.has(name)) await fs.writeFile(path.join(httpd.davDir, name), 'the other writer\n')
    const out = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers)
      answer.pipe(res)
    })
    out.on('error', () => res.destroy())
    req.pipe(out)
  })
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  root = await tempDir('nonatomic-root-')
  await fs.writeFile(path.join(root, 'a.txt'), 'ours\n')
  const url = `http://127.0.0.1:${proxy.address().port}${upstream.pathname}`
  sc = await startTestSidecar({ roots: [root], targets: { web: { type: 'http', url, atomic: false, retry: { attempts: 1 } } } })
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  proxy?.close()
  await httpd?.stop()
})

describe('atomic: false with overwrite: false', () => {
  it('a name taken between the existence check and the PUT is REMOTE_EXISTS, and the other file stays', async () => {
    raced.add('taken.txt')
    const job = await sc.api.run({ direction: 'upload', target: 'web', local: path.join(root, 'a.txt'), remote: '/taken.txt' })
    expect(job).toMatchObject({ state: 'failed', error: { code: 'REMOTE_EXISTS' } })
    expect(await fs.readFile(path.join(httpd.davDir, 'taken.txt'), 'utf8')).toBe('the other writer\n')
  })

  it('a free name is stored, and overwrite: true replaces', async () => {
    const local = path.join(root, 'a.txt')
    expect(await sc.api.run({ direction: 'upload', target: 'web', local, remote: '/free.txt' })).toMatchObject({ state: 'succeeded' })
    expect(await fs.readFile(path.join(httpd.davDir, 'free.txt'), 'utf8')).toBe('ours\n')
    raced.add('replaced.txt')
    expect(await sc.api.run({ direction: 'upload', target: 'web', local, remote: '/replaced.txt', overwrite: true })).toMatchObject({ state: 'succeeded' })
    expect(await fs.readFile(path.join(httpd.davDir, 'replaced.txt'), 'utf8')).toBe('ours\n')
  })
})
