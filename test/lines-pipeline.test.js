// How the line protocol (src/http/lines.js) handles pipelined lines: each line's submission starts
// once the one before it has its record on its way to the journal, so that their checks and records
// keep the lines' order while their waits for the disk overlap (in "fsync" mode a batch of lines
// shares one synced write). The scheduler here is a scripted one, so that the test decides when a
// record is made and when it is on disk; lines.test.js runs the same protocol on the real daemon.
import { describe, it, expect, afterEach } from 'vitest'
import net from 'node:net'
import { lineProtocol } from '../src/http/lines.js'
import { createLogger } from '../src/logger.js'
import { Writable } from 'node:stream'

const silent = createLogger({ level: 'silent', destination: new Writable({ write: (c, e, cb) => cb() }) })

// A scheduler whose submissions the test settles: each call is recorded with the job's remote, and
// `record(i)` / `persist(i)` play the journal's two steps for the i-th call.
function scriptedScheduler ({ recordAtOnce = true } = {}) {
  const calls = []
  return {
    calls,
    submit (body, recorded) {
      const call = { remote: body.remote, recorded }
      const done = new Promise((resolve, reject) => { call.persist = resolve; call.fail = reject })
      calls.push(call)
      if (recordAtOnce) recorded?.()
      return done.then(() => ({ job: { id: `id-${body.remote}` }, created: true, state: 'queued' }))
    }
  }
}

const servers = []
const clients = []
afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy()
  for (const s of servers.splice(0)) await new Promise((resolve) => { s.close(resolve); s.closeAllConnections?.() })
})

async function serve (scheduler, config = { token: null }) {
  const lines = lineProtocol({ config, scheduler, logger: silent })
  const server = net.createServer((socket) => socket.once('data', (first) => lines.serve(socket, first)))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  servers.push(server)
  const socket = net.connect(server.address().port, '127.0.0.1')
  clients.push(socket)
  const answers = []
  let buffered = ''
  socket.setEncoding('utf8').on('data', (d) => {
    buffered += d
    for (let k; (k = buffered.indexOf('\n')) >= 0; buffered = buffered.slice(k + 1)) answers.push(JSON.parse(buffered.slice(0, k)))
  })
  const closed = new Promise((resolve) => socket.once('close', resolve))
  return { socket, answers, closed, write: (lines) => socket.write(lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l)) + '\n').join('')) }
}

const job = (name) => ({ direction: 'upload', target: 't', local: `/in/${name}`, remote: `/${name}` })
const until = async (check) => {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 2))
  expect(check()).toBe(true)
}

describe('pipelined lines', () => {
  it('are all submitted, in order, while the first one still waits for the disk', async () => {
    const scheduler = scriptedScheduler()
    const c = await serve(scheduler)
    c.write([job('a'), job('b'), job('c')])
    await until(() => scheduler.calls.length === 3)
    expect(scheduler.calls.map((k) => k.remote)).toEqual(['/a', '/b', '/c'])
    expect(c.answers).toEqual([])
    // On disk in another order: answered in the lines' order all the same.
    scheduler.calls[2].persist()
    scheduler.calls[1].persist()
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(c.answers).toEqual([])
    scheduler.calls[0].persist()
    await until(() => c.answers.length === 3)
    expect(c.answers.map((a) => [a.status, a.id])).toEqual([[202, 'id-/a'], [202, 'id-/b'], [202, 'id-/c']])
    c.socket.end()
  })

  it('starts a line only once the one before it has its record made, or its answer', async () => {
    const scheduler = scriptedScheduler({ recordAtOnce: false })
    const c = await serve(scheduler)
    c.write([job('a'), '{not json', job('b'), job('c')])
    await until(() => scheduler.calls.length === 1)
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(scheduler.calls.length).toBe(1) // /a's record is not made yet
    scheduler.calls[0].recorded()
    // The refused line needs no record: /b follows it at once; /c waits for /b's record.
    await until(() => scheduler.calls.length === 2)
    expect(scheduler.calls[1].remote).toBe('/b')
    scheduler.calls[1].fail(new Error('disk full')) // answered 500, which lets /c start
    await until(() => scheduler.calls.length === 3)
    scheduler.calls[2].recorded()
    scheduler.calls[2].persist()
    scheduler.calls[0].persist()
    await until(() => c.answers.length === 4)
    expect(c.answers.map((a) => a.status)).toEqual([202, 400, 500, 202])
    expect(c.answers[1].error.code).toBe('INVALID_JSON')
    c.socket.end()
  })

  it('are handled at most 64 ahead of the answers written, however many one read holds', async () => {
    const scheduler = scriptedScheduler()
    const c = await serve(scheduler)
    c.write(Array.from({ length: 200 }, (_, i) => job(`n${i}`)))
    await until(() => scheduler.calls.length === 64)
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(scheduler.calls.length).toBe(64)
    for (const call of scheduler.calls.slice(0, 10)) call.persist()
    await until(() => scheduler.calls.length === 74)
    const persisted = new Set()
    await until(() => {
      for (const call of scheduler.calls) if (!persisted.has(call)) call.persist(persisted.add(call))
      return c.answers.length === 200
    })
    expect(c.answers.map((a) => a.id)).toEqual(Array.from({ length: 200 }, (_, i) => `id-/n${i}`))
    c.socket.end()
  })

  it('after a line refused with 401, submits none of the lines sent behind it, not even after a good token', async () => {
    const scheduler = scriptedScheduler()
    const c = await serve(scheduler, { token: 'good-token' })
    c.write([job('a'), { token: 'good-token' }, job('b')])
    await c.closed
    expect(c.answers.map((a) => a.status)).toEqual([401])
    expect(scheduler.calls).toEqual([])
  })
})
