// Smoke test for the MiniDFSCluster harness, speaking raw WebHDFS with fetch.
//   node test/harness/hdfs.smoke.mjs          single namenode
//   node test/harness/hdfs.smoke.mjs --ha     HA pair: standby errors + failover
//   node test/harness/hdfs.smoke.mjs --all    both
// Exits non-zero on any failure.

import assert from 'node:assert/strict'
import http from 'node:http'
import { startHdfs } from './hdfs.js'

const argv = new Set(process.argv.slice(2))
const runSingle = argv.has('--all') || !argv.has('--ha')
const runHa = argv.has('--all') || argv.has('--ha')

const USER = 'www-data'

function url (nn, p, op, params = {}) {
  const u = new URL(`/webhdfs/v1${p}`, nn)
  u.searchParams.set('op', op)
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, String(v))
  return u
}

async function expectStatus (res, status, what) {
  if (res.status !== status) {
    const body = await res.text().catch(() => '')
    assert.fail(`${what}: expected HTTP ${status}, got ${res.status} ${body}`)
  }
  return res
}

/**
 * PUT/POST a body with node:http. Not fetch: the datanode answers every PUT/POST
 * with an unsolicited "HTTP/1.1 100 Continue" before the real status, which
 * Node 20's fetch (undici) rejects as "SocketError: bad response"; node:http
 * skips it (emitting 'information').
 */
function send (method, location, data) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      location,
      { method, headers: { 'content-type': 'application/octet-stream', 'content-length': data.length } },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8')
          resolve({ status: res.status ?? res.statusCode, headers: res.headers, text: async () => body, arrayBuffer: async () => body })
        })
        res.on('error', reject)
      }
    )
    req.on('error', reject)
    req.end(data)
  })
}

/** Two-step CREATE: namenode 307 -> PUT body to the datanode -> 201. */
async function create (nn, p, data, user = USER) {
  const r1 = await fetch(url(nn, p, 'CREATE', { 'user.name': user, overwrite: 'false' }), {
    method: 'PUT',
    redirect: 'manual',
  })
  await expectStatus(r1, 307, `CREATE step 1 ${p}`)
  const location = r1.headers.get('location')
  assert.ok(location, 'CREATE step 1: no Location header')
  await r1.arrayBuffer()
  const r2 = await send('PUT', location, data)
  return { location, res: r2 }
}

async function open (nn, p, user = USER) {
  const r1 = await fetch(url(nn, p, 'OPEN', { 'user.name': user }), { redirect: 'manual' })
  await expectStatus(r1, 307, `OPEN step 1 ${p}`)
  const location = r1.headers.get('location')
  await r1.arrayBuffer()
  const r2 = await expectStatus(await fetch(location), 200, `OPEN step 2 ${p}`)
  return Buffer.from(await r2.arrayBuffer())
}

async function fileStatus (nn, p, user = USER) {
  const res = await fetch(url(nn, p, 'GETFILESTATUS', { 'user.name': user }))
  const text = await res.text()
  let json = null
  try {
    json = JSON.parse(text)
  } catch {}
  return { status: res.status, text, json }
}

async function expectFile (nn, p, data) {
  const st = await fileStatus(nn, p)
  assert.equal(st.status, 200, `GETFILESTATUS ${p} on ${nn}: ${st.status} ${st.text}`)
  assert.equal(st.json.FileStatus.type, 'FILE')
  assert.equal(st.json.FileStatus.length, data.length)
  assert.equal(st.json.FileStatus.owner, USER)
  const back = await open(nn, p)
  assert.deepEqual(back, data, `OPEN ${p} on ${nn}: content differs`)
}

function expectStandby (st, nn) {
  assert.equal(st.status, 403, `standby ${nn}: expected 403, got ${st.status} ${st.text}`)
  const ex = st.json?.RemoteException
  assert.ok(ex, `standby ${nn}: no RemoteException in ${st.text}`)
  assert.equal(ex.exception, 'StandbyException', st.text)
  assert.equal(ex.javaClassName, 'org.apache.hadoop.ipc.StandbyException', st.text)
}

function log (msg) {
  process.stderr.write(`[smoke] ${msg}\n`)
}

async function withCluster (opts, fn) {
  const t0 = Date.now()
  const hdfs = await startHdfs(opts)
  log(`started ${JSON.stringify(opts)} in ${Date.now() - t0} ms (JVM to READY ${hdfs.readyMs} ms): ` +
    JSON.stringify({ namenodes: hdfs.namenodes, datanodes: hdfs.datanodes, rpc: hdfs.rpc, superuser: hdfs.superuser }))
  try {
    await fn(hdfs)
  } catch (err) {
    process.stderr.write(`[smoke] failed; harness stderr tail:\n${hdfs.stderrTail()}\n`)
    throw err
  } finally {
    const t1 = Date.now()
    await hdfs.stop()
    log(`stopped in ${Date.now() - t1} ms`)
  }
}

async function single () {
  await withCluster({ datanodes: 1 }, async (hdfs) => {
    const nn = hdfs.namenodes[0]
    assert.match(nn, /^http:\/\/127\.0\.0\.1:\d+$/)
    assert.equal(hdfs.namenodes.length, 1)
    assert.equal(hdfs.datanodes.length, 1)

    assert.equal(await hdfs.command('mkdir /data www-data 755'), 'OK mkdir /data www-data 755')
    const dir = await fileStatus(nn, '/data')
    assert.equal(dir.status, 200, dir.text)
    assert.equal(dir.json.FileStatus.type, 'DIRECTORY')
    assert.equal(dir.json.FileStatus.owner, USER)
    assert.equal(dir.json.FileStatus.permission, '755')
    const tmp = await fileStatus(nn, '/tmp')
    assert.equal(tmp.json.FileStatus.permission, '1777', tmp.text)

    const data = Buffer.from('hello webhdfs\n')
    const { location, res } = await create(nn, '/data/hello.txt', data)
    await expectStatus(res, 201, 'CREATE step 2')
    await res.arrayBuffer()
    log(`CREATE redirected to ${new URL(location).host}`)
    await expectFile(nn, '/data/hello.txt', data)

    // Another user may not write into /data (755): the 403 comes at step 2.
    const denied = await create(nn, '/data/nope.txt', Buffer.from('x'), 'mallory')
    const deniedBody = await denied.res.text()
    assert.equal(denied.res.status, 403, deniedBody)
    assert.match(deniedBody, /AccessControlException/)

    await assert.rejects(hdfs.command('no-such-command'), /unknown command/)

    // Datanode and namenode restarts keep ports and data.
    await hdfs.command('restart-datanode 0')
    await expectFile(nn, '/data/hello.txt', data)
    let t = Date.now()
    await hdfs.command('restart-namenode 0')
    log(`restart-namenode took ${Date.now() - t} ms`)
    await expectFile(nn, '/data/hello.txt', data)
    t = Date.now()
    await hdfs.command('stop-datanode 0')
    await hdfs.command('restart-datanode 0')
    log(`stop+restart-datanode took ${Date.now() - t} ms`)
    await expectFile(nn, '/data/hello.txt', data)
    const again = await fetch(url(nn, '/data/hello.txt', 'OPEN', { 'user.name': USER }), { redirect: 'manual' })
    await again.arrayBuffer()
    assert.equal(new URL(again.headers.get('location')).host, hdfs.datanodes[0], 'datanode kept its HTTP port')
  })
  log('single: OK')
}

async function ha () {
  await withCluster({ datanodes: 1, ha: true }, async (hdfs) => {
    assert.equal(hdfs.namenodes.length, 2)
    const [nn0, nn1] = hdfs.namenodes
    assert.notEqual(nn0, nn1)

    await hdfs.command('mkdir /data www-data 755')
    const data = Buffer.from('before failover\n')
    const c = await create(nn0, '/data/a.txt', data)
    await expectStatus(c.res, 201, 'CREATE step 2 via nn0')
    await c.res.arrayBuffer()
    log(`HA CREATE redirected to ${c.location}`)
    await expectFile(nn0, '/data/a.txt', data)

    const sb = await fileStatus(nn1, '/data/a.txt')
    expectStandby(sb, nn1)
    log(`standby answer: HTTP ${sb.status} ${sb.text}`)
    // A standby namenode still redirects CREATE (step 1 is 307, like for
    // permission errors); the StandbyException comes from the datanode at
    // step 2, whose DFSClient talks to the namenode named in the redirect.
    const sbCreate = await create(nn1, '/data/b.txt', Buffer.from('x'))
    const sbCreateBody = await sbCreate.res.text()
    log(`standby CREATE: step 1 307 -> ${sbCreate.location}; step 2 HTTP ${sbCreate.res.status} ${sbCreateBody}`)

    await hdfs.command('transition-to-standby 0')
    await hdfs.command('transition-to-active 1')

    expectStandby(await fileStatus(nn0, '/data/a.txt'), nn0)
    await expectFile(nn1, '/data/a.txt', data)
    const data2 = Buffer.from('after failover\n')
    const c2 = await create(nn1, '/data/b.txt', data2)
    await expectStatus(c2.res, 201, 'CREATE step 2 via nn1')
    await c2.res.arrayBuffer()
    await expectFile(nn1, '/data/b.txt', data2)

    // mkdir goes to whichever namenode is active.
    await hdfs.command('mkdir /data2 www-data 700')
    const d2 = await fileStatus(nn1, '/data2')
    assert.equal(d2.json.FileStatus.permission, '700', d2.text)

    // A stopped namenode refuses connections; restarted (same port) it comes
    // back as standby while the other stays active.
    await hdfs.command('shutdown-namenode 0')
    await assert.rejects(fetch(url(nn0, '/data', 'GETFILESTATUS')), /fetch failed/)
    await hdfs.command('restart-namenode 0')
    expectStandby(await fileStatus(nn0, '/data/a.txt'), nn0)
    await expectFile(nn1, '/data/b.txt', data2)

    // Out-of-range index.
    await assert.rejects(hdfs.command('transition-to-active 2'), /no namenode 2/)
  })
  log('ha: OK')
}

try {
  if (runSingle) await single()
  if (runHa) await ha()
  log('all OK')
} catch (err) {
  process.stderr.write(`[smoke] FAILED: ${err.stack || err}\n`)
  process.exitCode = 1
}
