// What the http backend relies on when it skips asking for the stored size after a PUT
// (transfer.js, `confirmsWrittenSize`): Apache mod_dav answers 2xx only once every byte of a body of
// declared length is stored, and a body cut short leaves no file (mod_dav_fs writes a temp file and
// renames it at the end). And what a target with `atomicPut` relies on when it PUTs straight to the
// final name: until the last byte arrives, readers of the name see what was there before (nothing,
// or the old file), and `If-None-Match: *` refuses a name that exists.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import net from 'node:net'
import fs from 'node:fs'
import path from 'node:path'
import { startHttpd } from './harness/httpd.js'

let httpd
beforeAll(async () => { httpd = await startHttpd() })
afterAll(() => httpd?.stop())

// Sends a PUT declaring `declared` bytes, writes `sent`, then closes its side; the status line.
function put (name, declared, sent) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(httpd.port, '127.0.0.1', () => {
      socket.write(`PUT /upload/${name} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${declared}\r\n\r\n`)
      socket.write(Buffer.alloc(sent, 120))
      setTimeout(() => socket.end(), 200)
    })
    let answer = ''
    socket.on('data', (d) => { answer += d.toString('latin1') })
    socket.on('close', () => resolve(answer.split('\r\n')[0]))
    socket.on('error', reject)
  })
}

// A PUT declaring `declared` bytes that sends `first` of them, then waits for `resume()` to send the
// rest; `answer` resolves to the status line.
function heldPut (name, declared, first, headers = '') {
  let resume
  const answer = new Promise((resolve, reject) => {
    const socket = net.connect(httpd.port, '127.0.0.1', () => {
      socket.write(`PUT /upload/${name} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${declared}\r\nConnection: close\r\n${headers}\r\n`)
      socket.write(Buffer.alloc(first, 121))
    })
    resume = () => socket.write(Buffer.alloc(declared - first, 121))
    let text = ''
    socket.on('data', (d) => { text += d.toString('latin1') })
    socket.on('close', () => resolve(text.split('\r\n')[0]))
    socket.on('error', reject)
  })
  return { answer, resume: () => resume() }
}

const get = async (name) => {
  const res = await fetch(`${httpd.uploadUrl}${name}`)
  return { status: res.status, body: await res.text() }
}

describe('Apache mod_dav PUT', () => {
  it('shows readers nothing of a PUT in progress: the name holds the old file (or none) until the last byte', async () => {
    const fresh = heldPut('fresh.bin', 200000, 100000)
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect((await get('fresh.bin')).status).toBe(404)
    fresh.resume()
    expect(await fresh.answer).toMatch(/^HTTP\/1\.1 201 /)
    expect(await get('fresh.bin')).toEqual({ status: 200, body: 'y'.repeat(200000) })

    fs.writeFileSync(path.join(httpd.davDir, 'old.txt'), 'old content')
    await httpd.chownToServer(path.join(httpd.davDir, 'old.txt'))
    const replacing = heldPut('old.txt', 200000, 150000)
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(await get('old.txt')).toEqual({ status: 200, body: 'old content' })
    replacing.resume()
    expect(await replacing.answer).toMatch(/^HTTP\/1\.1 204 /)
    expect((await get('old.txt')).body).toBe('y'.repeat(200000))
  })

  it('refuses a PUT with If-None-Match: * to a name that exists (412, file unchanged), takes it to a free one', async () => {
    fs.writeFileSync(path.join(httpd.davDir, 'kept.txt'), 'kept')
    const taken = heldPut('kept.txt', 1000, 1000, 'If-None-Match: *\r\n')
    expect(await taken.answer).toMatch(/^HTTP\/1\.1 412 /)
    expect(fs.readFileSync(path.join(httpd.davDir, 'kept.txt'), 'utf8')).toBe('kept')
    const free = heldPut('free.txt', 1000, 1000, 'If-None-Match: *\r\n')
    expect(await free.answer).toMatch(/^HTTP\/1\.1 201 /)
    expect(fs.statSync(path.join(httpd.davDir, 'free.txt')).size).toBe(1000)
  })

  it('answers 2xx only with every declared byte stored, and stores nothing of a body cut short', async () => {
    expect(await put('cut.bin', 100000, 50000)).toMatch(/^HTTP\/1\.1 400 /)
    expect(fs.readdirSync(httpd.davDir).filter((n) => n.startsWith('cut') || n.startsWith('.'))).toEqual([])
    expect(await put('whole.bin', 100000, 100000)).toMatch(/^HTTP\/1\.1 201 /)
    expect(fs.statSync(path.join(httpd.davDir, 'whole.bin')).size).toBe(100000)
  })
})
