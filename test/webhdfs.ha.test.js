// HA namenodes against a real MiniDFSCluster with two namenodes (index 0 active): a standby is
// skipped and the active one remembered; a standby that accepts CREATE step one (it answers 307
// without asking its namesystem) is left once the datanode relays its StandbyException; and a
// stream of uploads and downloads through the daemon survives a graceful failover and a crash of
// the active namenode, every job succeeding. Proxies sit in front of every node (tcp-proxy.js) to
// count who is asked and to play the crash.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { createWebHdfsBackend } from '../src/backends/webhdfs.js'
import { upload } from '../src/transfer.js'
import { startHdfs } from './harness/hdfs.js'
import { startHdfsProxies } from './harness/tcp-proxy.js'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'

const MiB = 1 << 20
let hdfs, proxies, root

beforeAll(async () => {
  hdfs = await startHdfs({ datanodes: 2, ha: true })
  await hdfs.command('mkdir /data www-data 755')
  proxies = await startHdfsProxies(hdfs)
  root = await tempDir('ha-root-')
})
afterAll(async () => {
  await proxies?.stop()
  await hdfs?.stop()
})

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const backendOn = (namenodes) => createWebHdfsBackend({ name: 'hdfs', namenodes, user: 'www-data', base: '/data', checksum: false })

describe('namenode choice (namenode 0 active, 1 standby)', () => {
  it('skips a standby listed first and remembers the active one', async () => {
    const standby = proxies.namenodes[1]
    const backend = backendOn([standby.url, proxies.urls[0]])
    const before = standby.requests.length
    expect(await backend.stat('/none-1')).toBeNull()
    expect(standby.requests.length).toBe(before + 1)
    expect(await backend.stat('/none-2')).toBeNull()
    expect(await backend.stat('/none-3')).toBeNull()
    expect(standby.requests.length).toBe(before + 1)
  })

  it('leaves a standby that accepted CREATE once the datanode relays its StandbyException, and does not ask it again', async () => {
    const standby = proxies.namenodes[1]
    const backend = backendOn([standby.url, proxies.urls[0]])
    const local = path.join(root, 'sb.bin')
    await makeFile(local, 3 * MiB, 2)
    const job = { id: 'standby-create-1', direction: 'upload', target: 'hdfs', local, remote: '/sb/x.bin', overwrite: true, attempts: 1 }
    const err = await upload(job, { backend, roots: [root] }).catch((e) => e)
    expect(standby.requests.map((r) => r.line).some((l) => l.includes('op=CREATE'))).toBe(true)
    expect(err).toMatchObject({ code: 'REMOTE_UNAVAILABLE', retryable: true, details: { status: 403, exception: 'StandbyException' } })
    expect(err.message).not.toMatch(/\n|\tat /) // the datanode's Java stack trace stays out
    const asked = standby.requests.length
    const done = await upload({ ...job, attempts: 2 }, { backend, roots: [root] })
    expect(done.bytes).toBe(3 * MiB)
    expect(standby.requests.length).toBe(asked)
  })

  it('fails over between namenodes that refuse connections, with backoff, until one is active', async () => {
    const refusing = proxies.namenodes[0]
    const backend = backendOn([refusing.url, proxies.urls[1]]) // 1 is standby: nobody can answer yet
    await refusing.refuse()
    const t0 = Date.now()
    setTimeout(() => refusing.accept(), 700)
    expect(await backend.stat('/none-4')).toBeNull() // answered by namenode 0 once it is back
    expect(Date.now() - t0).toBeGreaterThanOrEqual(600)
  })
})

describe('a stream of jobs across failovers', () => {
  let sc
  afterAll(async () => { await sc?.stop({ graceMs: 0 }) })

  it('every upload and download succeeds across a graceful failover and a crash of the active namenode', async () => {
    sc = await startTestSidecar({
      roots: [root],
      targets: {
        hdfs: {
          type: 'webhdfs',
          namenodes: proxies.urls,
          user: 'www-data',
          base: '/data',
          concurrency: 4,
          retry: { attempts: 8, baseDelayMs: 200, maxDelayMs: 2000 },
          timeouts: { connectMs: 2000, idleMs: 10000 }
        }
      }
    })
    const src = path.join(root, 'stream.bin')
    const sha = await makeFile(src, 4 * MiB, 3)
    const t0 = Date.now()
    const jobs = []
    const running = { stop: false }
    const lane = async (k) => {
      for (let i = 0; !running.stop; i++) {
        const remote = `/stream/${k}/${i}.bin`
        for (const spec of [
          { direction: 'upload', local: src, remote, overwrite: i % 2 === 0 },
          { direction: 'download', local: path.join(root, `stream-${k}-${i}`), remote }
        ]) {
          const start = Date.now() - t0
          const job = await sc.api.run({ target: 'hdfs', ...spec })
          jobs.push({ ...spec, start, end: Date.now() - t0, state: job.state, attempts: job.attempts, sha256: job.sha256, error: job.error })
        }
      }
    }
    const lanes = [0, 1, 2].map(lane)
    const events = []
    const at = async (what, fn) => {
      events.push({ what, at: Date.now() - t0 })
      await fn()
    }
    await sleep(1500)
    await at('graceful failover 0 → 1', async () => {
      await hdfs.command('transition-to-standby 0')
      await hdfs.command('transition-to-active 1')
    })
    await sleep(3000)
    // A crash of the active namenode as clients see it: its port refuses, open connections are
    // reset; the survivor is made active (1 is made standby first, so the cluster never has two).
    await at('crash of 1, 0 made active', async () => {
      await proxies.namenodes[1].refuse()
      await hdfs.command('transition-to-standby 1')
      await hdfs.command('transition-to-active 0')
    })
    await sleep(3000)
    await proxies.namenodes[1].accept()
    await sleep(1500)
    running.stop = true
    await Promise.all(lanes)

    expect(jobs.length).toBeGreaterThan(12)
    expect(jobs.filter((j) => j.state !== 'succeeded')).toEqual([])
    expect(jobs.every((j) => j.sha256 === sha)).toBe(true)
    // How long jobs stalled: the longest job around each event, against the median job.
    const median = [...jobs].map((j) => j.end - j.start).sort((a, b) => a - b)[jobs.length >> 1]
    const stalls = events.map((e) => ({
      ...e,
      longestJobMs: Math.max(...jobs.filter((j) => j.start <= e.at + 1000 && j.end >= e.at).map((j) => j.end - j.start)),
      retried: jobs.filter((j) => j.start <= e.at + 1000 && j.end >= e.at && j.attempts > 1).length
    }))
    console.log(JSON.stringify({ jobs: jobs.length, medianJobMs: median, retried: jobs.filter((j) => j.attempts > 1).length, stalls }))
    for (const s of stalls) expect(s.longestJobMs).toBeLessThan(20000)
    await fs.rm(src)
  }, 120000)
})
