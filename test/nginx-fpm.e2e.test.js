// The PHP examples on the stack users run: Debian's nginx and php-fpm 8.2 on private configs, the
// daemon beside them on its unix socket and its hand-off thread's, a `file` target. The nginx server block holds the README's
// X-Accel location taken verbatim; only its socket path /run/transfer-sidecar/sidecar.sock is
// replaced by the test daemon's socket. A copy of that location broken in each of the ways that
// matter must make the same checks fail.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { startTestSidecar, tempDir, waitFor } from './helpers/sidecar.js'
import { startNginxFpm } from './harness/nginx-fpm.js'

const repo = new URL('..', import.meta.url).pathname
const readme = await fs.readFile(path.join(repo, 'README.md'), 'utf8')
const blocks = [...readme.matchAll(/```nginx\n([\s\S]*?)```/g)].map((m) => m[1])
const README_SOCKET = '/run/transfer-sidecar/sidecar.sock'

let sidecar, uploadRoot, store, handoffSocket

function readmeLocation () {
  expect(blocks, 'README.md has exactly one ```nginx block').toHaveLength(1)
  expect(blocks[0]).toContain(README_SOCKET)
  return blocks[0].replaceAll(README_SOCKET, sidecar.socket)
}

async function startWeb (locations, target = 'local') {
  return startNginxFpm({
    docroot: path.join(repo, 'php-client', 'examples'),
    maxChildren: 2,
    locations,
    env: {
      SIDECAR_SOCKET: sidecar.socket,
      SIDECAR_HANDOFF_SOCKET: handoffSocket,
      SIDECAR_UPLOAD_ROOT: uploadRoot,
      SIDECAR_TARGET: target,
      SIDECAR_ACCEL_PREFIX: '/sidecar-stream'
    }
  })
}

async function streamedBytes () {
  const text = await (await fetch(`${sidecar.url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith('sidecar_stream_bytes_total{backend="file"}'))
  return line ? Number(line.split(' ').pop()) : 0
}

// Upload through upload.php, follow status.php to the end, download through download.php.
async function roundTrip (web) {
  const bytes = randomBytes(300 * 1024 + 7)
  const form = new FormData()
  form.append('file', new Blob([bytes]), 'photo of me.bin')
  const up = await fetch(`${web.url}/upload.php`, { method: 'POST', body: form, redirect: 'manual' })
  const upText = await up.text()
  expect(up.status, upText).toBe(202)
  const { id, status_url: statusUrl } = JSON.parse(upText)
  expect(id).toMatch(/\S/)

  let job
  for (const end = Date.now() + 30_000; ;) {
    const res = await fetch(`${web.url}/${statusUrl}`)
    job = await res.json()
    expect(res.status, JSON.stringify(job)).toBe(200)
    if (!['queued', 'running'].includes(job.state) || Date.now() > end) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  expect(job.state, JSON.stringify(job)).toBe('succeeded')
  expect(job.remote).toMatch(/^\/uploads\/\d{4}-\d\d-\d\d\/[0-9a-f]{16}-photo_of_me\.bin$/)
  expect(Buffer.compare(await fs.readFile(path.join(store, job.remote)), bytes)).toBe(0)

  const before = await streamedBytes()
  // Browser headers, as a link on the site sends them: the location must not pass them on.
  const down = await fetch(`${web.url}/download.php?id=${encodeURIComponent(id)}`, {
    headers: { 'sec-fetch-site': 'same-origin', origin: web.url }
  })
  const body = Buffer.from(await down.arrayBuffer())
  expect(down.status, body.toString().slice(0, 300)).toBe(200)
  expect(down.headers.get('x-accel-redirect')).toBeNull()
  expect(down.headers.get('content-disposition')).toMatch(/photo_of_me\.bin/)
  expect(body.length).toBe(bytes.length)
  expect(Buffer.compare(body, bytes)).toBe(0)
  // nginx fetched the bytes from the daemon's /v1/stream (PHP only sent the header): its access
  // log shows download.php ending in the internal location, answered by php-fpm then the daemon.
  expect(await streamedBytes() - before).toBe(bytes.length)
  const routed = await waitFor(async () => (await web.logs('nginx/access.log')).split('\n').find((l) => l.startsWith('GET /download.php?')))
  expect(routed).toMatch(/ 200 uri=\/sidecar-stream\/local\/uploads\//)
  expect(routed).toContain(`upstream=unix:${web.root}/fpm/php-fpm.sock : unix:${sidecar.socket}`)

  // The location is internal: not reachable from outside.
  const outside = await fetch(`${web.url}/sidecar-stream/local${job.remote}`)
  await outside.arrayBuffer()
  expect(outside.status).toBe(404)
}

// Without nginx or php-fpm installed the harness fails loudly (scripts/test-all.sh installs them).
describe('examples on nginx + php-fpm with the README nginx location', () => {
  beforeAll(async () => {
    uploadRoot = await tempDir('nginx-fpm-uploads-')
    store = await tempDir('nginx-fpm-store-')
    // With the hand-off thread, as deploy/ runs it: the examples hand off on its socket.
    handoffSocket = path.join(await tempDir('nginx-fpm-handoff-'), 'handoff.sock')
    sidecar = await startTestSidecar({ roots: [uploadRoot], targets: { local: { type: 'file', dir: store } }, extra: { handoff: { listen: [`unix:${handoffSocket}`] } } })
  })
  afterAll(() => sidecar?.stop({ graceMs: 0 }))

  it('upload.php answers 202, status.php reaches succeeded, download.php is served by nginx from /v1/stream', async () => {
    const web = await startWeb(readmeLocation())
    try {
      await roundTrip(web)
    } finally {
      await web.stop()
    }
  })

  it('upload.php takes several files in "files[]", hands them over in one call, and each job succeeds', async () => {
    const web = await startWeb(readmeLocation())
    try {
      const contents = [randomBytes(1000), randomBytes(70 * 1024 + 3), randomBytes(5)]
      const form = new FormData()
      contents.forEach((bytes, i) => form.append('files[]', new Blob([bytes]), `part ${i}.bin`))
      const up = await fetch(`${web.url}/upload.php`, { method: 'POST', body: form })
      const text = await up.text()
      expect(up.status, text).toBe(202)
      const { jobs } = JSON.parse(text)
      expect(jobs.map((j) => j.name)).toEqual(['part_0.bin', 'part_1.bin', 'part_2.bin'])
      for (const [i, j] of jobs.entries()) {
        expect(j.status_url).toBe(`status.php?id=${encodeURIComponent(j.id)}`)
        const job = await sidecar.scheduler.waitForEnd(j.id, 30_000)
        expect(job.state, JSON.stringify(job)).toBe('succeeded')
        expect(job.remote).toMatch(new RegExp(`^/uploads/\\d{4}-\\d\\d-\\d\\d/[0-9a-f]{16}-part_${i}\\.bin$`))
        expect(Buffer.compare(await fs.readFile(path.join(store, job.remote)), contents[i])).toBe(0)
      }
    } finally {
      await web.stop()
    }
  })

  it('index.php links the upload form, the status page and the download page', async () => {
    const web = await startWeb(readmeLocation())
    try {
      const page = await (await fetch(`${web.url}/`)).text()
      for (const href of ['href="upload.php"', 'action="status.php"', 'action="download.php"']) expect(page).toContain(href)
    } finally {
      await web.stop()
    }
  })

  it('a job the daemon refuses: upload.php answers 500 with its code, and PHP\'s log has the daemon\'s message', async () => {
    const web = await startWeb(readmeLocation(), 'hdfs') // no such target here
    try {
      const form = new FormData()
      form.append('file', new Blob([Buffer.from('x')]), 'x.bin')
      const res = await fetch(`${web.url}/upload.php`, { method: 'POST', body: form })
      expect(res.status).toBe(500)
      expect(await res.json()).toMatchObject({ code: 'UNKNOWN_TARGET' })
      const several = new FormData()
      for (const name of ['a.bin', 'b.bin']) several.append('files[]', new Blob([Buffer.from(name)]), name)
      const refused = await fetch(`${web.url}/upload.php`, { method: 'POST', body: several })
      expect(refused.status).toBe(500)
      expect((await refused.json()).jobs).toEqual([{ name: 'a.bin', code: 'UNKNOWN_TARGET' }, { name: 'b.bin', code: 'UNKNOWN_TARGET' }])
      const logged = await waitFor(async () => (await web.logs('fpm/php-error.log').catch(() => '')).includes('UNKNOWN_TARGET') && web.logs('fpm/php-error.log'))
      expect(logged).toContain('no target named "hdfs" (configured: "local")')
    } finally {
      await web.stop()
    }
  })

  it('deploy/nginx/transfer-sidecar.conf is the README location', async () => {
    const shipped = await fs.readFile(path.join(repo, 'deploy', 'nginx', 'transfer-sidecar.conf'), 'utf8')
    expect(shipped.split('\n').filter((l) => !l.startsWith('#')).join('\n').trim()).toBe(blocks[0].trim())
  })

  // Each break of the snippet must fail the round trip: the checks above can fail.
  // The third column is what the failed check reports (so it fails for the reason named).
  it.each([
    ['without internal;', (s) => s.replace(/^\s*internal;\n/m, ''), /expected 200 to be 404/],
    ['without the header drops', (s) => s.replace(/^\s*proxy_set_header (Origin|Sec-Fetch-Site).*\n/gm, ''), /BROWSER_REFUSED/],
    ['proxying to the wrong path', (s) => s.replace(':/v1/stream/;', ':/v1/jobs/;'), /expected 404 to be 200/]
  ])('a broken snippet fails: %s', async (name, breakIt, failure) => {
    const good = readmeLocation()
    const broken = breakIt(good)
    expect(broken).not.toBe(good)
    const web = await startWeb(broken)
    try {
      await expect(roundTrip(web)).rejects.toThrow(failure)
    } finally {
      await web.stop()
    }
  })
})
