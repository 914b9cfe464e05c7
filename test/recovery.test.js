// Crash between "verified" and "succeeded": the journal says phase "publishing". After a restart
// the job must finish its publish (or notice it already happened), not transfer again and then
// fail on overwrite=false. The journal is seeded exactly as a crash at that moment leaves it.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createHash } from 'node:crypto'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { uploadTempPath } from '../src/backends/index.js'

const sha = (s) => createHash('sha256').update(s).digest('hex')
let sc

afterEach(async () => { await sc?.stop({ graceMs: 0 }); sc = null })

async function seed ({ direction, local, remote, bytes, sha256 }) {
  const stateDir = await tempDir('recovery-state-')
  await fs.mkdir(path.join(stateDir, 'jobs'))
  const now = new Date().toISOString()
  const job = {
    ...{ id: 'crashed-job-1', direction, target: 'local', local, remote, overwrite: false, expectedSha256: null },
    ...{ state: 'running', phase: 'publishing', attempts: 1, bytes, size: bytes, sha256, rate: null, error: null },
    ...{ createdAt: now, updatedAt: now, startedAt: now, finishedAt: null, nextAttemptAt: null }
  }
  await fs.writeFile(path.join(stateDir, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
  return stateDir
}

async function boot (stateDir, root, store) {
  sc = await startTestSidecar({ stateDir, roots: [root], targets: { local: { type: 'file', dir: store } } })
  return (await sc.api.job('crashed-job-1', 30)).json
}

describe('recovery of a job that crashed while publishing', () => {
  it('download: renames the verified temp file into place', async () => {
    const root = await tempDir()
    const store = await tempDir()
    const local = path.join(root, 'out.txt')
    await fs.writeFile(path.join(root, '.out.txt.crashed-job-1.part'), 'payload')
    const job = await boot(await seed({ direction: 'download', local, remote: '/r.txt', bytes: 7, sha256: sha('payload') }), root, store)
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2, sha256: sha('payload') })
    expect(await fs.readFile(local, 'utf8')).toBe('payload')
    expect(await fs.readdir(root)).toEqual(['out.txt'])
  })

  it('download: accepts a rename that had already happened', async () => {
    const root = await tempDir()
    const local = path.join(root, 'out.txt')
    await fs.writeFile(local, 'payload')
    const job = await boot(await seed({ direction: 'download', local, remote: '/absent.txt', bytes: 7, sha256: sha('payload') }), root, await tempDir())
    expect(job).toMatchObject({ state: 'succeeded', error: null })
  })

  it('download: starts over when the file in place is not the one verified', async () => {
    const root = await tempDir()
    const local = path.join(root, 'out.txt')
    await fs.writeFile(local, 'someone else')
    const job = await boot(await seed({ direction: 'download', local, remote: '/absent.txt', bytes: 7, sha256: sha('payload') }), root, await tempDir())
    expect(job).toMatchObject({ state: 'failed', error: { code: 'LOCAL_EXISTS' } })
  })

  it('upload: publishes the verified temp object', async () => {
    const root = await tempDir()
    const store = await tempDir()
    const local = path.join(root, 'in.txt')
    await fs.writeFile(local, 'payload')
    const tmp = path.join(store, uploadTempPath('/up/r.txt', 'crashed-job-1'))
    await fs.mkdir(path.dirname(tmp), { recursive: true })
    await fs.writeFile(tmp, 'payload')
    const job = await boot(await seed({ direction: 'upload', local, remote: '/up/r.txt', bytes: 7, sha256: sha('payload') }), root, store)
    expect(job).toMatchObject({ state: 'succeeded', attempts: 2 })
    expect(await fs.readdir(path.join(store, 'up'))).toEqual(['r.txt'])
  })

  it('upload: accepts a publish that had already happened despite overwrite=false', async () => {
    const root = await tempDir()
    const store = await tempDir()
    const local = path.join(root, 'in.txt')
    await fs.writeFile(local, 'payload')
    await fs.writeFile(path.join(store, 'r.txt'), 'payload')
    const job = await boot(await seed({ direction: 'upload', local, remote: '/r.txt', bytes: 7, sha256: sha('payload') }), root, store)
    expect(job).toMatchObject({ state: 'succeeded', error: null })
  })
})

// An attempt cut by a crash counts: a job found "running" at a start after its last attempt (the
// test sidecar allows 3) may be what crashes the daemon, and is not run again.
describe('recovery of a job whose every attempt was cut by a crash', () => {
  async function seedRunning (attempts, local) {
    const stateDir = await tempDir('recovery-state-')
    await fs.mkdir(path.join(stateDir, 'jobs'))
    const now = new Date().toISOString()
    const job = {
      ...{ id: 'crashed-job-1', direction: 'upload', target: 'local', local, remote: '/r.txt', overwrite: false, expectedSha256: null },
      ...{ state: 'running', attempts, bytes: 3, size: 7, sha256: null, rate: null, error: null },
      ...{ createdAt: now, updatedAt: now, startedAt: now, finishedAt: null, nextAttemptAt: null }
    }
    await fs.writeFile(path.join(stateDir, 'jobs', 'jobs.journal'), JSON.stringify({ op: 'put', job }) + '\n')
    return stateDir
  }

  it('fails it with INTERRUPTED after its last attempt, without running it', async () => {
    const root = await tempDir()
    const store = await tempDir()
    const local = path.join(root, 'in.txt')
    await fs.writeFile(local, 'payload')
    const job = await boot(await seedRunning(3, local), root, store)
    expect(job).toMatchObject({ state: 'failed', attempts: 3, error: { code: 'INTERRUPTED' } })
    expect(await fs.readdir(store)).toEqual([]) // nothing written, no temp left
  })

  it('runs it again while it has attempts left', async () => {
    const root = await tempDir()
    const store = await tempDir()
    const local = path.join(root, 'in.txt')
    await fs.writeFile(local, 'payload')
    const job = await boot(await seedRunning(2, local), root, store)
    expect(job).toMatchObject({ state: 'succeeded', attempts: 3, sha256: sha('payload') })
    expect(await fs.readFile(path.join(store, 'r.txt'), 'utf8')).toBe('payload')
  })
})
