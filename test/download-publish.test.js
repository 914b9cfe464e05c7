// A download's temp file and its publish go through the destination's directory as opened and
// checked before the transfer (src/paths.js openDestDir, src/transfer.js publishDownload): a
// directory moved away and replaced by a symlink to somewhere outside the roots while the bytes
// flow gets nothing published, neither outside nor in the moved directory. In-process, on the
// real file system; the remote is a stream the test feeds, so the swap happens mid-transfer.
import { describe, it, expect, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { PassThrough } from 'node:stream'
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
