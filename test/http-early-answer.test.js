// A server that answers a PUT with 2xx before it has read the body, then stops reading and keeps
// the connection open. Node stops a request's timeout once its answer has ended, so without a
// timer of its own the upload waited for a `drain` that never came: the job stayed `running` for
// ever, holding its slot, file and buffers. timeouts.idleMs ends it with TIMEOUT, as any stall.
import { describe, it, expect, afterAll } from 'vitest'
import net from 'node:net'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'

const sockets = new Set()
const server = net.createServer((socket) => {
  sockets.add(socket)
  socket.on('close', () => sockets.delete(socket))
  socket.on('error', () => {})
  let head = ''
  socket.on('data', (d) => {
    head += d.toString('latin1')
    if (!head.includes('\r\n\r\n')) return
    const method = head.split(' ')[0]
    head = ''
    if (method === 'PUT') socket.pause() // the body is never read
    socket.write(`HTTP/1.1 ${method === 'PUT' || method === 'MKCOL' ? '201 Created' : '404 Not Found'}\r\nContent-Length: 0\r\n\r\n`)
  })
})
let sc
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
  for (const s of sockets) s.destroy()
  server.close()
})

describe('an upload answered 201 before its body was read', () => {
  it.each([false, true])('fails TIMEOUT after timeouts.idleMs, not running for ever (atomic: %s)', async (atomic) => {
    if (!server.listening) await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const root = await tempDir('early-root-')
    await sc?.stop({ graceMs: 0 })
    sc = await startTestSidecar({
      roots: [root],
      targets: { t: { type: 'http', url: `http://127.0.0.1:${server.address().port}/up/`, atomic, timeouts: { idleMs: 500, connectMs: 2000 }, retry: { attempts: 1 } } }
    })
    const local = path.join(root, 'a.bin')
    await fs.writeFile(local, Buffer.alloc(32 << 20, 1)) // more than the socket buffers take
    const { json } = await sc.api.submit({ direction: 'upload', target: 't', local, remote: '/d/a.bin', overwrite: true })
    const job = await waitFor(async () => {
      const j = (await sc.api.job(json.id)).json
      return j.state !== 'queued' && j.state !== 'running' && j
    }, { timeoutMs: 10000 })
    expect(job).toMatchObject({ state: 'failed', error: { code: 'TIMEOUT' } })
    expect(job.bytes).toBeLessThan(32 << 20)
  }, 20000)
})
