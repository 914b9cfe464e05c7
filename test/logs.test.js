// What a job writes to the log at each level: at info one line when it ends, at warn (with its
// error code) when it failed for good; its other states at debug. So `logLevel: "warn"` shows
// exactly the failures, and a small job costs one line at the default level.
import { it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

let sc, root
beforeAll(async () => {
  root = await tempDir('logs-root-')
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: path.join(root, 'store') } } })
})
afterAll(() => sc?.stop({ graceMs: 0 }))

it('logs a job\'s end at info, a failure at warn with its code, and its other states at debug', async () => {
  const local = path.join(root, 'a.txt')
  await fs.writeFile(local, 'hello\n')
  const ok = await sc.api.run({ direction: 'upload', target: 'local', local, remote: '/a.txt' })
  const refused = await sc.api.run({ direction: 'upload', target: 'local', local, remote: '/a.txt' }) // exists, overwrite false
  expect([ok.state, refused.state]).toEqual(['succeeded', 'failed'])
  await new Promise((resolve) => setTimeout(resolve, 50))
  const lines = (id) => sc.logs.records().filter((r) => r.job === id && r.msg === 'job state').map((r) => [r.level, r.state, r.error?.code ?? null])
  expect(lines(ok.id)).toEqual([[20, 'queued', null], [20, 'running', null], [20, 'running', null], [30, 'succeeded', null]])
  expect(lines(refused.id).at(-1)).toEqual([40, 'failed', 'REMOTE_EXISTS'])
  expect(lines(refused.id).slice(0, -1).every(([level]) => level === 20)).toBe(true)
})
