// A download's temp file and its publish go through the destination's directory as opened and
// checked before the transfer (src/paths.js openDestDir, src/transfer.js publishDownload): a
// directory moved away and replaced by a symlink to somewhere outside the roots while the bytes
// flow gets nothing published, neither outside nor in the moved directory. In-process, on the
// real file system; the remote is a stream the test feeds, so the swap happens mid-transfer.
import { describe, it, expect, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { PassThrough } from 'node:stream'
import http from 'node:http'
import { createHttpBackend } from '../src/backends/http.js'
import { download } from '../src/transfer.js'
import { newJob } from '../src/jobs.js'
import { tempDir } from './helpers/sidecar.js'

const temps = []
afterAll(() => Promise.all(temps.map((d) => fs.rm(d, { recursive: true, force: true }))))

// A backend whose one file is a stream fed by the test: `body.write()`, then `body.end()`.
function feedingBackend (size) {
  const body = new PassThrough()
  let opened
  const isOpen = new Promise((resolve) => { opened = resolve })
  return {
    body,
    isOpen,
    backend: {
      type: 'test',
      async openRead () {
        opened()
        return { stream: body, size, version: null, offset: 0 }
      }
    }
  }
}

async function setup () {
  const base = await tempDir('publish-')
  temps.push(base)
  const root = path.join(base, 'root')
  const outside = path.join(base, 'outside')
  await fs.mkdir(path.join(root, 'sub'), { recursive: true })
  await fs.mkdir(outside)
  return { root, outside }
}

const job = (local, extra = {}) => newJob({ direction: 'download', target: 't', local, remote: '/r', overwrite: false, ...extra }, new Date().toISOString())

// Starts a download of 10 bytes, lets 5 arrive, runs `swap`, sends the rest.
async function downloadAcrossSwap (j, root, swap) {
  const { body, isOpen, backend } = feedingBackend(10)
  const done = download(j, { backend, roots: [root] }).then(() => null, (err) => err)
  if (await Promise.race([isOpen.then(() => 'open'), done]) !== 'open') return done // failed before the body
  body.write('12345')
  await new Promise((resolve) => setTimeout(resolve, 50))
  await swap()
  body.end('67890')
  return done
}

describe('download publish', () => {
  it('publishes nothing when the directory was replaced by a symlink to outside during the transfer', async () => {
    const { root, outside } = await setup()
    const j = job(path.join(root, 'sub', 'out.bin'), { id: 'RACE-0001' })
    const err = await downloadAcrossSwap(j, root, async () => {
      await fs.rename(path.join(root, 'sub'), path.join(root, 'sub-moved'))
      await fs.symlink(outside, path.join(root, 'sub'))
      await fs.writeFile(path.join(outside, '.out.bin.RACE-0001.part'), 'PLANTED') // what a link would publish
    })
    expect(err?.code).toBe('PATH_NOT_ALLOWED')
    expect((await fs.readdir(outside)).sort()).toEqual(['.out.bin.RACE-0001.part'])
    expect(await fs.readFile(path.join(outside, '.out.bin.RACE-0001.part'), 'utf8')).toBe('PLANTED')
    expect(await fs.readdir(path.join(root, 'sub-moved'))).toEqual([]) // our temp file removed where it really was
  })

  it('with overwrite, does not replace a file outside the roots', async () => {
    const { root, outside } = await setup()
    await fs.writeFile(path.join(outside, 'out.bin'), 'VICTIM')
    const j = job(path.join(root, 'sub', 'out.bin'), { id: 'RACE-0002', overwrite: true })
    const err = await downloadAcrossSwap(j, root, async () => {
      await fs.rename(path.join(root, 'sub'), path.join(root, 'sub-moved'))
      await fs.symlink(outside, path.join(root, 'sub'))
      await fs.writeFile(path.join(outside, '.out.bin.RACE-0002.part'), 'PLANTED')
    })
    expect(err?.code).toBe('PATH_NOT_ALLOWED')
    expect(await fs.readFile(path.join(outside, 'out.bin'), 'utf8')).toBe('VICTIM')
    expect(await fs.readdir(path.join(root, 'sub-moved'))).toEqual([])
  })

  it('publishes nothing when the directory was moved within the roots during the transfer', async () => {
    const { root } = await setup()
    const j = job(path.join(root, 'sub', 'out.bin'), { id: 'RACE-0003' })
    const err = await downloadAcrossSwap(j, root, () => fs.rename(path.join(root, 'sub'), path.join(root, 'sub-moved')))
    expect(err?.code).toBe('PATH_NOT_ALLOWED')
    expect(await fs.readdir(path.join(root, 'sub-moved'))).toEqual([])
  })

  it('publishes when nothing moved, and a name too long for ".<name>.<id>.part" still gets its temp file', async () => {
    const { root } = await setup()
    const long = 'm'.repeat(240) // a valid name; with the job id and ".part" the temp name is over 255
    const j = job(path.join(root, 'sub', long), { id: 'LONG-0001' })
    const err = await downloadAcrossSwap(j, root, async () => {})
    expect(err).toBe(null)
    expect(await fs.readFile(path.join(root, 'sub', long), 'utf8')).toBe('1234567890')
    expect(await fs.readdir(path.join(root, 'sub'))).toEqual([long])
    const wide = 'é'.repeat(120) // 240 bytes in UTF-8: cut by characters, never inside one
    const w = job(path.join(root, 'sub', wide), { id: 'LONG-0002' })
    expect(await downloadAcrossSwap(w, root, async () => {})).toBe(null)
    expect(await fs.readFile(path.join(root, 'sub', wide), 'utf8')).toBe('1234567890')
  })
})

// A resumed http download asks for `bytes=<offset>-`; the 206 says in Content-Range which bytes it
// holds, and RFC 9110 (15.3.7) lets a server send fewer than asked. What it holds, not what was
// asked, decides where the body goes and how large the file is.
describe('resumed http download: the 206 answer decides, not the request', () => {
  const data = Buffer.alloc(300000)
  for (let i = 0; i < data.length; i++) data[i] = (i * 7) % 251

  // The first GET is cut after 100,000 bytes, later whole ones are not. Ranged GETs: `ranged(start)`
  // gives [from, to] (inclusive).
  async function server (ranged) {
    let whole = 0
    const srv = http.createServer((req, res) => {
      const etag = '"v1"'
      const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '')
      if (!m) {
        res.writeHead(200, { etag, 'content-length': data.length })
        if (++whole > 1) return res.end(data)
        res.write(data.subarray(0, 100000))
        return setTimeout(() => res.socket.destroy(), 30)
      }
      const [from, to] = ranged(Number(m[1]))
      res.writeHead(206, { etag, 'content-range': `bytes ${from}-${to}/${data.length}`, 'content-length': to - from + 1 })
      res.end(data.subarray(from, to + 1))
    })
    await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
    return srv
  }

  it.each([
    ['fewer bytes than asked', (start) => [start, start + 49999]],
    ['a range starting before the offset', (start) => [start - 1000, data.length - 1]]
  ])('never publishes a file other than the remote one: %s', async (what, ranged) => {
    const { root } = await setup()
    const srv = await server(ranged)
    const backend = createHttpBackend({ url: `http://127.0.0.1:${srv.address().port}/`, timeouts: { idleMs: 5000 } })
    try {
      const j = job(path.join(root, 'sub', 'out.bin'), { overwrite: true })
      const onStart = ({ version }) => { j.remoteVersion = version } // as the scheduler journals it
      j.attempts = 1
      await expect(download(j, { backend, roots: [root], onStart })).rejects.toBeTruthy() // cut: the temp file is kept
      let result
      for (let attempt = 2; attempt <= 3 && !result; attempt++) {
        j.attempts = attempt
        // A retryable failure is fine (the next attempt starts over); a wrong file is not.
        result = await download(j, { backend, roots: [root], onStart }).catch((err) => {
          expect(err.retryable ?? true).toBe(true)
          return null
        })
      }
      expect(result?.bytes).toBe(data.length)
      expect((await fs.readFile(path.join(root, 'sub', 'out.bin'))).equals(data)).toBe(true)
    } finally {
      await backend.close()
      await new Promise((resolve) => srv.close(resolve))
    }
  })
})
