// The job journal (store.js): what reaches the disk, and when. A durable record is on disk before
// put() resolves; a non-durable one (a transition a crash may lose) waits to ride along with the
// next durable write, or DEFER_MS, and a newer record of the same job replaces it.
import { describe, it, expect, afterEach } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { openJobStore } from '../src/store.js'
import { tempDir } from './helpers/sidecar.js'

const lines = async (dir) => (await fs.readFile(path.join(dir, 'jobs.journal'), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l))
const states = async (dir) => (await lines(dir)).map((l) => l.op === 'put' ? `${l.job.id}:${l.job.state}` : `del:${l.id}`)

let store
afterEach(async () => {
  await store?.close()
  store = null
})

describe('job store', () => {
  it('writes a durable record before put() resolves', async () => {
    const dir = await tempDir('store-')
    store = await openJobStore({ dir })
    await store.put({ id: 'a', state: 'queued' })
    expect(await states(dir)).toEqual(['a:queued'])
  })

  it('holds a non-durable record back until the next durable write, which supersedes it for the same job', async () => {
    const dir = await tempDir('store-')
    store = await openJobStore({ dir })
    await store.put({ id: 'a', state: 'queued' })
    await store.put({ id: 'b', state: 'queued' })
    await store.put({ id: 'a', state: 'running' }, { durable: false })
    await store.put({ id: 'b', state: 'running' }, { durable: false })
    expect(await states(dir)).toEqual(['a:queued', 'b:queued'])
    // a's "running" is replaced by its newer record; b's rides along with it.
    await store.put({ id: 'a', state: 'succeeded' })
    expect(await states(dir)).toEqual(['a:queued', 'b:queued', 'b:running', 'a:succeeded'])
  })

  it('writes a held-back record within a moment when nothing else is written', async () => {
    const dir = await tempDir('store-')
    store = await openJobStore({ dir })
    await store.put({ id: 'a', state: 'queued' })
    await store.put({ id: 'a', state: 'running' }, { durable: false })
    store.remove('gone')
    expect(await states(dir)).toEqual(['a:queued'])
    for (let i = 0; i < 50 && (await states(dir)).length < 3; i++) await sleep(20)
    expect(await states(dir)).toEqual(['a:queued', 'a:running', 'del:gone'])
  })

  it('writes held-back records on close, and replays last record per job', async () => {
    const dir = await tempDir('store-')
    store = await openJobStore({ dir })
    await store.put({ id: 'a', state: 'queued' })
    await store.put({ id: 'b', state: 'queued' })
    await store.put({ id: 'a', state: 'running' }, { durable: false })
    store.remove('b')
    await store.close()
    expect(await states(dir)).toEqual(['a:queued', 'b:queued', 'a:running', 'del:b'])
    store = await openJobStore({ dir })
    expect(store.loaded()).toEqual([{ id: 'a', state: 'running' }])
    expect(await states(dir)).toEqual(['a:running']) // compacted at open
  })
})
