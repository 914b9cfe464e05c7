// timeouts.connectMs covers every connection the daemon makes, those that carry a file's bytes
// included (httpd PUT and GET, datanode PUT and GET), not only the pooled small requests: a server
// whose accept queue is full drops the SYN, and the connect hangs. Without connectMs it would be
// given up only after idleMs (30 s here, longer than these tests may run).
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import net from 'node:net'
import http from 'node:http'
import { spawn } from 'node:child_process'
import { createHttpBackend } from '../src/backends/http.js'
import { createWebHdfsBackend } from '../src/backends/webhdfs.js'
import { BufferPool } from '../src/datapath.js'
import { startFakeWebHdfs } from './harness/fake-webhdfs.js'

const timeouts = { connectMs: 300, idleMs: 30000 }
let port, child, fake
const clients = []

// A listener that never accepts (its event loop blocked once it listens), its queue then filled.
beforeAll(async () => {
  child = spawn(process.execPath, ['-e', 'const s = require("net").createServer().listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => { console.log(s.address().port); for (;;); })'], { stdio: ['ignore', 'pipe', 'inherit'] })
  port = Number(await new Promise((resolve) => child.stdout.once('data', (d) => resolve(String(d).trim()))))
  let hanging = false
  for (let i = 0; i < 16 && !hanging; i++) {
    hanging = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1')
      clients.push(c)
      const timer = setTimeout(() => resolve(true), 500)
      c.once('connect', () => { clearTimeout(timer); resolve(false) })
      c.once('error', () => { clearTimeout(timer); resolve(false) })
    })
  }
  expect(hanging, 'a connect to the full listener hangs').toBe(true)
  fake = await startFakeWebHdfs({ datanodePort: port })
  fake.files.set('/in.bin', Buffer.alloc(1000, 7))
})
afterAll(async () => {
  for (const c of clients) c.destroy()
  child?.kill('SIGKILL')
  await fake?.stop()
})

const noConnection = /no connection to 127\.0\.0\.1:\d+ within 300 ms/

describe('timeouts.connectMs on the connections that carry the bytes', () => {
  it('httpd: the PUT of an upload', async () => {
    const backend = createHttpBackend({ name: 'h', url: `http://127.0.0.1:${port}/up/`, timeouts, atomic: false })
    try {
      // A reused pool would skip the connect: the backend's pool is empty, so this one is new.
      const put = await backend.openWrite('/a.bin', { size: 3 })
      put.stream.end('abc')
      await expect(put.done).rejects.toMatchObject({ code: 'ETIMEDOUT', message: expect.stringMatching(noConnection) })
    } finally {
      await backend.close()
    }
  }, 10000)

  it('httpd: the GET of a download (read into pool buffers)', async () => {
    const backend = createHttpBackend({ name: 'h', url: `http://127.0.0.1:${port}/up/`, timeouts })
    const pool = BufferPool.forTransfer()
    try {
      await expect(backend.openRead('/a.bin', { pool })).rejects.toMatchObject({ code: 'ETIMEDOUT', message: expect.stringMatching(noConnection) })
    } finally {
      pool.close()
      await backend.close()
    }
  }, 10000)

  it.each([[true], [false]])('WebHDFS: the datanode GET of a download (pool buffers: %s)', async (pooled) => {
    const backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false, timeouts, retry: { attempts: 1 } })
    const pool = pooled ? BufferPool.forTransfer() : undefined
    try {
      const err = await backend.openRead('/in.bin', { pool }).catch((e) => e)
      expect(String(err?.message)).toMatch(noConnection)
    } finally {
      pool?.close()
      await backend.close()
    }
  }, 10000)

  it('WebHDFS: the datanode PUT of an upload', async () => {
    const backend = createWebHdfsBackend({ name: 'hdfs', namenodes: [fake.url], user: 'u', base: '/', checksum: false, timeouts, retry: { attempts: 1 } })
    try {
      const put = await backend.openWrite('/out.bin', { size: 3 })
      put.stream.on('error', () => {})
      put.stream.end('abc')
      const err = await put.done.catch((e) => e)
      expect(String(err?.message)).toMatch(noConnection)
    } finally {
      await backend.close()
    }
  }, 10000)
})

describe('timeouts.connectMs times the connect only', () => {
  it('not the wait for a free pooled socket while all are busy', async () => {
    // Each answer takes 800 ms; the target's pool has 2 sockets (2 × concurrency 1).
    const slow = http.createServer((req, res) => setTimeout(() => res.writeHead(404).end(), 800))
    await new Promise((resolve) => slow.listen(0, '127.0.0.1', resolve))
    const backend = createHttpBackend({ name: 'h', url: `http://127.0.0.1:${slow.address().port}/`, timeouts, concurrency: 1 })
    try {
      // The third waits ~800 ms for a socket, longer than connectMs (300), and is still answered.
      const answers = await Promise.allSettled([backend.stat('/a'), backend.stat('/b'), backend.stat('/c')])
      expect(answers.map((a) => a.status === 'fulfilled' ? a.value : a.reason.message)).toEqual([null, null, null])
    } finally {
      await backend.close()
      slow.closeAllConnections()
      await new Promise((resolve) => slow.close(resolve))
    }
  }, 10000)
})
