// WebHDFS backend: two-step CREATE and OPEN (namenode → datanode), atomic publish by RENAME.
// RemoteException bodies become coded errors that keep the Java exception class.
import {
  RemoteNotFoundError, RemoteExistsError, PermissionDeniedError, RemoteRejectedError, RemoteUnavailableError,
  NetworkError, TimeoutError, toSidecarError
} from '../errors.js'
import { send, putStream, readSmall, readJson, firstLine, encodePath } from './http-util.js'

const NOT_FOUND = new Set(['FileNotFoundException'])
const EXISTS = new Set(['FileAlreadyExistsException'])
const DENIED = new Set(['AccessControlException', 'SecurityException', 'AuthorizationException'])
const RETRYABLE = new Set(['StandbyException', 'RetriableException', 'SafeModeException', 'ConnectException',
  'ObserverRetryOnActiveException', 'NotReplicatedYetException'])

export function remoteExceptionError (status, text) {
  let re = null
  try {
    re = JSON.parse(text).RemoteException ?? null
  } catch {}
  if (!re) {
    const message = `HTTP ${status}: ${firstLine(text) || 'no body'}`
    if (status >= 500) return new RemoteUnavailableError(message, { details: { status } })
    if (status === 404) return new RemoteNotFoundError(message, { details: { status } })
    if (status === 401 || status === 403) return new PermissionDeniedError(message, { details: { status } })
    return new RemoteRejectedError(message, { details: { status } })
  }
  const details = { status, exception: re.exception, javaClassName: re.javaClassName }
  const message = `${re.exception}: ${firstLine(re.message)}`
  if (NOT_FOUND.has(re.exception)) return new RemoteNotFoundError(message, { details })
  if (EXISTS.has(re.exception)) return new RemoteExistsError(message, { details })
  if (DENIED.has(re.exception)) return new PermissionDeniedError(message, { details })
  if (RETRYABLE.has(re.exception) || status >= 500) return new RemoteUnavailableError(message, { details })
  return new RemoteRejectedError(message, { details })
}

async function failed (res) {
  return remoteExceptionError(res.statusCode, await readSmall(res.body))
}

export function createWebHdfsBackend (target, { dispatcher }) {
  const { namenodes, user, base } = target
  const idleMs = target.timeouts?.idleMs
  let active = 0 // index of the namenode that answered last; tried first next time

  const full = (remote) => base === '/' ? remote : base + remote

  function namenodeUrl (i, remote, op, params) {
    const url = new URL(`${namenodes[i]}/webhdfs/v1${encodePath(full(remote))}`)
    url.searchParams.set('op', op)
    if (user) url.searchParams.set('user.name', user)
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, String(v))
    return url
  }

  // Asks the namenodes in turn, starting with the last active one, moving on when one is down or standby.
  async function namenode (method, remote, op, params, signal) {
    let lastError
    for (let k = 0; k < namenodes.length; k++) {
      const i = (active + k) % namenodes.length
      let res
      try {
        res = await send(namenodeUrl(i, remote, op, params), { method, dispatcher, signal })
      } catch (err) {
        lastError = toSidecarError(err)
        if (lastError instanceof NetworkError || lastError instanceof TimeoutError) continue
        throw lastError
      }
      if (res.statusCode < 400) {
        active = i
        return res
      }
      lastError = await failed(res)
      if (lastError.details?.exception !== 'StandbyException') throw lastError
    }
    throw lastError
  }

  // Step one of CREATE/OPEN: where the datanode is. noredirect=true gives JSON; a 307 also works.
  async function locate (method, remote, op, params, signal) {
    const res = await namenode(method, remote, op, { ...params, noredirect: true }, signal)
    if (res.statusCode === 307 || res.statusCode === 302) {
      await res.body.dump()
      return res.headers.location
    }
    const json = await readJson(res)
    if (!json.Location) throw new RemoteRejectedError(`${op}: namenode answered without a Location`)
    return json.Location
  }

  return {
    type: 'webhdfs',

    async stat (remote, { signal } = {}) {
      let res
      try {
        res = await namenode('GET', remote, 'GETFILESTATUS', {}, signal)
      } catch (err) {
        if (err instanceof RemoteNotFoundError) return null
        throw err
      }
      const { FileStatus: s } = await readJson(res)
      return { size: s.length, type: s.type === 'DIRECTORY' ? 'dir' : 'file' }
    },

    async openRead (remote, { offset = 0, length, signal } = {}) {
      const params = {}
      if (offset) params.offset = offset
      if (length !== undefined) params.length = length
      const location = await locate('GET', remote, 'OPEN', params, signal)
      const res = await send(location, { dispatcher, signal })
      if (res.statusCode !== 200) throw await failed(res)
      const received = res.headers['content-length']
      return { stream: res.body, size: length !== undefined || received === undefined ? null : offset + Number(received) }
    },

    // The returned stream is the body of the PUT to the datanode; `done` settles with its answer.
    async openWrite (remote, { size, signal } = {}) {
      const location = await locate('PUT', remote, 'CREATE', { overwrite: true }, signal)
      const headers = { 'content-type': 'application/octet-stream' }
      if (size !== undefined) headers['content-length'] = String(size)
      const put = putStream(location, { headers, signal, idleMs })
      const done = put.done.then(async (res) => {
        if (res.statusCode !== 201 && res.statusCode !== 200) throw await failed(res)
        res.body.resume()
      })
      done.catch((err) => put.stream.destroy(err))
      return { stream: put.stream, done }
    },

    async publish (tmp, remote, { overwrite, signal } = {}) {
      const res = await namenode('PUT', tmp, 'RENAME', {
        destination: full(remote),
        renameoptions: overwrite ? 'OVERWRITE' : 'NONE'
      }, signal)
      const text = await readSmall(res.body)
      // rename2 answers an empty 200; the old rename answers {"boolean": false} when it did nothing.
      if (/"boolean"\s*:\s*false/.test(text)) throw new RemoteExistsError(`RENAME to ${remote} was refused`)
    },

    async remove (remote, { signal } = {}) {
      const res = await namenode('DELETE', remote, 'DELETE', { recursive: false }, signal)
      await res.body.dump()
    },

    async close () {}
  }
}
