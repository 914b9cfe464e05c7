// The TCP proxy's delay (bench: a target 10 ms round trip away): bytes arrive complete and in
// order both ways, and its end follows them. No timing is asserted.
import { describe, it, expect, afterEach } from 'vitest'
import net from 'node:net'
import { randomBytes } from 'node:crypto'
import { startTcpProxy } from './harness/tcp-proxy.js'

const open = []
afterEach(async () => { for (const c of open.splice(0)) await c() })

describe('tcp-proxy delayMs', () => {
  it('forwards many writes in order both ways and then the close', async () => {
    const echo = net.createServer((s) => s.pipe(s))
    await new Promise((resolve) => echo.listen(0, '127.0.0.1', resolve))
    open.push(() => new Promise((resolve) => echo.close(resolve)))
    const proxy = await startTcpProxy({ target: echo.address().port, delayMs: 5 })
    open.push(() => proxy.stop())

    const sent = randomBytes(1 << 20)
    const socket = net.connect(new URL(proxy.url).port, '127.0.0.1')
    const got = []
    let n = 0
    const back = new Promise((resolve, reject) => {
      socket.on('data', (d) => { got.push(d); n += d.length; if (n >= sent.length) socket.end() })
      socket.once('close', resolve)
      socket.once('error', reject)
    })
    for (let i = 0; i < sent.length; i += 997) socket.write(sent.subarray(i, i + 997))
    await back
    expect(Buffer.compare(Buffer.concat(got), sent)).toBe(0)
  })
})
