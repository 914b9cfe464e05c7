#!/usr/bin/env node
// Smoke test for test/harness/httpd.js: `node test/harness/httpd.smoke.mjs`
// Starts a private Apache httpd with mod_dav and exercises the WebDAV
// behaviours the transfer-sidecar relies on. Exits non-zero on any failure.

import http from 'node:http'
import crypto from 'node:crypto'
import { readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { startHttpd } from './httpd.js'

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
let failures = 0
let checks = 0

function log (ok, name, detail) {
  checks++
  if (!ok) failures++
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? ` -- ${detail}` : ''}`)
}

function expectStatus (name, res, want) {
  const wants = Array.isArray(want) ? want : [want]
  log(wants.includes(res.status), name, `status ${res.status} (want ${wants.join('|')})`)
  return wants.includes(res.status)
}

/**
 * Minimal HTTP client: body may be a Buffer, string, Readable or undefined.
 * A Readable body is sent chunked (no Content-Length) unless headers say otherwise.
 * Returns { status, headers, body: Buffer } or, with sink, pipes the response into sink(res).
 */
function request (method, url, { headers = {}, body, sink } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url)
    const h = { ...headers }
    if (Buffer.isBuffer(body) || typeof body === 'string') h['Content-Length'] = Buffer.byteLength(body)
    const req = http.request(
      { method, host: u.hostname, port: u.port, path: u.pathname + u.search, headers: h, agent },
      (res) => {
        if (sink) {
          sink(res).then((v) => resolve({ status: res.statusCode, headers: res.headers, ...v }), reject)
          return
        }
        const parts = []
        res.on('data', (d) => parts.push(d))
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts) }))
        res.on('error', reject)
      }
    )
    req.on('error', reject)
    if (body instanceof Readable) {
      body.on('error', (e) => req.destroy(e))
      body.pipe(req)
    } else {
      req.end(body)
    }
  })
}

/** Deterministic pseudo-random stream of `total` bytes, hashing as it goes. */
function patternStream (total, seed, hash) {
  const block = crypto.createHash('sha512').update(String(seed)).digest()
  const chunk = Buffer.alloc(1024 * 1024)
  for (let i = 0; i < chunk.length; i += block.length) block.copy(chunk, i)
  let sent = 0
  let n = 0
  return new Readable({
    read () {
      if (sent >= total) return this.push(null)
      const len = Math.min(chunk.length, total - sent)
      // Vary each chunk so misplaced chunks would be detected.
      const c = Buffer.from(chunk.subarray(0, len))
      c.writeUInt32BE(n++ >>> 0, 0)
      sent += len
      hash?.update(c)
      this.push(c)
    },
  })
}

async function main () {
  const t0 = Date.now()
  const srv = await startHttpd()
  console.log(`httpd up at ${srv.url} in ${Date.now() - t0} ms (probe ${srv.startMs} ms), davDir=${srv.davDir}`)
  const U = srv.uploadUrl
  try {
    // MKCOL
    expectStatus('MKCOL /upload/a/', await request('MKCOL', `${U}a/`), 201)

    // PUT 1 MiB -> 201
    const oneMiB = crypto.randomBytes(1024 * 1024)
    expectStatus('PUT /upload/a/x.bin (1 MiB, new)', await request('PUT', `${U}a/x.bin`, { body: oneMiB }), 201)

    // GET back and compare
    {
      const r = await request('GET', `${U}a/x.bin`)
      expectStatus('GET /upload/a/x.bin', r, 200)
      log(r.body.equals(oneMiB), 'GET /upload/a/x.bin bytes match', `${r.body.length} bytes`)
      const onDisk = await readFile(path.join(srv.davDir, 'a', 'x.bin'))
      log(onDisk.equals(oneMiB), 'file on disk readable by test process and matches')
    }

    // PUT again -> 204
    const oneMiB2 = crypto.randomBytes(1024 * 1024)
    expectStatus('PUT /upload/a/x.bin again (overwrite)', await request('PUT', `${U}a/x.bin`, { body: oneMiB2 }), 204)

    // MOVE x.bin -> y.bin, Overwrite: F, destination absent -> 201
    expectStatus(
      'MOVE a/x.bin -> a/y.bin (Overwrite: F, dest absent)',
      await request('MOVE', `${U}a/x.bin`, { headers: { Destination: `${U}a/y.bin`, Overwrite: 'F' } }),
      201
    )
    {
      const r = await request('HEAD', `${U}a/x.bin`)
      expectStatus('HEAD a/x.bin after MOVE', r, 404)
    }

    // MOVE another file onto existing y.bin
    const other = crypto.randomBytes(4096)
    expectStatus('PUT /upload/a/w.bin', await request('PUT', `${U}a/w.bin`, { body: other }), 201)
    expectStatus(
      'MOVE a/w.bin -> a/y.bin (Overwrite: F, dest exists)',
      await request('MOVE', `${U}a/w.bin`, { headers: { Destination: `${U}a/y.bin`, Overwrite: 'F' } }),
      412
    )
    {
      const r = await request('GET', `${U}a/y.bin`)
      log(r.body.equals(oneMiB2), 'y.bin untouched after refused MOVE')
    }
    expectStatus(
      'MOVE a/w.bin -> a/y.bin (Overwrite: T, dest exists)',
      await request('MOVE', `${U}a/w.bin`, { headers: { Destination: `${U}a/y.bin`, Overwrite: 'T' } }),
      204
    )
    {
      const r = await request('GET', `${U}a/y.bin`)
      log(r.body.equals(other), 'y.bin replaced after MOVE Overwrite: T')
    }

    // PUT into a missing collection -> 409
    expectStatus('PUT /upload/missing/dir/z (parent missing)', await request('PUT', `${U}missing/dir/z`, { body: 'z' }), 409)

    // PUT to /forbidden/ -> 403
    expectStatus('PUT /forbidden/x', await request('PUT', `${srv.forbiddenUrl}x`, { body: 'x' }), 403)

    // /readonly/: GET works, PUT refused
    {
      const r = await request('GET', `${srv.readonlyUrl}a/y.bin`)
      expectStatus('GET /readonly/a/y.bin', r, 200)
      log(r.body.equals(other), 'GET /readonly/a/y.bin bytes match')
      const p = await request('PUT', `${srv.readonlyUrl}a/y.bin`, { body: 'nope' })
      expectStatus('PUT /readonly/a/y.bin refused', p, 403)
      const d = await request('DELETE', `${srv.readonlyUrl}a/y.bin`)
      expectStatus('DELETE /readonly/a/y.bin refused', d, 403)
      const after = await request('GET', `${U}a/y.bin`)
      log(after.body.equals(other), 'y.bin unchanged after refused readonly writes')
    }

    // Range GET -> 206
    {
      const r = await request('GET', `${U}a/y.bin`, { headers: { Range: 'bytes=10-19' } })
      expectStatus('GET a/y.bin Range: bytes=10-19', r, 206)
      log(r.body.equals(other.subarray(10, 20)), 'Range body matches', `Content-Range: ${r.headers['content-range']}`)
    }

    // Chunked PUT (no Content-Length)
    {
      const hash = crypto.createHash('sha256')
      const size = 3 * 1024 * 1024 + 123
      const r = await request('PUT', `${U}a/chunked.bin`, { body: patternStream(size, 'chunked', hash) })
      expectStatus('PUT a/chunked.bin (Transfer-Encoding: chunked)', r, 201)
      const want = hash.digest('hex')
      const g = await request('GET', `${U}a/chunked.bin`)
      const got = crypto.createHash('sha256').update(g.body).digest('hex')
      log(g.body.length === size && got === want, 'chunked PUT content matches', `${g.body.length} bytes`)
    }

    // Fetch API (undici) works with DAV methods too.
    {
      const r = await fetch(`${U}a/`, { method: 'PROPFIND', headers: { Depth: '1' } })
      await r.arrayBuffer()
      log(r.status === 207, 'fetch PROPFIND /upload/a/ Depth: 1', `status ${r.status}`)
      const m = await fetch(`${U}a/sub/`, { method: 'MKCOL' })
      log(m.status === 201, 'fetch MKCOL /upload/a/sub/', `status ${m.status}`)
      const d = await fetch(`${U}a/sub/`, { method: 'DELETE' })
      log(d.status === 204, 'fetch DELETE /upload/a/sub/', `status ${d.status}`)
      const l = await fetch(`${U}a/y.bin`, { method: 'LOCK' })
      log(l.status === 403, 'LOCK (not in allowed method list) refused', `status ${l.status}`)
    }

    // 200 MiB streamed PUT and GET
    {
      const size = 200 * 1024 * 1024
      const hash = crypto.createHash('sha256')
      const tPut = Date.now()
      const r = await request('PUT', `${U}a/big.bin`, {
        headers: { 'Content-Length': String(size) },
        body: patternStream(size, 'big', hash),
      })
      expectStatus('PUT a/big.bin (200 MiB streamed, Content-Length)', r, 201)
      const want = hash.digest('hex')
      console.log(`     PUT 200 MiB took ${Date.now() - tPut} ms`)
      const st = await stat(path.join(srv.davDir, 'a', 'big.bin'))
      log(st.size === size, 'big.bin size on disk', `${st.size}`)

      const tGet = Date.now()
      const g = await request('GET', `${U}a/big.bin`, {
        sink: (res) =>
          new Promise((resolve, reject) => {
            const h = crypto.createHash('sha256')
            let n = 0
            res.on('data', (d) => { n += d.length; h.update(d) })
            res.on('end', () => resolve({ length: n, sha: h.digest('hex') }))
            res.on('error', reject)
          }),
      })
      expectStatus('GET a/big.bin (200 MiB streamed)', g, 200)
      console.log(`     GET 200 MiB took ${Date.now() - tGet} ms`)
      log(g.length === size && g.sha === want, 'big.bin sha256 matches', `${g.length} bytes`)
      expectStatus('DELETE a/big.bin', await request('DELETE', `${U}a/big.bin`), 204)
    }

    // A second instance can run concurrently.
    {
      const s2 = await startHttpd()
      const r = await request('PUT', `${s2.uploadUrl}only-here`, { body: 'two' })
      const miss = await request('GET', `${U}only-here`)
      log(s2.url !== srv.url && r.status === 201 && miss.status === 404, 'second concurrent instance isolated', `${s2.url}`)
      await s2.stop()
    }
  } catch (err) {
    failures++
    console.log(`FAIL unexpected error: ${err.stack || err}`)
    console.log(await srv.errorLogTail())
  } finally {
    agent.destroy()
    const tStop = Date.now()
    const root = srv.root
    await srv.stop()
    let gone = false
    try { await stat(root) } catch { gone = true }
    log(gone, 'stop() terminated httpd and removed temp root', `${Date.now() - tStop} ms`)
  }

  console.log(`${checks - failures}/${checks} checks passed`)
  if (failures) process.exitCode = 1
}

main().catch((err) => {
  console.error(err.stack || String(err))
  process.exitCode = 1
})
