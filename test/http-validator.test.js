// Which validator an http target's download keeps for a resume (If-Range): a strong ETag, else a
// Last-Modified only when it is a strong validator, i.e. at least a second older than the answer's
// Date (RFC 9110 8.8.2.2, 13.1.5). A file changed twice within one second keeps the same
// Last-Modified, and a server comparing the dates exactly would resume the new file with the old
// file's bytes before them; with no validator the download starts over instead.
import { describe, it, expect, afterAll } from 'vitest'
import http from 'node:http'
import { createHttpBackend } from '../src/backends/http.js'

const now = Date.parse('2026-11-22T12:00:00Z')
const httpDate = (ms) => new Date(ms).toUTCString()
let headers = {}
const srv = http.createServer((req, res) => {
  res.sendDate = false
  res.writeHead(200, { 'content-length': 3, ...headers })
  res.end('abc')
})
await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
const backend = createHttpBackend({ url: `http://127.0.0.1:${srv.address().port}/`, timeouts: { idleMs: 5000 } })
afterAll(async () => {
  await backend.close()
  await new Promise((resolve) => srv.close(resolve))
})

async function versionOf (h) {
  headers = h
  const { stream, version } = await backend.openRead('/f')
  stream.resume()
  return version
}

describe('http target: the validator kept for a resume', () => {
  it.each([
    ['a strong ETag', { etag: '"abc-1"', 'last-modified': httpDate(now - 100000), date: httpDate(now) }, '"abc-1"'],
    ['a Last-Modified 100 s before the Date', { 'last-modified': httpDate(now - 100000), date: httpDate(now) }, httpDate(now - 100000)],
    ['a weak ETag and an old Last-Modified', { etag: 'W/"abc"', 'last-modified': httpDate(now - 100000), date: httpDate(now) }, httpDate(now - 100000)],
    ['a Last-Modified in the second of the Date', { 'last-modified': httpDate(now), date: httpDate(now) }, null],
    ['a Last-Modified after the Date', { 'last-modified': httpDate(now + 5000), date: httpDate(now) }, null],
    ['a Last-Modified without a Date', { 'last-modified': httpDate(now - 100000) }, null],
    ['a weak ETag only', { etag: 'W/"abc"' }, null]
  ])('%s', async (what, h, expected) => {
    expect(await versionOf(h)).toBe(expected)
  })
})

// A server that honours Range but ignores If-Range answers a resume of a file replaced by a
// shorter one with 416: that is another file, read whole (a restart), not a failure for good
// (REMOTE_REJECTED, the temp file dropped).
describe('http target: a resume past the end of a replaced, shorter file', () => {
  it('reads the new file whole from a server that ignores If-Range', async () => {
    const body = Buffer.from('the new, shorter file')
    const shorter = http.createServer((req, res) => {
      const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '')
      if (range && Number(range[1]) >= body.length) return res.writeHead(416, { 'content-length': 0 }).end()
      if (range) {
        const start = Number(range[1])
        const end = range[2] === '' ? body.length - 1 : Math.min(Number(range[2]), body.length - 1)
        return res.writeHead(206, { 'content-range': `bytes ${start}-${end}/${body.length}`, 'content-length': end - start + 1, etag: '"new"' }).end(body.subarray(start, end + 1))
      }
      res.writeHead(200, { 'content-length': body.length, etag: '"new"' }).end(body)
    })
    await new Promise((resolve) => shorter.listen(0, '127.0.0.1', resolve))
    const b = createHttpBackend({ url: `http://127.0.0.1:${shorter.address().port}/`, timeouts: { idleMs: 5000 } })
    try {
      const src = await b.openRead('/f', { offset: 1000, ifVersion: '"old"' })
      const chunks = []
      for await (const chunk of src.stream) chunks.push(chunk)
      expect({ offset: src.offset, size: src.size, version: src.version }).toEqual({ offset: 0, size: body.length, version: '"new"' })
      expect(Buffer.concat(chunks).equals(body)).toBe(true)
    } finally {
      await b.close()
      await new Promise((resolve) => shorter.close(resolve))
    }
  })
})
