// The spool directory is writable by PHP: what PHP puts there (a symlink in place of rejected/, or
// of a reason file in it) must not make the daemon write outside it when it rejects a file.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor, spoolJob } from './helpers/sidecar.js'
import { LocalIoError } from '../src/errors.js'

let sc, root, spool, outside

beforeAll(async () => {
  root = await tempDir('spool-root-')
  outside = await tempDir('spool-outside-')
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: await tempDir('spool-store-') } }, extra: { spool: { intervalMs: 50 } } })
  spool = sc.config.spool.dir
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

const rejected = () => path.join(spool, 'rejected')
const exists = (p) => fs.lstat(p).then(() => true, () => false)

describe('spool rejections stay in the spool', () => {
  it('a symlink planted as the reason file is replaced, not written through', async () => {
    const victim = path.join(outside, 'victim.txt')
    await fs.writeFile(victim, 'must stay')
    await fs.mkdir(rejected(), { recursive: true })
    await fs.symlink(victim, path.join(rejected(), 'evil-job-0001.json.error.json'))
    await fs.writeFile(path.join(spool, 'evil-job-0001.json'), 'not json')
    await waitFor(() => exists(path.join(rejected(), 'evil-job-0001.json')))
    await new Promise((resolve) => setTimeout(resolve, 200)) // the reason is written after the move
    expect(await fs.readFile(victim, 'utf8')).toBe('must stay')
    expect((await fs.lstat(path.join(rejected(), 'evil-job-0001.json.error.json'))).isFile()).toBe(true)
    expect(JSON.parse(await fs.readFile(path.join(rejected(), 'evil-job-0001.json.error.json'), 'utf8')).error.code).toBe('INVALID_JSON')
  })

  it('rejected/ replaced by a symlink to another directory: nothing lands there', async () => {
    const elsewhere = path.join(outside, 'elsewhere')
    await fs.mkdir(elsewhere)
    await fs.rm(rejected(), { recursive: true, force: true })
    await fs.symlink(elsewhere, rejected())
    await fs.writeFile(path.join(spool, 'evil-job-0002.json'), 'attacker content')
    await waitFor(async () => !await exists(path.join(spool, 'evil-job-0002.json')) || (await fs.readdir(elsewhere)).length > 0)
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(await fs.readdir(elsewhere)).toEqual([])
    expect((await fs.lstat(rejected())).isDirectory()).toBe(true)
    expect(await exists(path.join(rejected(), 'evil-job-0002.json.error.json'))).toBe(true)
  })

  it('rejected/ replaced by a dangling symlink: replaced by a directory', async () => {
    await fs.rm(rejected(), { recursive: true, force: true })
    await fs.symlink(path.join(outside, 'not-there'), rejected())
    await fs.writeFile(path.join(spool, 'evil-job-0003.json'), 'attacker content')
    await waitFor(() => exists(path.join(rejected(), 'evil-job-0003.json.error.json')))
    expect((await fs.lstat(rejected())).isDirectory()).toBe(true)
    expect(await exists(path.join(outside, 'not-there'))).toBe(false)
  })
})

describe('spool housekeeping', () => {
  // A PHP worker killed while writing its spool file leaves `.tmp-<id>-<random>` (its caller got no
  // id, so no job is lost); the daemon removes such files once they are an hour old.
  it('removes temp files of writers that died an hour ago, and no others', async () => {
    const stale = path.join(spool, '.tmp-stale-job-0001-a1b2c3d4e5f6')
    const fresh = path.join(spool, '.tmp-fresh-job-0001-a1b2c3d4e5f6')
    const other = path.join(spool, '.tmp-not-ours')
    for (const f of [stale, fresh, other]) await fs.writeFile(f, '{"id":')
    const twoHoursAgo = new Date(Date.now() - 2 * 3600 * 1000)
    for (const f of [stale, other]) await fs.utimes(f, twoHoursAgo, twoHoursAgo)
    await sc.spool.trigger()
    expect([await exists(stale), await exists(fresh), await exists(other)]).toEqual([false, true, true])
  })
})

// What fails on our side (out of descriptors, a 5xx of the daemon) is not the spooled job's fault:
// the file stays for the next scan, and the files after it are ingested meanwhile.
describe('spool failures of the daemon', () => {
  const job = (id) => ({ id, direction: 'upload', target: 'local', local: path.join(root, 'spooled.txt'), remote: `/spooled/${id}.txt` })
  const known = async (id) => (await sc.api.job(id)).status === 200
  // Waits until the daemon knows every one of `ids`; if it does not, says what the spool holds.
  const ingested = async (ids) => {
    try {
      await waitFor(async () => (await Promise.all(ids.map(known))).every(Boolean))
    } catch (err) {
      const reasons = await fs.readdir(rejected()).catch(() => []).then((names) => Promise.all(names.filter((n) => n.endsWith('.error.json')).map((n) => fs.readFile(path.join(rejected(), n), 'utf8').then((r) => `${n}: ${r.trim()}`))))
      throw new Error(`${err.message}; unknown: ${(await Promise.all(ids.map(async (id) => await known(id) ? null : id))).filter(Boolean)}; spool: ${await fs.readdir(spool)}; rejected: ${reasons.join(' | ')}`)
    }
  }

  it('a file it cannot open for now (EMFILE) is read again at the next scan, not rejected', async () => {
    await fs.writeFile(path.join(root, 'spooled.txt'), 'spooled\n')
    const id = 'spool-emfile-0001'
    const open = fs.open
    let failed = 0
    fs.open = async (p, ...rest) => {
      if (String(p).endsWith(`${id}.json`) && failed++ === 0) throw Object.assign(new Error('EMFILE: too many open files, open'), { code: 'EMFILE' })
      return open.call(fs, p, ...rest)
    }
    try {
      await spoolJob(spool, job(id))
      await ingested([id])
    } finally {
      fs.open = open
    }
    expect(failed).toBeGreaterThan(1)
    expect(await exists(path.join(rejected(), `${id}.json`))).toBe(false)
  })

  it('a job the daemon answers with a 5xx stays in the spool, and the files after it are ingested', async () => {
    await fs.writeFile(path.join(root, 'spooled.txt'), 'spooled\n')
    const blocker = 'spool-blocker-0000'
    const others = ['spool-after-0001', 'spool-after-0002', 'spool-after-0003']
    const submit = sc.scheduler.submit
    const readdir = fs.readdir
    sc.scheduler.submit = function (body) {
      if (body.id === blocker) return Promise.reject(new LocalIoError('cannot resolve it (EIO)'))
      return submit.call(this, body)
    }
    // The blocker first, as a directory listing may well put it.
    fs.readdir = async (...args) => {
      const names = await readdir.apply(fs, args)
      return String(args[0]) === spool ? [...names.filter((n) => n.startsWith(blocker)), ...names.filter((n) => !n.startsWith(blocker))] : names
    }
    try {
      for (const id of [blocker, ...others]) await spoolJob(spool, job(id))
      await ingested(others)
      expect(await exists(path.join(spool, `${blocker}.json`))).toBe(true)
      expect(await exists(path.join(rejected(), `${blocker}.json`))).toBe(false)
    } finally {
      sc.scheduler.submit = submit
      fs.readdir = readdir
    }
    await ingested([blocker]) // the next scan, once the daemon takes it
  })

  // `method` of fs fails with `code` for the blocker's spool file, which comes first in the listing
  // (as a directory listing may well put it); returns what undoes both.
  const blocking = (blocker, method, code) => {
    const original = fs[method]
    const readdir = fs.readdir
    fs[method] = async (p, ...rest) => {
      if (String(p).endsWith(`${blocker}.json`)) throw Object.assign(new Error(`${code}: ${method} refused`), { code })
      return original.call(fs, p, ...rest)
    }
    fs.readdir = async (...args) => {
      const names = await readdir.apply(fs, args)
      return String(args[0]) === spool ? [...names.filter((n) => n.startsWith(blocker)), ...names.filter((n) => !n.startsWith(blocker))] : names
    }
    return () => {
      fs[method] = original
      fs.readdir = readdir
    }
  }
  const spoolCount = async (outcome) => Number(new RegExp(`^sidecar_spool_files_total\\{outcome="${outcome}"\\} (\\d+)`, 'm').exec((await sc.api.call('GET', '/metrics')).text)[1])
  const scanErrors = (name) => sc.logs.records().filter((l) => l.file === name && l.msg.startsWith('cannot move or remove'))

  it('a file it cannot move to rejected/ stays, logged once, and the files after it are ingested', async () => {
    await fs.writeFile(path.join(root, 'spooled.txt'), 'spooled\n')
    const blocker = 'spool-badmove-0000'
    const others = ['spool-badmove-0001', 'spool-badmove-0002']
    const restore = blocking(blocker, 'rename', 'EISDIR') // what a directory under its name in rejected/ makes of the move
    try {
      await fs.writeFile(path.join(spool, `${blocker}.json`), 'not json')
      for (const id of others) await spoolJob(spool, job(id))
      await ingested(others)
      await sc.spool.trigger()
      await sc.spool.trigger()
      expect(await exists(path.join(spool, `${blocker}.json`))).toBe(true)
      expect(scanErrors(`${blocker}.json`)).toHaveLength(1)
    } finally {
      restore()
    }
    await waitFor(() => exists(path.join(rejected(), `${blocker}.json`)))
  })

  it('a file it cannot remove once its job is in the journal is not submitted again, and the files after it are ingested', async () => {
    await fs.writeFile(path.join(root, 'spooled.txt'), 'spooled\n')
    const blocker = 'spool-noremove-0000'
    const others = ['spool-noremove-0001', 'spool-noremove-0002']
    const restore = blocking(blocker, 'unlink', 'EPERM') // a spool it may write but not remove from (sticky, another owner)
    const before = { ingested: await spoolCount('ingested'), duplicate: await spoolCount('duplicate') }
    try {
      for (const id of [blocker, ...others]) await spoolJob(spool, job(id))
      await ingested([blocker, ...others])
      for (let i = 0; i < 3; i++) await sc.spool.trigger()
      expect(await exists(path.join(spool, `${blocker}.json`))).toBe(true)
      expect(scanErrors(`${blocker}.json`)).toHaveLength(1)
    } finally {
      restore()
    }
    await waitFor(async () => !await exists(path.join(spool, `${blocker}.json`)))
    expect(await spoolCount('ingested') - before.ingested).toBe(3)
    expect(await spoolCount('duplicate') - before.duplicate).toBe(0)
  })
})
