// The daemon as a real process: kill -9 and SIGTERM in the middle of transfers, then restart.
// Every acknowledged job must survive and complete, with no partial or temp file left behind.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { request } from 'undici'
import { startHdfs } from './harness/hdfs.js'
import { startFaultServer } from './harness/faults.js'
import { spawnSidecar, client, tempDir, waitFor } from './helpers/sidecar.js'
import { makeFile, sha256File, patternStream } from './helpers/files.js'
import { createHash } from 'node:crypto'
import { freePort } from './helpers/ports.js'

const MiB = 1 << 20
let hdfs, faults, root, stateDir, config, proc, api

beforeAll(async () => {
  ;[hdfs, faults] = await Promise.all([startHdfs(), startFaultServer()])
  await hdfs.command('mkdir /data www-data 755')
  root = await tempDir('restart-root-')
  stateDir = await tempDir('restart-state-')
  const port = await freePort()
  config = {
    listen: [`127.0.0.1:${port}`],
    stateDir,
    roots: [root],
    shutdownGraceMs: 300,
    retry: { attempts: 5, baseDelayMs: 50, maxDelayMs: 500 },
    targets: {
      hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' },
      faults: { type: 'http', url: faults.url, atomic: false, concurrency: 8 }
    }
  }
  api = client(`http://127.0.0.1:${port}`)
})

afterEach(async () => { await proc?.kill('SIGKILL') })
afterAll(async () => { await Promise.all([hdfs?.stop(), faults?.stop()]) })

const start = async () => { proc = await spawnSidecar(config, { dir: stateDir }) }

async function hdfsList (dir) {
  const res = await request(`${hdfs.namenodes[0]}/webhdfs/v1${dir}?op=LISTSTATUS&user.name=www-data`)
  return (await res.body.json()).FileStatuses.FileStatus.map((s) => ({ name: s.pathSuffix, length: s.length }))
}

describe('kill -9 and restart', () => {
  it('resumes a download that was running and leaves no temp file', async () => {
    await start()
    const out = path.join(root, 'slow.bin')
    const size = 6 * MiB
    const { json } = await api.submit({ direction: 'download', target: 'faults', local: out, remote: `/slow/${size}/${3 * MiB}` })
    await waitFor(async () => (await api.job(json.id)).json.bytes > MiB)
    await proc.kill('SIGKILL')
    await start()
    const job = (await api.job(json.id, 60)).json
    expect(job).toMatchObject({ state: 'succeeded', bytes: size })
    expect(job.attempts).toBeGreaterThanOrEqual(2)
    const hash = createHash('sha256')
    for await (const c of patternStream(size, size)) hash.update(c)
    expect(await sha256File(out)).toBe(hash.digest('hex'))
    expect((await fs.readdir(root)).filter((n) => n.endsWith('.part'))).toEqual([])
  })

  it('completes an HDFS upload that was killed mid-stream, without overwrite, with no _COPYING_ left', async () => {
    await start()
    const src = path.join(root, 'big.bin')
    const sha = await makeFile(src, 300 * MiB, 7)
    const { json } = await api.submit({ direction: 'upload', target: 'hdfs', local: src, remote: '/killed/big.bin', overwrite: false })
    await waitFor(async () => (await api.job(json.id)).json.bytes > 20 * MiB, { intervalMs: 5 })
    await proc.kill('SIGKILL')
    await start()
    const job = (await api.job(json.id, 120)).json
    expect(job).toMatchObject({ state: 'succeeded', bytes: 300 * MiB, sha256: sha })
    expect(await hdfsList('/data/killed')).toEqual([{ name: 'big.bin', length: 300 * MiB }])
    await fs.rm(src)
  })

  it('never loses an acknowledged job: 200 submitted, killed right after the last 202', async () => {
    await start()
    const ids = []
    for (let i = 0; i < 200; i++) {
      const r = await api.submit({ direction: 'download', target: 'faults', local: path.join(root, `burst-${i}`), remote: `/slow/${64 * 1024}/${MiB}` })
      expect(r.status).toBe(202)
      ids.push(r.json.id)
    }
    await proc.kill('SIGKILL')
    await start()
    for (const id of ids) {
      expect((await api.job(id, 60)).json).toMatchObject({ state: 'succeeded' })
    }
    const names = await fs.readdir(root)
    expect(names.filter((n) => n.startsWith('burst-'))).toHaveLength(200)
    expect(names.filter((n) => n.endsWith('.part'))).toEqual([])
  })

  // The start of a job found unfinished after a restart is journaled at once (a first start is
  // not: it rides along with the next synced write), so every attempt a crash cuts counts, however
  // soon the crash comes; with 2 attempts the job ends INTERRUPTED after at most 3 kills (the first
  // start may go unrecorded), instead of running at every start for ever.
  it('a job cut by a kill right after each start fails INTERRUPTED once its attempts are used', async () => {
    const dir = await tempDir('restart-loop-state-')
    const loopConfig = { ...config, stateDir: dir, listen: [`127.0.0.1:${await freePort()}`], retry: { attempts: 2, baseDelayMs: 50, maxDelayMs: 500 } }
    const loopApi = client(`http://${loopConfig.listen[0]}`)
    const begin = async () => { proc = await spawnSidecar(loopConfig, { dir }) }
    await begin()
    const out = path.join(root, 'loop.bin')
    const { json } = await loopApi.submit({ direction: 'download', target: 'faults', local: out, remote: `/slow/${6 * MiB}/${MiB}` })
    let kills = 0
    let job
    for (;;) {
      job = await waitFor(async () => {
        const j = (await loopApi.job(json.id)).json
        return ['running', 'failed', 'succeeded'].includes(j.state) && j
      }, { intervalMs: 5 })
      if (job.state !== 'running' || kills === 4) break
      await proc.kill('SIGKILL') // within milliseconds of the start
      kills++
      await begin()
    }
    expect({ state: job.state, code: job.error?.code }).toEqual({ state: 'failed', code: 'INTERRUPTED' })
    expect(kills).toBeLessThanOrEqual(3)
    expect(job.attempts).toBe(2)
    expect((await fs.readdir(root)).filter((n) => n.includes('loop.bin'))).toEqual([]) // no temp left
    loopApi.close()
  })
})

describe('graceful shutdown', () => {
  it('on SIGTERM stops within the grace period, leaves the running job queued, finishes it after restart', async () => {
    await start()
    const out = path.join(root, 'term.bin')
    const { json } = await api.submit({ direction: 'download', target: 'faults', local: out, remote: `/slow/${4 * MiB}/${MiB}` })
    await waitFor(async () => (await api.job(json.id)).json.bytes > 0)
    const t0 = Date.now()
    const { code } = await proc.kill('SIGTERM')
    expect(code).toBe(0)
    expect(Date.now() - t0).toBeLessThan(5000)
    const journal = await fs.readFile(path.join(stateDir, 'jobs', 'jobs.journal'), 'utf8')
    const last = journal.trim().split('\n').map((l) => JSON.parse(l)).filter((e) => e.job?.id === json.id).pop()
    expect(last.job.state).toBe('queued')
    await start()
    expect((await api.job(json.id, 60)).json.state).toBe('succeeded')
  })
})
