// What the http backend relies on when it skips asking for the stored size after a PUT
// (transfer.js, `confirmsWrittenSize`): Apache mod_dav answers 2xx only once every byte of a body of
// declared length is stored, and a body cut short leaves no file (mod_dav_fs writes a temp file and
// renames it at the end).
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

describe('Apache mod_dav PUT', () => {
  it('answers 2xx only with every declared byte stored, and stores nothing of a body cut short', async () => {
    expect(await put('cut.bin', 100000, 50000)).toMatch(/^HTTP\/1\.1 400 /)
    expect(fs.readdirSync(httpd.davDir)).toEqual([])
    expect(await put('whole.bin', 100000, 100000)).toMatch(/^HTTP\/1\.1 201 /)
    expect(fs.statSync(path.join(httpd.davDir, 'whole.bin')).size).toBe(100000)
  })
})
