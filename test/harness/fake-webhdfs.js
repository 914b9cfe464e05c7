// A tiny in-memory WebHDFS (namenode and datanode on one port) for tests that need no
// MiniDFSCluster: two-step CREATE/OPEN/GETFILECHECKSUM with noredirect=true, GETFILESTATUS,
// GETSERVERDEFAULTS, RENAME (rename2 semantics), DELETE. Paths are decoded as Jersey does (path:
// percent-decoding; query: form decoding). `opts` tweak answers:
//   defaultsDelayMs      GETSERVERDEFAULTS answers after this long
//   blockSize            what GETFILESTATUS reports as the files' block size
//   checksum(path, data) the FileChecksum JSON to answer (default: none → 400)
//   maxComponentBytes    CREATE refuses a longer name (HDFS max-component-length, 255 by default)
//   statusJson           GETFILESTATUS answers this JSON (200) instead (a misbehaving gateway)
//   datanodePort         the two-step redirects point at this port of 127.0.0.1 instead
//   defaults             the JSON GETSERVERDEFAULTS answers (a misbehaving server)
//   intercept(req, res, { op, onDatanode, path }) answers a request itself when it returns true
import http from 'node:http'

export async function startFakeWebHdfs (opts = {}) {
  const files = new Map() // path → Buffer
  const requests = []
  const maxComponentBytes = opts.maxComponentBytes ?? 255
  const remoteException = (res, status, exception, message) =>
    res.writeHead(status, { 'content-type': 'application/json' })
      .end(JSON.stringify({ RemoteException: { exception, javaClassName: `org.apache.hadoop.${exception}`, message } }))
  const json = (res, obj) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(obj))

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x')
    requests.push(`${req.method} ${req.url}`)
    const onDatanode = url.pathname.startsWith('/dn/')
    const raw = url.pathname.slice(onDatanode ? '/dn/webhdfs/v1'.length : '/webhdfs/v1'.length) || '/'
    const p = raw.split('/').map(decodeURIComponent).join('/')
    const op = url.searchParams.get('op')
    const body = []
    for await (const c of req) body.push(c)
    if (opts.intercept && await opts.intercept(req, res, { op, onDatanode, path: p })) return
    if (!onDatanode && ['CREATE', 'OPEN', 'GETFILECHECKSUM'].includes(op)) {
      const loc = new URL(`http://127.0.0.1:${opts.datanodePort ?? server.address().port}/dn/webhdfs/v1${raw}`)
      loc.search = url.search
      return json(res, { Location: loc.href })
    }
    switch (op) {
      case 'GETSERVERDEFAULTS':
        if (opts.defaultsDelayMs) await new Promise((resolve) => setTimeout(resolve, opts.defaultsDelayMs))
        return json(res, opts.defaults ?? { FsServerDefaults: { blockSize: 1 << 20, bytesPerChecksum: 512, checksumType: 'CRC32C' } })
      case 'GETFILESTATUS': {
        if (opts.statusJson !== undefined) return json(res, opts.statusJson)
        if (!files.has(p)) return remoteException(res, 404, 'FileNotFoundException', `File does not exist: ${p}`)
        const length = files.get(p).length
        return json(res, { FileStatus: { length, type: 'FILE', fileId: 1, modificationTime: 1, blockSize: opts.blockSize ?? 1 << 20 } })
      }
      case 'CREATE': {
        if (p.split('/').some((s) => Buffer.byteLength(s) > maxComponentBytes)) {
          return remoteException(res, 403, 'PathComponentTooLongException', `The maximum path component name limit of ${p} is exceeded`)
        }
        files.set(p, Buffer.concat(body))
        return res.writeHead(201).end()
      }
      case 'OPEN': {
        const data = files.get(p)
        if (!data) return remoteException(res, 404, 'FileNotFoundException', p)
        const offset = Number(url.searchParams.get('offset') ?? 0)
        return res.writeHead(200, { 'content-length': data.length - offset }).end(data.subarray(offset))
      }
      case 'GETFILECHECKSUM': {
        const fc = opts.checksum?.(p, files.get(p))
        if (!fc) return remoteException(res, 400, 'IllegalArgumentException', 'no checksum')
        return json(res, { FileChecksum: fc })
      }
      case 'RENAME': {
        const dst = url.searchParams.get('destination')
        if (!files.has(p)) return remoteException(res, 404, 'FileNotFoundException', `rename source ${p} is not found.`)
        if (files.has(dst) && url.searchParams.get('renameoptions') !== 'OVERWRITE') {
          return remoteException(res, 403, 'FileAlreadyExistsException', `rename destination ${dst} already exists`)
        }
        files.set(dst, files.get(p))
        files.delete(p)
        return res.writeHead(200).end()
      }
      case 'DELETE':
        return json(res, { boolean: files.delete(p) })
      default:
        return remoteException(res, 400, 'IllegalArgumentException', `Invalid value for webhdfs parameter "op": ${op}`)
    }
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    files,
    requests,
    stop: () => new Promise((resolve) => {
      server.closeAllConnections()
      server.close(resolve)
    })
  }
}
