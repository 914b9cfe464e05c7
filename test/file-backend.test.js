// The file target: what goes wrong in its store is the remote's problem (remote codes, messages
// naming target:remote, never the store's own path); what goes wrong with the job's local file
// keeps the local codes.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest'
import net from 'node:net'
import fs from 'node:fs/promises'
import fsSync from 'node:fs'
import path from 'node:path'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'

let sc, root, store

beforeAll(async () => {
  root = await tempDir('file-root-')
  store = await tempDir('file-store-')
  sc = await startTestSidecar({ roots: [root], targets: { local: { type: 'file', dir: store } } })
  await fs.writeFile(path.join(root, 'src'), 'payload')
  await fs.mkdir(path.join(store, 'adir'))
  await fs.writeFile(path.join(store, 'afile'), 'a file, not a directory')
})
afterAll(async () => {
  await sc?.stop({ graceMs: 0 })
})

const long = 'n'.repeat(300) // over NAME_MAX (255)
const upload = (remote, overwrite = false) => ({ direction: 'upload', target: 'local', local: path.join(root, 'src'), remote, overwrite })
const download = (remote, name, overwrite = false) => ({ direction: 'download', target: 'local', local: path.join(root, name), remote, overwrite })

describe('file target: store errors are remote errors', () => {
  it.each([
    ['an upload over a directory, with overwrite', () => upload('/adir', true), 'REMOTE_REJECTED', /^local:\/adir: is a directory \(EISDIR\)$/],
    ['an upload below a file', () => upload('/afile/x'), 'REMOTE_REJECTED', /^local:\/afile\/\.x\.[\w-]+\._COPYING_: a parent is not a directory \(ENOTDIR\)$/],
    ['an upload below a file, with overwrite', () => upload('/afile/x', true), 'REMOTE_REJECTED', /^local:\/afile\/\.x\.[\w-]+\._COPYING_: a parent is not a directory \(ENOTDIR\)$/],
    ['an upload two levels below a file', () => upload('/afile/x/y', true), 'REMOTE_REJECTED', /^local:\/afile\/x\/\.y\.[\w-]+\._COPYING_: a parent is not a directory \(ENOTDIR\)$/],
    ['an upload with a 300-character name', () => upload(`/${long}`), 'REMOTE_REJECTED', new RegExp(`^local:/${long}: a name in the path is too long \\(ENAMETOOLONG\\)$`)],
    // Its temp name is cut to fit (uploadTempPath); the final name is what is too long.
    ['an upload with a 300-character name, with overwrite', () => upload(`/${long}`, true), 'REMOTE_REJECTED', new RegExp(`^local:/${long}: a name in the path is too long \\(ENAMETOOLONG\\)$`)],
    ['a download of a directory', () => download('/adir', 'from-dir'), 'REMOTE_REJECTED', /^local:\/adir: is a directory \(EISDIR\)$/],
    ['a download with a 300-character name', () => download(`/${long}`, 'from-long'), 'REMOTE_REJECTED', new RegExp(`^local:/${long}: a name in the path is too long \\(ENAMETOOLONG\\)$`)],
    // What worked already stays as it was.
    ['an upload over a directory, without overwrite', () => upload('/adir'), 'REMOTE_EXISTS', /\/adir exists/],
    ['a download of a missing file', () => download('/missing', 'from-missing'), 'REMOTE_NOT_FOUND', /\/missing does not exist on \w+/],
    ['a download below a file', () => download('/afile/x', 'from-below-file'), 'REMOTE_NOT_FOUND', /\/afile\/x does not exist/]
  ])('%s', async (label, spec, code, message) => {
    const job = await sc.api.run(spec())
    expect(job).toMatchObject({ state: 'failed', attempts: 1, error: { code } })
    expect(job.error.message).toMatch(message)
    expect(job.error.message).not.toContain(store)
    // Nothing half-done is left on either side.
    expect((await fs.readdir(store)).sort()).toEqual(['adir', 'afile'])
    expect(await fs.readdir(path.join(store, 'adir'))).toEqual([])
    expect((await fs.readdir(root)).filter((n) => n.endsWith('.part'))).toEqual([])
  })

  it('GET /v1/stream of a name too long is 502 REMOTE_REJECTED, without the store path', async () => {
    const res = await sc.api.call('GET', `/v1/stream/local/${long}`)
    expect(res.status).toBe(502)
    expect(res.json.error).toMatchObject({ code: 'REMOTE_REJECTED', message: `local:/${long}: a name in the path is too long (ENAMETOOLONG)` })
  })

  it('errors on the local side keep their local codes', async () => {
    await fs.writeFile(path.join(store, 'ok'), 'remote content')
    await fs.writeFile(path.join(root, 'taken'), 'keep me')
    await fs.mkdir(path.join(root, 'a-local-dir'))
    expect((await sc.api.run(download('/ok', 'taken'))).error.code).toBe('LOCAL_EXISTS')
    // A directory cannot be replaced by the download's rename: refused at submit, not failed at the end.
    expect(await sc.api.submit(download('/ok', 'a-local-dir', true))).toMatchObject({ status: 400, json: { error: { code: 'INVALID_PATH', message: expect.stringContaining('is a directory') } } })
    expect(await fs.readFile(path.join(root, 'taken'), 'utf8')).toBe('keep me')
    expect(await sc.api.run(download('/ok', 'fine'))).toMatchObject({ state: 'succeeded' })
  })
})

describe('resubmission of a job whose local file has gone since', () => {
  // README: "the same id with the same body answers 200 {"id","state"} of the existing job". The
  // app removes an upload's local copy once it succeeded (php-client README); a spooled copy of
  // the same job (its 202 was lost or late) or a client's retry arriving after that must be the
  // duplicate it is, not a 422 LOCAL_NOT_FOUND (for the spool: a file moved to rejected/).
  it('answers 200 with the existing job over HTTP and counts a spooled copy as a duplicate', async () => {
    const local = path.join(root, 'gone-after-success')
    await fs.writeFile(local, 'uploaded, then removed by the app')
    const body = { id: 'gone-after-success-01', direction: 'upload', target: 'local', local, remote: '/gone-after-success' }
    expect((await sc.api.run(body)).state).toBe('succeeded')
    await fs.rm(local)

    const again = await sc.api.submit(body)
    expect({ status: again.status, json: again.json }).toEqual({ status: 200, json: { id: body.id, state: 'succeeded' } })

    const spooled = path.join(sc.spool.dir, `${body.id}.json`)
    await fs.writeFile(`${spooled}.tmp`, JSON.stringify(body)) // written, then renamed, as PHP does
    await fs.rename(`${spooled}.tmp`, spooled)
    await sc.spool.trigger()
    await expect(fs.access(spooled)).rejects.toThrow()
    await expect(fs.readdir(path.join(sc.spool.dir, 'rejected'))).rejects.toThrow() // nothing rejected
  })

  it('still refuses a new job whose local file is missing', async () => {
    const res = await sc.api.submit({ id: 'never-existed-local-01', direction: 'upload', target: 'local', local: path.join(root, 'nope'), remote: '/nope' })
    expect(res.status).toBe(422)
    expect(res.json.error.code).toBe('LOCAL_NOT_FOUND')
  })
})

// GET /v1/stream announces a Content-Length, then streams what the target gives: a file replaced
// by a larger one between the stat and the open, or one that grows while it is read, must not
// put more bytes on the connection than announced (a keep-alive client, nginx's upstream pool,
// would read the excess as the next answer), and one that shrinks must not look complete.
describe('GET /v1/stream sends exactly the bytes it announces', () => {
  // One keep-alive exchange on a raw socket: the head, and every byte that follows it.
  function rawGet (p) {
    return new Promise((resolve, reject) => {
      const socket = net.connect(new URL(sc.url).port, '127.0.0.1')
      const chunks = []
      let timer = null
      const finish = (closed) => {
        clearTimeout(timer)
        socket.destroy()
        const all = Buffer.concat(chunks)
        const end = all.indexOf('\r\n\r\n')
        const head = all.subarray(0, end).toString()
        resolve({ head, status: Number(head.split(' ')[1]), length: Number(/content-length: (\d+)/i.exec(head)?.[1]), body: all.subarray(end + 4), closed })
      }
      socket.on('data', (d) => {
        chunks.push(d)
        clearTimeout(timer)
        timer = setTimeout(() => finish(false), 500) // keep-alive: quiet for 500 ms is the end
      })
      socket.once('close', () => finish(true))
      socket.once('error', reject)
      socket.write(`GET ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n`)
    })
  }
  const patched = []
  const patch = (name, fn) => {
    const backend = sc.scheduler.backends.local
    const original = backend[name]
    patched.push(() => { backend[name] = original })
    backend[name] = (...args) => fn(original.bind(backend), ...args)
  }
  afterEach(() => { for (const undo of patched.splice(0)) undo() })

  it('a file replaced by a larger one between stat and open', async () => {
    await fs.writeFile(path.join(store, 'replaced'), 'old')
    const next = 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nEVIL!'
    patch('stat', async (stat, remote, opts) => {
      const st = await stat(remote, opts)
      await fs.writeFile(path.join(store, '.replaced.new'), next)
      await fs.rename(path.join(store, '.replaced.new'), path.join(store, 'replaced')) // a publish
      return st
    })
    const res = await rawGet('/v1/stream/local/replaced')
    expect(res.status).toBe(200)
    expect(res.body.length).toBe(res.length) // nothing beyond the announced answer
    expect(res.body.toString()).toBe(next) // one whole version of the file
  })

  it('a file that grows while it is read', async () => {
    await fs.writeFile(path.join(store, 'growing'), 'first part')
    patch('openRead', async (openRead, remote, opts) => {
      const src = await openRead(remote, opts)
      await fs.appendFile(path.join(store, 'growing'), '+ appended after the open')
      return src
    })
    const res = await rawGet('/v1/stream/local/growing')
    expect(res.status).toBe(200)
    expect(res.length).toBe(10)
    expect(res.body.toString()).toBe('first part')
  })

  it('a file that shrinks while it is read: the answer is cut, not complete', async () => {
    await fs.writeFile(path.join(store, 'shrinking'), 'x'.repeat(1000))
    patch('openRead', async (openRead, remote, opts) => {
      const src = await openRead(remote, opts)
      await fs.truncate(path.join(store, 'shrinking'), 10)
      return src
    })
    const res = await rawGet('/v1/stream/local/shrinking')
    expect(res.length).toBe(1000)
    expect(res.body.length).toBeLessThan(1000)
    expect(res.closed).toBe(true) // the client can tell: the connection ends before the body
  })
})

// Whoever can write in the store (a store put under a root, an operator's mistake) must not make
// the daemon read or write other files through it, nor hang it with a FIFO.
describe('file target: only regular files inside the store', () => {
  let outside
  beforeAll(async () => {
    outside = await tempDir('file-outside-')
    await fs.writeFile(path.join(outside, 'secret'), 'not for the store')
    await fs.symlink(path.join(outside, 'secret'), path.join(store, 'link-out'))
    await fs.symlink(outside, path.join(store, 'dir-out'))
    await fs.mkfifo?.(path.join(store, 'fifo')) ?? (await import('node:child_process')).execFileSync('mkfifo', [path.join(store, 'fifo')])
  })

  it.each([
    ['a symlink to a file outside', '/link-out', /^local:\/link-out: is a symbolic link, not followed \(ELOOP\)$/],
    ['a file below a symlink to a directory outside', '/dir-out/secret', /^local:\/dir-out\/secret: leads out of the store/],
    ['a FIFO', '/fifo', /^local:\/fifo: is not a regular file \(EFTYPE\)$/]
  ])('a download of %s fails REMOTE_REJECTED', async (what, remote, message) => {
    const job = await sc.api.run(download(remote, `got-${path.basename(remote)}`, true), 30)
    expect(job).toMatchObject({ state: 'failed', error: { code: 'REMOTE_REJECTED' } })
    expect(job.error.message).toMatch(message)
    await expect(fs.access(path.join(root, `got-${path.basename(remote)}`))).rejects.toThrow()
  })

  it.each(['/link-out', '/dir-out/secret', '/fifo'])('GET /v1/stream/local%s answers 502 REMOTE_REJECTED at once', async (remote) => {
    const res = await sc.api.call('GET', `/v1/stream/local${remote}`)
    expect({ status: res.status, code: res.json?.error?.code }).toEqual({ status: 502, code: 'REMOTE_REJECTED' })
  })

  it('an upload into a symlink to a directory outside writes nothing there', async () => {
    const job = await sc.api.run(upload('/dir-out/planted', true), 30)
    expect(job).toMatchObject({ state: 'failed', error: { code: 'REMOTE_REJECTED' } })
    expect(await fs.readdir(outside)).toEqual(['secret'])
  })

  it('an upload below a symlink to a directory outside creates no directory there', async () => {
    for (const overwrite of [false, true]) {
      const job = await sc.api.run(upload('/dir-out/newdir/deeper/planted', overwrite), 30)
      expect(job).toMatchObject({ state: 'failed', error: { code: 'REMOTE_REJECTED' } })
      expect(await fs.readdir(outside)).toEqual(['secret'])
    }
    // Directories the store lacks are still made, inside it.
    expect(await sc.api.run(upload('/made/on/the/way', true), 30)).toMatchObject({ state: 'succeeded' })
    expect(await fs.readFile(path.join(store, 'made/on/the/way'), 'utf8')).toBe('payload')
  })

  // The backend itself, so that the swap comes exactly between the upload and its publish.
  it('a directory swapped for a symlink out of the store after the upload: nothing is published or removed there', async () => {
    const { createFileBackend } = await import('../src/backends/file.js')
    const backend = createFileBackend({ type: 'file', dir: store, name: 'local' })
    for (const overwrite of [true, false]) {
      const victim = await tempDir('file-victim-')
      await fs.writeFile(path.join(victim, 'y'), 'must stay')
      await fs.writeFile(path.join(victim, '.y.swapjob0001._COPYING_'), 'planted')
      await fs.rm(path.join(store, 'swap'), { recursive: true, force: true })
      const sink = await backend.openWrite('/swap/.y.swapjob0001._COPYING_')
      sink.stream.end(Buffer.from('uploaded'))
      await sink.done
      await fs.rename(path.join(store, 'swap'), path.join(store, `swap-moved-${overwrite}`))
      await fs.symlink(victim, path.join(store, 'swap'))
      await expect(backend.publish('/swap/.y.swapjob0001._COPYING_', '/swap/y', { overwrite })).rejects.toMatchObject({ code: 'REMOTE_REJECTED' })
      await backend.remove('/swap/.y.swapjob0001._COPYING_').catch(() => {})
      expect(await fs.readFile(path.join(victim, 'y'), 'utf8')).toBe('must stay')
      expect((await fs.readdir(victim)).sort()).toEqual(['.y.swapjob0001._COPYING_', 'y'])
      await fs.unlink(path.join(store, 'swap'))
    }
  })

  it.each(['/link-out', '/dir-out/secret', '/fifo'])('HEAD /v1/stream/local%s answers 502 REMOTE_REJECTED, not the size of what it leads to', async (remote) => {
    const res = await sc.api.call('HEAD', `/v1/stream/local${remote}`)
    expect(res.status).toBe(502)
    expect(res.headers['content-length']).not.toBe(String('not for the store'.length))
  })
})

// A client of /v1/stream that stops reading: the file target has no server to time out, so the
// answer itself is cut after the target's idleMs without progress (it held the store file and
// its pool for as long as the client stayed).
describe('GET /v1/stream to a client that stops reading', () => {
  it('is cut after the target\'s idleMs, and the store file is closed', async () => {
    const dir = await tempDir('stall-store-')
    const big = path.join(dir, 'big.bin')
    await fs.writeFile(big, Buffer.alloc(64 << 20, 3)) // far more than the socket buffers hold
    const stalled = await startTestSidecar({ roots: [root], targets: { s: { type: 'file', dir, timeouts: { idleMs: 300 } } } })
    const openFds = () => fsSync.readdirSync('/proc/self/fd').filter((fd) => { try { return fsSync.readlinkSync(`/proc/self/fd/${fd}`) === big } catch { return false } }).length
    const client = net.connect(new URL(stalled.url).port, '127.0.0.1')
    try {
      await new Promise((resolve) => client.once('connect', resolve))
      client.write('GET /v1/stream/s/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
      client.pause() // reads nothing
      await waitFor(() => openFds() === 1, { timeoutMs: 5000 })
      await waitFor(() => openFds() === 0, { timeoutMs: 10000 })
    } finally {
      client.destroy()
      await stalled.stop({ graceMs: 0 })
    }
  })
})

// The store's files and directories are raw descriptors (src/paths.js LocalFile), closed by the
// code, not by a FileHandle's garbage collection: none is left open once the jobs have ended,
// whatever way they ended, nor after the API's reads.
describe('file target: descriptors', () => {
  it('none of the store is left open after jobs that succeed and fail, streams and HEADs', async () => {
    const dir = await tempDir('fd-store-')
    const real = await fs.realpath(dir)
    await fs.mkdir(path.join(dir, 'adir'))
    await fs.writeFile(path.join(dir, 'afile'), 'a file')
    await fs.symlink('/etc/hostname', path.join(dir, 'link-out'))
    const own = await startTestSidecar({ roots: [root], targets: { s: { type: 'file', dir } } })
    const intoStore = () => fsSync.readdirSync('/proc/self/fd').filter((fd) => {
      try { return fsSync.readlinkSync(`/proc/self/fd/${fd}`).startsWith(real) } catch { return false }
    })
    try {
      const on = (spec) => ({ ...spec, target: 's' })
      const ran = []
      ran.push(await own.api.run(on(upload('/new/deep/a'))))
      ran.push(await own.api.run(on(upload('/new/deep/a')))) // REMOTE_EXISTS
      ran.push(await own.api.run(on(upload('/new/deep/a', true))))
      ran.push(await own.api.run(on(upload('/adir', true)))) // EISDIR at the publish
      ran.push(await own.api.run(on(upload('/afile/x')))) // ENOTDIR
      ran.push(await own.api.run(on(download('/new/deep/a', 'fd-back', true))))
      ran.push(await own.api.run(on(download('/link-out', 'fd-link', true)))) // ELOOP
      ran.push(await own.api.run(on(download('/adir', 'fd-dir', true)))) // EISDIR
      expect(ran.map((j) => j.error?.code ?? j.state)).toEqual([
        'succeeded', 'REMOTE_EXISTS', 'succeeded', 'REMOTE_REJECTED', 'REMOTE_REJECTED', 'succeeded', 'REMOTE_REJECTED', 'REMOTE_REJECTED'])
      expect((await own.api.call('GET', '/v1/stream/s/new/deep/a')).status).toBe(200)
      expect((await own.api.call('HEAD', '/v1/stream/s/new/deep/a')).status).toBe(200)
      expect((await own.api.call('GET', '/v1/stream/s/link-out')).status).toBe(502)
      await waitFor(() => intoStore().length === 0, { timeoutMs: 5000 })
    } finally {
      await own.stop({ graceMs: 0 })
    }
  })
})
