// Upload sources are checked at submit, not only when the job runs: a directory, a FIFO or a
// root itself is refused with 400 INVALID_PATH instead of an accepted job that fails later.
import { describe, it, expect, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { resolveSource, resolveDestination } from '../src/paths.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

let sc
afterAll(() => sc?.stop({ graceMs: 0 }))

describe('upload sources', () => {
  it('resolveSource refuses what is not a regular file, without opening it', async () => {
    const root = await tempDir('paths-root-')
    await fs.mkdir(path.join(root, 'dir'))
    execFileSync('mkfifo', [path.join(root, 'fifo')])
    await fs.writeFile(path.join(root, 'file'), 'x')
    for (const name of ['dir', 'fifo', '']) {
      const err = await resolveSource(path.join(root, name), [root]).then(() => null, (e) => e)
      expect(err?.code, name || 'the root').toBe('INVALID_PATH')
    }
    expect(await resolveSource(path.join(root, 'file'), [root])).toBe(path.join(await fs.realpath(root), 'file'))
  })

  // The caller's path, not our disk: 403 like the other path errors, not 500 LOCAL_IO (a spooled
  // job answered 500 there stayed in the spool for ever). Root may look up anything, so as root the
  // check runs in a child process as nobody.
  // A download's destination likewise: its directory resolves without that right (realpath), and
  // the lstat of the file in it, which needs it, failed silently, and the job LOCAL_IO later.
  it.each(['resolveSource', 'resolveDestination'])('%s: a path under a directory the daemon may not search is 403 PATH_NOT_ALLOWED', async (resolve) => {
    const top = await tempDir('paths-locked-')
    await fs.chmod(top, 0o755)
    const root = path.join(top, 'root')
    await fs.mkdir(path.join(root, 'locked'), { recursive: true })
    await fs.writeFile(path.join(root, 'locked', 'x.txt'), 'x')
    await fs.chmod(path.join(root, 'locked'), 0o000)
    const check = `const { ${resolve} } = await import(${JSON.stringify(new URL('../src/paths.js', import.meta.url).href)})
      const err = await ${resolve}(${JSON.stringify(path.join(root, 'locked', 'x.txt'))}, [${JSON.stringify(root)}]).then(() => null, (e) => e)
      console.log(JSON.stringify({ code: err?.code, statusCode: err?.statusCode, message: err?.message }))`
    const asNobody = process.getuid() === 0 ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] : []
    const [cmd, ...args] = [...asNobody, process.execPath, '--input-type=module', '-e', check]
    const err = JSON.parse(execFileSync(cmd, args, { encoding: 'utf8' }))
    expect(err).toMatchObject({ code: 'PATH_NOT_ALLOWED', statusCode: 403 })
    expect(err.message).toMatch(/not permitted.*EACCES/)
  })

  // Outside the roots the answer does not depend on what exists there: it told a caller which
  // files the daemon's user can see (403 for one that exists, 422 for one that does not).
  it.each(['resolveSource', 'resolveDestination'])('%s: a path outside the roots is PATH_NOT_ALLOWED whether or not it exists', async (resolve) => {
    const root = await tempDir('paths-root-')
    const outside = await tempDir('paths-outside-')
    await fs.writeFile(path.join(outside, 'there.txt'), 'x')
    const fn = { resolveSource, resolveDestination }[resolve]
    for (const p of [path.join(outside, 'there.txt'), path.join(outside, 'missing.txt'), path.join(outside, 'nodir', 'x.txt'), '/nonexistent-top/x.txt']) {
      const err = await fn(p, [root]).then(() => null, (e) => e)
      expect(err?.code, p).toBe('PATH_NOT_ALLOWED')
    }
    // Nor through a symlink a caller put in a root, to a file outside, there or not (also as a directory).
    await fs.writeFile(path.join(outside, 'linked.txt'), 'x')
    await fs.symlink(path.join(outside, 'linked.txt'), path.join(root, `to-there-${resolve}`))
    await fs.symlink(path.join(outside, 'nothing.txt'), path.join(root, `to-nothing-${resolve}`))
    // (A download's destination that is such a link is the link itself, replaced at the publish.)
    const final = resolve === 'resolveSource' ? [`to-there-${resolve}`, `to-nothing-${resolve}`] : []
    for (const p of [...final, `to-there-${resolve}/x.txt`, `to-nothing-${resolve}/x.txt`]) {
      const err = await fn(path.join(root, p), [root]).then(() => null, (e) => e)
      expect(err?.code, p).toBe('PATH_NOT_ALLOWED')
    }
    // Inside a root, a missing file is still said to be missing.
    const missing = await resolveSource(path.join(root, 'missing.txt'), [root]).then(() => null, (e) => e)
    expect(missing?.code).toBe('LOCAL_NOT_FOUND')
    const missingDir = await resolveDestination(path.join(root, 'nodir', 'x.txt'), [root]).then(() => null, (e) => e)
    expect(missingDir?.code).toBe('LOCAL_NOT_FOUND')
  })

  it('a download to a name over 255 bytes is refused at submit', async () => {
    const root = await tempDir('paths-root-')
    const err = await resolveDestination(path.join(root, 'n'.repeat(256)), [root]).then(() => null, (e) => e)
    expect(err?.code).toBe('INVALID_PATH')
    expect((await resolveDestination(path.join(root, 'n'.repeat(255)), [root])).name).toHaveLength(255)
  })

  it('POST /v1/jobs answers 400 INVALID_PATH for a directory or FIFO as the source', async () => {
    const root = await tempDir('paths-root-')
    await fs.mkdir(path.join(root, 'dir'))
    execFileSync('mkfifo', [path.join(root, 'fifo')])
    sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: await tempDir('paths-store-') } } })
    for (const local of [path.join(root, 'dir'), path.join(root, 'fifo'), root, root + '/']) {
      const r = await sc.api.submit({ direction: 'upload', target: 'local', local, remote: '/x' })
      expect([r.status, r.json?.error?.code], local).toEqual([400, 'INVALID_PATH'])
      expect(r.json.error.message).toContain('is not a regular file')
    }
  })
})

describe('download destinations', () => {
  // path.resolve drops a final "/": "<root>/newdir/" became a file named newdir.
  it('POST /v1/jobs answers 400 INVALID_PATH for a local that names a directory', async () => {
    const root = await tempDir('paths-root-')
    await fs.mkdir(path.join(root, 'sub'))
    await sc?.stop({ graceMs: 0 })
    sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: await tempDir('paths-store-') } } })
    for (const local of [path.join(root, 'newdir') + '/', path.join(root, 'sub'), path.join(root, 'sub') + '/', path.join(root, 'sub') + '/.', path.join(root, 'sub') + '/..']) {
      for (const overwrite of [false, true]) {
        const r = await sc.api.submit({ direction: 'download', target: 'local', local, remote: '/x', overwrite })
        expect([r.status, r.json?.error?.code], local).toEqual([400, 'INVALID_PATH'])
      }
    }
    expect(await fs.readdir(root)).toEqual(['sub'])
  })
})
