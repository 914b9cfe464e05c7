// The line protocol (src/http/lines.js): job hand-offs as JSON lines on the daemon's own sockets,
// beside HTTP. Same checks, errors and journal as POST /v1/jobs; a daemon with a `file` target.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import crypto from 'node:crypto'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { connectLines } from './helpers/lines.js'

const TIMEOUTS = { idleMs: 600, lineMs: 400 }
let sc, root, outside, store, tcp

const connect = connectLines

const upload = (name, extra = {}) => ({ direction: 'upload', target: 'local', local: path.join(root, 'up.txt'), remote: `/lines/${name}`, ...extra })

beforeAll(async () => {
  root = await tempDir('lines-root-')
  outside = await tempDir('lines-outside-')
  store = await tempDir('lines-store-')
  await fs.writeFile(path.join(root, 'up.txt'), 'a small upload\n')
  await fs.writeFile(path.join(outside, 'secret.txt'), 'not yours')
  await fs.symlink(path.join(outside, 'secret.txt'), path.join(root, 'escape.txt'))
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: store } }, lineTimeouts: TIMEOUTS })
  tcp = { host: '127.0.0.1', port: new URL(sc.url).port }
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

describe('line protocol', () => {
  it.each([['unix socket', () => sc.socket], ['loopback TCP', () => tcp]])('takes a job over the %s, journals it, and the job runs', async (name, address) => {
    const c = connect(address())
    const answer = await c.ask(upload(`${name}.txt`))
    expect(answer).toEqual({ status: 202, id: expect.stringMatching(/^[A-Za-z0-9_-]{22}$/), state: 'queued' })
    const job = (await sc.api.job(answer.id, 30)).json
    expect(job).toMatchObject({ state: 'succeeded', direction: 'upload', remote: `/lines/${name}.txt` })
    expect(await fs.readFile(path.join(store, 'lines', `${name}.txt`), 'utf8')).toBe('a small upload\n')
    const journal = await fs.readFile(path.join(sc.stateDir, 'jobs', 'jobs.journal'), 'utf8')
    expect(journal).toContain(answer.id)
    c.socket.end()
  })

  it('answers pipelined lines in order on one connection, errors included, and stays usable', async () => {
    const c = connect(sc.socket)
    const id = `pipelined-${crypto.randomBytes(4).toString('hex')}`
    c.write([
      JSON.stringify(upload('p1.txt', { id })),
      JSON.stringify(upload('p1.txt', { id })), // the same job again: 200, not a second job
      JSON.stringify(upload('p1-other.txt', { id })), // the same id, another job
      '{"direction": "upload",',
      '[1, 2]',
      JSON.stringify(upload('p2.txt'))
    ].join('\n') + '\n')
    const answers = []
    for (let i = 0; i < 6; i++) answers.push(await c.next())
    expect(answers.map((a) => a.status)).toEqual([202, 200, 409, 400, 400, 202])
    expect(answers[0].id).toBe(id)
    expect(answers[1]).toMatchObject({ id, state: expect.any(String) })
    expect(answers[2].error.code).toBe('JOB_CONFLICT')
    expect(answers[3].error).toEqual({ code: 'INVALID_JSON', message: 'the line is not valid JSON (line 1, column 24)' })
    expect(answers[4].error.code).toBe('INVALID_REQUEST')
    expect(await c.ask(upload('p3.txt'))).toMatchObject({ status: 202 })
    c.socket.end()
  })

  // Every refusal is the one POST /v1/jobs gives the same body: status, code and message.
  it.each([
    ['an unknown target', () => upload('x', { target: 'nope' })],
    ['a path outside the roots', () => upload('x', { local: path.join(outside, 'secret.txt') })],
    ['a symlink out of the roots', () => upload('x', { local: path.join(root, 'escape.txt') })],
    ['a relative path', () => upload('x', { local: 'up.txt' })],
    ['a missing file', () => upload('x', { local: path.join(root, 'missing.txt') })],
    ['a directory', () => upload('x', { local: root })],
    ['a remote with ..', () => upload('../../etc/passwd')],
    ['an unknown field', () => upload('x', { url: 'http://169.254.169.254/' })],
    ['a download over an existing directory', () => ({ direction: 'download', target: 'local', local: root, remote: '/x' })],
    ['a callback not allowed', () => upload('x', { callback: 'http://127.0.0.1:1/hook' })]
  ])('refuses %s as POST /v1/jobs does', async (what, body) => {
    const c = connect(sc.socket)
    const line = await c.ask(body())
    const http = await sc.api.submit(body())
    expect(http.status).toBeGreaterThanOrEqual(400)
    expect(line).toEqual({ status: http.status, error: http.json.error })
    c.socket.end()
  })

  // So that a client on a kept connection can tell its own refusal from one another request of its
  // process left unread there (php-client: an answer not naming the job is not taken on a reused one).
  it('names the job in a refusal of a line that has an id, and only then', async () => {
    const c = connect(sc.socket)
    const id = `refused-${crypto.randomBytes(4).toString('hex')}`
    expect(await c.ask(upload('r.txt', { id, target: 'nope' }))).toMatchObject({ status: 400, id, error: { code: 'UNKNOWN_TARGET' } })
    const noId = await c.ask(upload('r.txt', { target: 'nope' }))
    expect(noId).toMatchObject({ status: 400, error: { code: 'UNKNOWN_TARGET' } })
    expect(noId).not.toHaveProperty('id')
    expect(await c.ask(upload('r.txt', { id: 'bad id!', target: 'nope' }))).not.toHaveProperty('id') // not a job id: not echoed
    c.socket.end()
  })

  it('takes a line split across many writes, and several lines in one', async () => {
    const c = connect(tcp)
    c.socket.setNoDelay(true)
    const text = JSON.stringify(upload('split.txt')) + '\n'
    for (const ch of text) {
      c.write(ch)
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(await c.next()).toMatchObject({ status: 202 })
    c.socket.end()
  })

  it('answers 413 to a line over 64 KiB after the lines before it, then closes', async () => {
    const c = connect(sc.socket)
    c.write(JSON.stringify(upload('before-big.txt')) + '\n{"remote":"' + 'x'.repeat(70000) + '"}\n' + JSON.stringify(upload('after-big.txt')) + '\n')
    expect(await c.next()).toMatchObject({ status: 202 })
    expect(await c.next()).toEqual({ status: 413, error: { code: 'PAYLOAD_TOO_LARGE', message: 'the line exceeds 65536 bytes' } })
    const { lines, buffered } = await c.rest()
    expect([lines, buffered]).toEqual([[], ''])
    expect((await sc.api.call('GET', '/v1/jobs?limit=500')).json.jobs.some((j) => j.remote === '/lines/after-big.txt')).toBe(false)
  })

  it('refuses invalid UTF-8 as INVALID_JSON, not as a name of U+FFFD', async () => {
    const c = connect(sc.socket)
    const bytes = Buffer.concat([Buffer.from('{"direction":"upload","target":"local","local":"' + root + '/up.txt","remote":"/a'), Buffer.from([0xff, 0xfe]), Buffer.from('"}\n')])
    c.write(bytes)
    expect(await c.next()).toEqual({ status: 400, error: { code: 'INVALID_JSON', message: 'the line is not valid UTF-8' } })
    c.socket.end()
  })

  it('answers a line left unfinished for lineMs with 400 and closes; an idle connection is closed after idleMs', async () => {
    const slow = connect(sc.socket)
    slow.write('{"direction":')
    expect(await slow.next()).toEqual({ status: 400, error: { code: 'INVALID_REQUEST', message: 'the line was not received in time' } })
    await slow.closed
    const idle = connect(sc.socket)
    expect(await idle.ask(upload('idle.txt'))).toMatchObject({ status: 202 })
    const t0 = Date.now()
    await idle.closed
    expect(Date.now() - t0).toBeGreaterThanOrEqual(TIMEOUTS.idleMs - 50)
  })

  it('answers what a half-closed connection sent, then closes', async () => {
    const c = connect(sc.socket)
    c.write(JSON.stringify(upload('half-1.txt')) + '\n' + JSON.stringify(upload('half-2.txt')) + '\n{"cut')
    c.socket.end()
    const { lines } = await c.rest()
    expect(lines.map((l) => l.status)).toEqual([202, 202, 400])
    expect(lines[2].error.message).toBe('the connection ended inside a line')
  })

  it('answers 1,000 lines written at once, in order, with no job lost or doubled', async () => {
    const c = connect(sc.socket)
    const ids = Array.from({ length: 1000 }, (_, i) => `many-${i}-${crypto.randomBytes(3).toString('hex')}`)
    c.write(ids.map((id, i) => JSON.stringify(upload(`many/${i}.txt`, { id }))).join('\n') + '\n')
    const answers = []
    for (let i = 0; i < ids.length; i++) answers.push(await c.next())
    expect(answers.map((a) => a.id)).toEqual(ids)
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([202]))
    c.socket.end()
    await waitFor(async () => (await fs.readdir(path.join(store, 'lines', 'many')).catch(() => [])).length === 1000)
  })

  it('answers 20,000 tiny lines that arrive in a few reads, each refused, in order', async () => {
    const c = connect(sc.socket)
    c.write('{}\n'.repeat(20000) + JSON.stringify(upload('after-tiny.txt')) + '\n')
    for (let i = 0; i < 20000; i++) expect((await c.next()).error.code).toBe('INVALID_REQUEST')
    expect(await c.next()).toMatchObject({ status: 202 })
    c.socket.end()
  })

  it('stops reading a client that sends and does not read its answers', async () => {
    const c = connect(sc.socket)
    c.socket.pause() // answers stay unread
    const refused = () => sc.logs.records().filter((r) => r.protocol === 'lines' && r.status === 400 && r.msg === 'request').length
    const before = refused()
    const n = 20000
    const line = JSON.stringify(upload('x', { target: 'nope' })) + '\n'
    c.write(line.repeat(n))
    await new Promise((resolve) => setTimeout(resolve, TIMEOUTS.idleMs / 2)) // under idleMs: not cut
    const taken = refused() - before
    expect(taken).toBeGreaterThan(0)
    expect(taken).toBeLessThan(n / 2) // the kernel's buffers hold a few thousand answers, not 20,000
    c.socket.resume()
    for (let i = 0; i < n; i++) expect((await c.next()).status).toBe(400)
    c.socket.end()
  })

  it('cuts a client that has not read its answers for idleMs', async () => {
    const c = connect(sc.socket)
    c.socket.pause() // answers stay unread, for longer than idleMs
    const n = 20000
    c.write((JSON.stringify(upload('x', { target: 'nope' })) + '\n').repeat(n))
    await new Promise((resolve) => setTimeout(resolve, 3 * TIMEOUTS.idleMs))
    c.socket.resume()
    // Cut with unread lines of its own, the connection is reset (unix sockets drop the answers
    // still unread too): far fewer answers than lines, then the end. Before, it was held open
    // until the client read, then every line was answered.
    const { lines } = await c.rest()
    expect(lines.length).toBeLessThan(n / 2)
    expect(lines.every((l) => l.status === 400)).toBe(true)
    expect((await sc.api.call('GET', '/healthz')).status).toBe(200)
  })

  it('closes an idle connection whose client neither reads nor closes its side', async () => {
    const server = sc.servers.find((s) => s.listen.type === 'unix').server
    const open = () => new Promise((resolve, reject) => server.getConnections((err, n) => err ? reject(err) : resolve(n)))
    const c = connect(sc.socket)
    c.socket.pause() // never reads: the daemon's end is not seen, and the client never ends its side
    c.write(JSON.stringify(upload('x', { target: 'nope' })) + '\n')
    await waitFor(async () => await open() >= 1)
    await waitFor(async () => await open() === 0, { timeoutMs: 6 * TIMEOUTS.idleMs })
    c.socket.destroy()
  })

  it('survives random lines and bytes: every answer a JSON error, the daemon still serving', async () => {
    const rnd = crypto.createHash('sha256').update('lines-fuzz').digest()
    let seed = rnd.readUInt32LE(0)
    const next = () => { seed = (seed * 1664525 + 1013904223) >>> 0; return seed }
    for (let round = 0; round < 30; round++) {
      const c = connect(sc.socket)
      const junk = Buffer.alloc(1 + (next() % 3000))
      for (let i = 0; i < junk.length; i++) junk[i] = next() & 0xff
      c.write(Buffer.concat([Buffer.from('{'), junk, Buffer.from('\n')]))
      c.socket.end()
      const { lines } = await c.rest()
      for (const l of lines) {
        expect(l.status).toBeGreaterThanOrEqual(400)
        expect(l.status).toBeLessThan(500)
        expect(l.error.code).toMatch(/^[A-Z_]+$/)
      }
    }
    expect((await sc.api.call('GET', '/healthz')).status).toBe(200)
  })

  it('serves HTTP on the same sockets: the first byte decides', async () => {
    const c = connect(sc.socket)
    expect(await c.ask(upload('before-http.txt'))).toMatchObject({ status: 202 })
    c.socket.end()
    const raw = await new Promise((resolve, reject) => {
      const s = net.connect(sc.socket)
      let out = ''
      s.on('data', (d) => { out += d })
      s.on('end', () => resolve(out))
      s.on('error', reject)
      s.end('GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n')
    })
    expect(raw).toMatch(/^HTTP\/1\.1 200 OK\r\n/)
    // A line on an HTTP connection is not a job: at best a malformed HTTP request.
    const mixed = await new Promise((resolve) => {
      const s = net.connect(tcp)
      let out = ''
      s.on('data', (d) => { out += d })
      s.on('close', () => resolve(out))
      s.end('GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n' + JSON.stringify(upload('mixed.txt')) + '\n')
    })
    expect(mixed).toMatch(/^HTTP\/1\.1 200 OK\r\n/)
    expect(mixed).not.toContain('"status":202')
    expect((await sc.api.call('GET', '/v1/jobs?limit=500')).json.jobs.some((j) => j.remote === '/lines/mixed.txt')).toBe(false)
  })
})

describe('line protocol with a token', () => {
  let secured
  const token = 'lines-token-0123456789abcdef'
  beforeAll(async () => {
    secured = await startTestSidecar({ roots: [root], token, targets: { local: { type: 'file', dir: store } }, lineTimeouts: TIMEOUTS })
  })
  afterAll(async () => {
    await secured?.stop({ graceMs: 0 })
  })

  it('takes jobs after the token line, on that connection only', async () => {
    const c = connect(secured.socket)
    c.write(JSON.stringify({ token }) + '\n' + JSON.stringify(upload('token-1.txt')) + '\n')
    expect(await c.next()).toEqual({ status: 200 })
    expect(await c.next()).toMatchObject({ status: 202 })
    expect(await c.ask(upload('token-2.txt'))).toMatchObject({ status: 202 })
    c.socket.end()
  })

  // What the PHP client's send() does: the token line and the job, then close without reading.
  // The answer to the token line, written to a closed unix socket, failed (EPIPE) and destroyed the
  // socket before the job line was handled: every such job was lost.
  it('takes a job whose client wrote the token line and the job, then closed without reading', async () => {
    for (let i = 0; i < 5; i++) {
      const id = `sent-and-gone-${i}-${crypto.randomBytes(4).toString('hex')}`
      await new Promise((resolve, reject) => {
        const s = net.connect(secured.socket, () => {
          s.write(JSON.stringify({ token }) + '\n' + JSON.stringify(upload(`${id}.txt`, { id })) + '\n', () => s.destroy())
        })
        s.on('close', resolve)
        s.on('error', reject)
      })
      await waitFor(async () => (await secured.api.job(id)).status === 200, { timeoutMs: 5000 })
    }
  })

  it.each([
    ['no token line', null],
    ['a wrong token', 'lines-token-0123456789abcdeX'],
    ['a token that is not a string', 12345]
  ])('refuses %s with 401, answers nothing after it, and closes', async (what, given) => {
    const c = connect(secured.socket)
    const id = `unauth-${crypto.randomBytes(4).toString('hex')}`
    c.write((given === null ? '' : JSON.stringify({ token: given }) + '\n') + JSON.stringify(upload(`${id}.txt`, { id })) + '\n' + JSON.stringify(upload(`${id}-2.txt`)) + '\n')
    const { lines } = await c.rest()
    expect(lines.length).toBe(1)
    expect(lines[0].status).toBe(401)
    expect(lines[0].error.code).toBe('UNAUTHORIZED')
    const seen = await secured.api.job(id)
    expect(seen.status).toBe(404)
  })
})

describe('line protocol at shutdown', () => {
  it('does not wait for a connection that has sent nothing yet', async () => {
    const dir = await tempDir('lines-stop-')
    const d = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir } } })
    const silent = connect(d.socket)
    await new Promise((resolve) => silent.socket.once('connect', resolve))
    const t0 = Date.now()
    await d.stop({ graceMs: 5000 })
    expect(Date.now() - t0).toBeLessThan(3000) // the first-byte timeout is 10 s
    await silent.closed
  })

  it('ends an idle connection at stop', async () => {
    const dir = await tempDir('lines-stop-')
    const d = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir } } })
    const c = connect(d.socket)
    expect(await c.ask(upload('stop-1.txt'))).toMatchObject({ status: 202 })
    await d.stop({ graceMs: 2000 })
    await c.closed
    expect(c.socket.destroyed).toBe(true)
  })
})
