// Error messages that say what is allowed (issue #21): the roots a local path must be in, the
// configured targets, a missing field named as missing, where the JSON broke, which target a file
// exists on; and the start-up log lists the roots. None of them carries a secret.
import { it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { validateConfig } from '../src/config.js'

let sc, root
const token = 'a-secret-token-0123456789'
beforeAll(async () => {
  root = await tempDir('messages-root-')
  sc = await startTestSidecar({ roots: [root], token, targets: { local: { type: 'file', dir: path.join(root, 'store') }, other: { type: 'file', dir: path.join(root, 'other') } } })
})
afterAll(() => sc?.stop({ graceMs: 0 }))

it('names the roots, the targets, a missing direction, where the JSON broke and the target a file exists on', async () => {
  const base = { direction: 'upload', target: 'local', remote: '/m.txt' }
  const outside = await sc.api.submit({ ...base, local: '/etc/hostname' })
  expect(outside.json.error).toEqual({ code: 'PATH_NOT_ALLOWED', message: `/etc/hostname is not inside a configured root (roots: ${JSON.stringify(root)})` })
  const target = await sc.api.submit({ ...base, target: 'hdfs', local: path.join(root, 'x') })
  expect(target.json.error).toEqual({ code: 'UNKNOWN_TARGET', message: 'no target named "hdfs" (configured: "local", "other")' })
  const { direction, ...noDirection } = base
  expect((await sc.api.submit({ ...noDirection, local: path.join(root, 'x') })).json.error.message).toBe('direction is required: "upload" or "download"')
  const broken = await sc.api.call('POST', '/v1/jobs', '{"direction": "upload",\n  target: "local"}')
  expect(broken.json.error).toEqual({ code: 'INVALID_JSON', message: 'the body is not valid JSON (line 2, column 3)' })
  const local = path.join(root, 'm.txt')
  await fs.writeFile(local, 'm')
  expect((await sc.api.run({ ...base, local })).state).toBe('succeeded')
  const again = await sc.api.run({ ...base, local })
  expect(again.error.message).toBe('/m.txt exists on target "local" and overwrite is false')
  const logs = sc.logs.lines.join('\n')
  expect(logs).not.toContain(token)
  expect(sc.logs.records().find((r) => r.msg === 'transfer-sidecar listening').roots).toEqual([root])
})

it('says "is required" for a missing config field, not "got undefined"', async () => {
  const dir = await tempDir('messages-config-')
  expect(() => validateConfig({ stateDir: dir, roots: [dir], targets: { h: { type: 'http' } } })).toThrow('config: targets.h.url: is required: must be an http(s) URL')
  expect(() => validateConfig({ stateDir: dir, roots: [dir], targets: { f: { type: 'file' } } })).toThrow(/targets\.f\.dir: is required/)
})
