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
