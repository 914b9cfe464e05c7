// The file target: what goes wrong in its store is the remote's problem (remote codes, messages
// naming target:remote, never the store's own path); what goes wrong with the job's local file
// keeps the local codes.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { startTestSidecar, tempDir } from './helpers/sidecar.js'

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
    ['an upload below a file', () => upload('/afile/x'), 'REMOTE_REJECTED', /^local:\/afile\/\.x\.[\w-]+\._COPYING_: a parent is not a directory \(EEXIST\)$/],
    ['an upload below a file, with overwrite', () => upload('/afile/x', true), 'REMOTE_REJECTED', /^local:\/afile\/\.x\.[\w-]+\._COPYING_: a parent is not a directory \(EEXIST\)$/],
    ['an upload two levels below a file', () => upload('/afile/x/y', true), 'REMOTE_REJECTED', /^local:\/afile\/x\/\.y\.[\w-]+\._COPYING_: a parent is not a directory \(ENOTDIR\)$/],
    ['an upload with a 300-character name', () => upload(`/${long}`), 'REMOTE_REJECTED', new RegExp(`^local:/${long}: a name in the path is too long \\(ENAMETOOLONG\\)$`)],
    // Its temp name is cut to fit (uploadTempPath); the final name is what is too long.
    ['an upload with a 300-character name, with overwrite', () => upload(`/${long}`, true), 'REMOTE_REJECTED', new RegExp(`^local:/${long}: a name in the path is too long \\(ENAMETOOLONG\\)$`)],
    ['a download of a directory', () => download('/adir', 'from-dir'), 'REMOTE_REJECTED', /^local:\/adir: is a directory \(EISDIR\)$/],
    ['a download with a 300-character name', () => download(`/${long}`, 'from-long'), 'REMOTE_REJECTED', new RegExp(`^local:/${long}: a name in the path is too long \\(ENAMETOOLONG\\)$`)],
    // What worked already stays as it was.
    ['an upload over a directory, without overwrite', () => upload('/adir'), 'REMOTE_EXISTS', /\/adir exists/],
    ['a download of a missing file', () => download('/missing', 'from-missing'), 'REMOTE_NOT_FOUND', /\/missing does not exist/],
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
    expect((await sc.api.run(download('/ok', 'a-local-dir', true))).error).toMatchObject({ code: 'LOCAL_IO', message: expect.stringContaining('EISDIR') })
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
    await fs.writeFile(spooled, JSON.stringify(body))
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
