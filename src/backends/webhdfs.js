// WebHDFS backend: two-step CREATE and OPEN (namenode → datanode), atomic publish by RENAME,
// namenode failover (HA), datanode exclusion, and HDFS's own checksum compared end to end.
// RemoteException bodies become coded errors that keep the Java exception class. Nothing that may
// carry a credential reaches a message or a log line: a datanode Location holds `delegation=`.
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import dns from 'node:dns/promises'
import net from 'node:net'
import {
  RemoteNotFoundError, RemoteExistsError, PermissionDeniedError, RemoteRejectedError, RemoteUnavailableError,
  RemoteQuotaExceededError, ChecksumMismatchError, NetworkError, TimeoutError, toSidecarError
} from '../errors.js'
import { createHttpClient, drain, getStream, putStream, readSmall, firstLine, encodePath } from './http-util.js'
import { pooledGet } from './http-get.js'
import { requestSink } from '../datapath.js'
import { createHdfsChecksum, parseFileChecksum } from '../hdfs-checksum.js'

// RemoteException classes by what they mean here (matched on the simple name, `exception`).
const NOT_FOUND = new Set(['FileNotFoundException'])
const EXISTS = new Set(['FileAlreadyExistsException'])
const DENIED = new Set(['AccessControlException', 'SecurityException', 'AuthorizationException', 'AuthenticationException',
  'InvalidToken'])
const QUOTA = new Set(['QuotaExceededException', 'NSQuotaExceededException', 'DSQuotaExceededException',
  'QuotaByStorageTypeExceededException'])
// The namenode asked is not (or not yet) the one to talk to: ask the next one. Also what a
// datanode relays when the namenode named in its Location turned standby under it.
const NAMENODE_STATE = new Set(['StandbyException', 'RetriableException', 'SafeModeException',
  'ObserverRetryOnActiveException'])
// Transient wherever they come from. A datanode answers every IOException with 403, so the status
// alone would make "All datanodes are bad" or a lost connection to the namenode permanent.
const TRANSIENT = new Set(['ConnectException', 'ConnectTimeoutException', 'SocketTimeoutException', 'SocketException',
  'NoRouteToHostException', 'EOFException', 'ClosedChannelException', 'NotReplicatedYetException', 'IOException',
  'LeaseExpiredException', 'AlreadyBeingCreatedException', 'RecoveryInProgressException', 'ReplicaNotFoundException'])
// Seen from a datanode, these mean it could not reach the namenode of its Location.
const NAMENODE_UNREACHABLE = new Set(['ConnectException', 'ConnectTimeoutException', 'NoRouteToHostException'])

const FAILOVER_ROUNDS = 7 // rounds over all namenodes per call; waits 0.1, 0.2 … 3.2 s between them
const FAILOVER_BASE_MS = 100
const DATANODE_TRIES = 3 // OPEN / GETFILECHECKSUM: datanodes asked per call before giving up
const EXCLUDE_MS = 10 * 60 * 1000 // as HDFS's own client (dfs.client.write.exclude.nodes.cache.expiry.interval.millis)
const DATANODE_MAP_MS = 10 * 1000 // how often the datanode address map may be refetched
// What a failed PUT to a datanode blames it for (the rest is ours, or not retryable).
const FROM_DATANODE = new Set(['NETWORK_ERROR', 'TIMEOUT', 'REMOTE_UNAVAILABLE'])
const CRC_TYPES = { 1: 'CRC32', 2: 'CRC32C', CRC32: 'CRC32', CRC32C: 'CRC32C' }

// Removes what must never be shown: `delegation=` parameters and every configured secret.
export function createRedactor (secrets = []) {
  const values = secrets.filter((s) => typeof s === 'string' && s.length >= 4)
  return (text) => {
    let out = String(text ?? '').replace(/(delegation=)[^&\s"'<>]*/gi, '$1[redacted]')
    for (const v of values) out = out.split(v).join('[redacted]')
    return out
  }
}

// A failed WebHDFS answer → a coded error. The class decides before the status: a datanode's 403
// StandbyException is retryable, a 500 AccessControlException is not.
export function remoteExceptionError (status, text, redact = createRedactor()) {
  let re = null
  try {
    re = JSON.parse(text).RemoteException ?? null
  } catch {}
  if (!re || typeof re.exception !== 'string') {
    const message = firstLine(`HTTP ${status}: ${redact(text) || 'no body'}`)
    const details = { status }
    if (status >= 500 || status === 408 || status === 429) return new RemoteUnavailableError(message, { details })
    if (status === 404) return new RemoteNotFoundError(message, { details })
    if (status === 401 || status === 403) return new PermissionDeniedError(message, { details })
    return new RemoteRejectedError(message, { details })
  }
  // Redacted before it is cut: a secret cut in two would no longer be found.
  const details = { status, exception: firstLine(redact(re.exception), 200) }
  if (typeof re.javaClassName === 'string') details.javaClassName = firstLine(redact(re.javaClassName), 200)
  const message = firstLine(`${redact(re.exception)}: ${redact(re.message)}`)
  const name = re.exception
  if (NOT_FOUND.has(name)) return new RemoteNotFoundError(message, { details })
  if (EXISTS.has(name)) return new RemoteExistsError(message, { details })
  if (DENIED.has(name)) return new PermissionDeniedError(message, { details })
  if (QUOTA.has(name)) return new RemoteQuotaExceededError(message, { details })
  if (NAMENODE_STATE.has(name) || TRANSIENT.has(name) || status >= 500) return new RemoteUnavailableError(message, { details })
  return new RemoteRejectedError(message, { details })
}

// Worth asking another namenode: it is standby or not ready, unreachable, or a proxy in front of
// it failed (a 5xx without a Java class).
function namenodeShouldChange (err) {
  if (err instanceof NetworkError || err instanceof TimeoutError) return true
  if (!(err instanceof RemoteUnavailableError)) return false
  return err.details?.exception === undefined || NAMENODE_STATE.has(err.details.exception)
}

// A datanode's error that is about its namenode, not about itself.
function datanodeBlamesNamenode (err) {
  const name = err.details?.exception
  return NAMENODE_STATE.has(name) || NAMENODE_UNREACHABLE.has(name)
}

function isNoDatanodeLeft (err) {
  return err instanceof RemoteUnavailableError && err.details?.exception === 'IOException' && /Failed to find datanode|No active nodes contain this block/i.test(err.message)
}

const silent = { info () {}, warn () {}, debug () {} }

// `promise`, or an AbortError as soon as `signal` aborts.
function untilAborted (promise, signal) {
  if (!signal) return promise
  const abortError = () => signal.reason instanceof Error ? signal.reason : Object.assign(new Error('aborted'), { name: 'AbortError', code: 'ABORT_ERR' })
  if (signal.aborted) return Promise.reject(abortError())
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(abortError())
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

export function createWebHdfsBackend (target, { logger, metrics, clock = Date.now } = {}) {
  const { namenodes, user, base } = target
  const delegation = target.delegation ?? null
  const extraHeaders = target.headers ?? {}
  const idleMs = target.timeouts?.idleMs
  const connectMs = target.timeouts?.connectMs
  // Namenode calls share a keep-alive pool; datanode PUTs and GETs have sockets of their own.
  const client = createHttpClient({ ...target.timeouts, maxSockets: 2 * (target.concurrency ?? 4) })
  const send = client.send
  const redact = createRedactor([delegation, ...Object.values(extraHeaders)])
  const log = logger?.child?.({ target: target.name, backend: 'webhdfs' }) ?? silent
  const namenodeOrigins = new Set(namenodes.map((u) => new URL(u).origin))
  let active = 0 // index of the namenode that answered last; asked first next time
  const excluded = new Map() // datanode "host:httpPort" → until (ms) it is left out of CREATE/OPEN
  let datanodeMap = { at: -Infinity, byHttp: new Map() } // "host:httpPort" → "host:xferPort"
  let serverDefaults // promise of GETSERVERDEFAULTS (null when the cluster does not answer it)

  const full = (remote) => base === '/' ? remote : base + remote
  const headersFor = (url) => namenodeOrigins.has(url.origin) ? { ...extraHeaders } : {}

  function namenodeUrl (i, hdfsPath, op, params) {
    const url = new URL(`${namenodes[i]}/webhdfs/v1${encodePath(hdfsPath)}`)
    url.searchParams.set('op', op)
    if (user) url.searchParams.set('user.name', user)
    if (delegation) url.searchParams.set('delegation', delegation)
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, String(v))
    return url
  }

  function useNamenode (i, why) {
    if (i === active) return
    log.warn({ from: namenodes[active], to: namenodes[i], why }, 'namenode failover')
    metrics?.failover?.(target.name)
    active = i
  }

  // A datanode said the namenode of its Location is standby or unreachable: start elsewhere.
  function leaveNamenode (i, why) {
    if (namenodes.length > 1 && i === active) useNamenode((i + 1) % namenodes.length, why)
  }

  // Asks the namenodes in turn, starting with the last active one. A standby, a namenode that is
  // not ready, or one that cannot be reached sends us to the next; after a full round we back off.
  async function namenode (method, hdfsPath, op, params, signal) {
    let lastError
    for (let round = 0; round < FAILOVER_ROUNDS; round++) {
      if (round) await sleep(FAILOVER_BASE_MS * 2 ** (round - 1), undefined, { signal })
      const first = active
      for (let k = 0; k < namenodes.length; k++) {
        const i = (first + k) % namenodes.length
        const url = namenodeUrl(i, hdfsPath, op, params)
        let res
        try {
          res = await send(url, { method, signal, headers: headersFor(url) })
        } catch (err) {
          lastError = toSidecarError(err)
        }
        if (res && res.statusCode < 400) {
          useNamenode(i, lastError?.code)
          return { res, nn: i }
        }
        if (res) lastError = await failed(res)
        if (signal?.aborted) throw lastError
        if (!namenodeShouldChange(lastError)) {
          if (res) useNamenode(i, 'answered') // an active namenode's "no": ask it first next time
          throw lastError
        }
        log.debug({ namenode: namenodes[i], op, code: lastError.code, exception: lastError.details?.exception }, 'namenode unavailable')
      }
    }
    throw lastError
  }

  async function failed (res) {
    return remoteExceptionError(res.statusCode, await readSmall(res.body), redact)
  }

  // A JSON object; anything else (not JSON, `null`, a list) is the server's fault, not a bug here.
  async function readJson (res, what, limit) {
    const text = await readSmall(res.body, limit)
    let value
    try {
      value = JSON.parse(text)
    } catch {}
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new RemoteRejectedError(`${what}: expected a JSON object, got ${JSON.stringify(firstLine(redact(text), 200))}`)
    }
    return value
  }

  // The map from a datanode's HTTP address (what a Location names) to its transfer address (what
  // `excludedatanodes` wants), from the namenode's JMX LiveNodes.
  async function transferAddress (httpAddr, signal) {
    if (!datanodeMap.byHttp.has(httpAddr) && clock() - datanodeMap.at > DATANODE_MAP_MS) {
      datanodeMap = { at: clock(), byHttp: datanodeMap.byHttp }
      try {
        const url = new URL(`${namenodes[active]}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo`)
        const res = await send(url, { signal, headers: headersFor(url) })
        if (res.statusCode !== 200) throw await failed(res)
        // ~1 KiB a datanode: more than the 64 KiB of an error body on a cluster of a hundred.
        const live = JSON.parse((await readJson(res, 'NameNodeInfo', 8 << 20)).beans?.[0]?.LiveNodes ?? '{}')
        const byHttp = new Map()
        for (const [xfer, node] of Object.entries(live)) if (node?.infoAddr) byHttp.set(node.infoAddr, node.xferaddr ?? xfer)
        datanodeMap = { at: clock(), byHttp }
      } catch (err) {
        if (signal?.aborted) throw err
        log.debug({ code: toSidecarError(err).code }, 'no datanode list from the namenode; excluding datanodes by host')
      }
    }
    const known = datanodeMap.byHttp.get(httpAddr)
    if (known) return known
    // A Location names the datanode by its host name; HDFS keys its datanodes by IP address (the
    // JMX list and `excludedatanodes` alike): a name is resolved, or the exclusion does nothing.
    const at = httpAddr.lastIndexOf(':')
    const host = httpAddr.slice(0, at).replace(/^\[(.*)\]$/, '$1')
    let ip = host
    if (!net.isIP(host)) ip = await dns.lookup(host).then((a) => a.address, () => host)
    const port = httpAddr.slice(at + 1)
    // Without the map, the host alone (right on real clusters: one datanode per host).
    return datanodeMap.byHttp.get(net.isIPv6(ip) ? `[${ip}]:${port}` : `${ip}:${port}`) ?? ip
  }

  // Keyed by host and port, the port written out: a Location on its scheme's default port has
  // none in `host`, and transferAddress splits at the last ":".
  function excludeDatanode (location, why) {
    const httpAddr = `${location.hostname}:${location.port || (location.protocol === 'https:' ? 443 : 80)}`
    log.warn({ datanode: httpAddr, why }, 'datanode excluded')
    excluded.set(httpAddr, clock() + EXCLUDE_MS)
  }

  async function excludedDatanodes (signal) {
    const now = clock()
    const out = []
    for (const [httpAddr, until] of excluded) {
      if (until < now) excluded.delete(httpAddr)
      else out.push(await transferAddress(httpAddr, signal))
    }
    return out.join(',')
  }

  // Step one of CREATE/OPEN/GETFILECHECKSUM: which datanode, leaving out those that failed us.
  async function locate (method, remote, op, params, signal) {
    const exclude = await excludedDatanodes(signal)
    const ask = (extra) => namenode(method, full(remote), op, { ...params, noredirect: true, ...extra }, signal)
    let answer
    try {
      answer = await ask(exclude ? { excludedatanodes: exclude } : {})
    } catch (err) {
      if (!exclude || !isNoDatanodeLeft(err)) throw err
      excluded.clear() // every datanode is excluded: better one that failed once than none
      answer = await ask({})
    }
    const { res, nn } = answer
    let location
    // 307, as a namenode redirects (a 302, say a gateway's login page, is not a datanode).
    if (res.statusCode === 307) {
      await drain(res.body)
      location = res.headers.location
    } else if (res.statusCode === 200) {
      location = (await readJson(res, op)).Location
    } else {
      await drain(res.body)
      throw new RemoteRejectedError(`${op}: the namenode answered HTTP ${res.statusCode}, not a datanode's Location`)
    }
    let url = null
    try {
      url = new URL(location)
    } catch {}
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) throw new RemoteRejectedError(`${op}: the namenode answered without a usable datanode Location`)
    // The file's bytes and the delegation token in the Location stay on TLS once the namenode is.
    if (namenodes[nn].startsWith('https:') && url.protocol !== 'https:') throw new RemoteRejectedError(`${op}: the namenode (https) redirected to a datanode over plain http; refused`)
    return { location: url, nn }
  }

  // After a datanode step failed: blame the namenode it relays, or the datanode itself.
  function noteDatanodeFailure (err, location, nn) {
    if (datanodeBlamesNamenode(err)) leaveNamenode(nn, err.details.exception)
    else excludeDatanode(location, err.details?.exception ?? err.code)
  }

  // GET on a datanode (OPEN, GETFILECHECKSUM): a retryable failure excludes it (or leaves the
  // namenode it relays) and asks again at once.
  // With a `pool` (plain http) the body is read straight into the transfer's pool buffers.
  async function datanodeGet (remote, op, params, signal, pool) {
    for (let tries = 1; ; tries++) {
      const { location, nn } = await locate('GET', remote, op, params, signal)
      let err
      try {
        const get = pool && new URL(location).protocol === 'http:' ? pooledGet : getStream
        const res = await get(location, { signal, idleMs, connectMs, headers: headersFor(location), pool, zeroCopy: (status) => status === 200 })
        if (res.statusCode === 200) return res
        err = await failed(res)
      } catch (thrown) {
        err = toSidecarError(thrown)
      }
      if (signal?.aborted || !err.retryable || tries >= DATANODE_TRIES) throw err
      noteDatanodeFailure(err, location, nn)
    }
  }

  async function fileStatus (remote, signal) {
    let res
    try {
      ({ res } = await namenode('GET', full(remote), 'GETFILESTATUS', {}, signal))
    } catch (err) {
      if (err instanceof RemoteNotFoundError) return null
      throw err
    }
    const s = (await readJson(res, 'GETFILESTATUS'))?.FileStatus
    // A gateway's empty or foreign JSON is the server's fault, not a bug here (INTERNAL).
    if (s === null || typeof s !== 'object' || Array.isArray(s) || !Number.isSafeInteger(s.length)) throw new RemoteRejectedError(`GETFILESTATUS ${remote}: no FileStatus with a length in the answer`)
    return {
      size: s.length,
      type: s.type === 'DIRECTORY' ? 'dir' : 'file',
      // fileId is the inode: it changes when the file is replaced, even by one of the same size.
      version: `${s.fileId}:${s.length}:${s.modificationTime}`,
      blockSize: s.blockSize,
      // HDFS checksums cover what it stores: ciphertext in an encryption zone, cells of an
      // erasure-coded block group. Neither compares with the plain bytes we streamed.
      plainBlocks: !s.encBit && !s.ecBit && !s.ecPolicy
    }
  }

  // Asked once for every job of the target, so under no job's signal: a job cancelled meanwhile
  // stops waiting, and neither the others nor the answer kept for later see its cancel.
  function getServerDefaults (signal) {
    if (!serverDefaults) {
      serverDefaults = namenode('GET', '/', 'GETSERVERDEFAULTS', {})
        .then(({ res }) => readJson(res, 'GETSERVERDEFAULTS'))
        .then((json) => json.FsServerDefaults ?? null, (thrown) => {
          const err = toSidecarError(thrown)
          // Asked again next time after a transient failure, or a refusal (a token that expired):
          // only a cluster that cannot answer it keeps the comparison off.
          if (err.retryable || err.code === 'PERMISSION_DENIED') serverDefaults = undefined
          if (err.retryable) throw err
          log.warn({ code: err.code, exception: err.details?.exception }, 'the cluster does not answer GETSERVERDEFAULTS; HDFS checksums are not compared')
          return null
        })
      serverDefaults.catch(() => {}) // each caller gets the error; none waiting is no crash
    }
    return untilAborted(serverDefaults, signal)
  }

  async function fileChecksum (remote, { signal, status } = {}) {
    const st = status ?? await fileStatus(remote, signal)
    if (st && !st.plainBlocks) return null
    const res = await datanodeGet(remote, 'GETFILECHECKSUM', {}, signal)
    return parseFileChecksum((await readJson(res, 'GETFILECHECKSUM')).FileChecksum) ?? { algorithm: null }
  }

  function compareChecksum (remote, ours, theirs) {
    if (theirs === null) return null
    if (theirs.algorithm !== ours.algorithm) {
      log.warn({ remote, ours: ours.algorithm, theirs: theirs.algorithm }, 'HDFS checksum not comparable; not verified')
      return null
    }
    if (theirs.bytes !== ours.bytes.slice(0, 56)) {
      throw new ChecksumMismatchError(`${target.name}:${remote}: HDFS checksum differs from the bytes streamed (${theirs.algorithm})`,
        { details: { algorithm: theirs.algorithm, expected: ours.bytes.slice(0, 56), actual: theirs.bytes } })
    }
    return { algorithm: theirs.algorithm, bytes: theirs.bytes }
  }

  return {
    type: 'webhdfs',
    tempSuffix: target.tempSuffix,

    async stat (remote, { signal } = {}) {
      return fileStatus(remote, signal)
    },

    // `status`: the remote's stat() when the caller just got it (null: it does not exist).
    async openRead (remote, { offset = 0, length, signal, pool, status } = {}) {
      const st = status !== undefined ? status : await fileStatus(remote, signal)
      if (!st || st.type !== 'file') throw new RemoteNotFoundError(`${remote} is not a file on target ${JSON.stringify(target.name)}`)
      const info = { size: length !== undefined ? null : st.size, version: st.version, offset, blockSize: st.blockSize, status: st }
      // OPEN past the end answers 403; a download resumed at its very end has nothing left to read.
      if (offset >= st.size || length === 0) return { ...info, stream: Readable.from([]) }
      const params = { offset, ...(length !== undefined && { length }) }
      const res = await datanodeGet(remote, 'OPEN', params, signal, pool)
      return { ...info, stream: res.body }
    },

    // The returned stream is the body of the PUT to the datanode; `done` settles with its answer.
    // An explicit block size makes the file's checksum predictable (see hdfs-checksum.js).
    async openWrite (remote, { size, signal, blockSize, pool, meter } = {}) {
      const params = { overwrite: true, ...(blockSize && { blocksize: blockSize }) }
      const { location, nn } = await locate('PUT', remote, 'CREATE', params, signal)
      const headers = { ...headersFor(location), 'content-type': 'application/octet-stream' }
      if (size !== undefined) headers['content-length'] = String(size)
      const put = putStream(location, { headers, signal, idleMs, connectMs })
      const done = put.done.then(async (res) => {
        if (res.statusCode !== 201 && res.statusCode !== 200) throw await failed(res)
        drain(res.body, { ms: idleMs }) // not waited for: the upload is done
      }).catch((thrown) => {
        const err = toSidecarError(thrown)
        // Not a failure of ours (the local file changed size, the hashing thread stopped): those
        // cut the request too, and the datanode is not to blame for them.
        if (FROM_DATANODE.has(err.code) && !signal?.aborted) noteDatanodeFailure(err, location, nn)
        throw err
      })
      done.catch((err) => put.stream.destroy(err))
      return { stream: pool ? requestSink(put.stream, { pool, meter }) : put.stream, done }
    },

    async publish (tmp, remote, { overwrite, size, signal } = {}) {
      let res
      try {
        ({ res } = await namenode('PUT', full(tmp), 'RENAME', {
          destination: full(remote),
          renameoptions: overwrite ? 'OVERWRITE' : 'NONE'
        }, signal))
      } catch (err) {
        // A RENAME whose answer was lost (failover, reset) may have been done: the temp name is
        // this job's alone, so "temp gone, destination of our size" means it was.
        if (err instanceof RemoteNotFoundError && size !== undefined && (await fileStatus(remote, signal))?.size === size) return
        throw err
      }
      const text = await readSmall(res.body)
      // rename2 answers an empty 200; the old rename answers {"boolean": true} or, when it did
      // nothing, {"boolean": false}. Anything else (a gateway's redirect or login page, a proxy's
      // 204) is no RENAME done: the job fails, and its temp file is removed, not left.
      if (/"boolean"\s*:\s*false/.test(text)) throw new RemoteExistsError(`RENAME to ${remote} was refused`)
      if (res.statusCode !== 200 || !(text.trim() === '' || /^\{\s*"boolean"\s*:\s*true\s*\}$/.test(text.trim()))) {
        throw new RemoteRejectedError(`RENAME to ${remote}: HTTP ${res.statusCode}, not a WebHDFS answer (${redact(firstLine(text)).slice(0, 100) || 'no body'})`)
      }
    },

    async remove (remote, { signal } = {}) {
      const { res } = await namenode('DELETE', full(remote), 'DELETE', { recursive: false }, signal)
      await drain(res.body)
    },

    // HDFS's checksum of a file of this block size (that of `remote` when given, from its `status`
    // if the caller has it, else the cluster's default), or null when the target has
    // `checksum: false` or the cluster cannot tell its parameters.
    async createChecksum ({ remote, status, blockSize, signal } = {}) {
      if (!target.checksum) return null
      const defaults = await getServerDefaults(signal)
      const crcType = CRC_TYPES[defaults?.checksumType]
      // What a server says is checked: a chunk size of 0 or less would never end a loop.
      const positive = (n) => Number.isSafeInteger(n) && n > 0
      if (!defaults || !crcType || !positive(defaults.bytesPerChecksum)) return null
      if (remote && !blockSize) blockSize = (status !== undefined ? status : await fileStatus(remote, signal))?.blockSize
      if (!positive(blockSize)) blockSize = defaults.blockSize
      // A file written with another chunk size may have a block size that is no multiple of ours;
      // its HDFS checksum is not comparable with one of our chunk size anyway.
      if (!positive(blockSize) || blockSize % defaults.bytesPerChecksum !== 0) return null
      return createHdfsChecksum({ blockSize, bytesPerChecksum: defaults.bytesPerChecksum, crcType })
    },

    // HDFS's checksum of `remote` (GETFILECHECKSUM), {algorithm: null} when it is not one we
    // know, null when the file's blocks do not hold the plain bytes (encryption, erasure coding).
    fileChecksum,

    // Compares HDFS's checksum (from fileChecksum) with ours: {algorithm, bytes}, null when they
    // cannot be compared (another algorithm or chunk size), CHECKSUM_MISMATCH when they differ.
    compareChecksum,

    async verifyChecksum (remote, ours, { signal, status } = {}) {
      return compareChecksum(remote, ours, await fileChecksum(remote, { signal, status }))
    },

    async close () { client.close() }
  }
}
