// Binding the daemon's sockets, for the API's listeners (listeners.js) and the hand-off thread's.
import net from 'node:net'
import fs from 'node:fs/promises'
import path from 'node:path'

// A stale socket file from a crash is removed; a live one (another sidecar) is an error. Only a
// refused connection means nobody listens: a busy listener (its accept queue full: EAGAIN) or one
// we may not reach is somebody's, and its socket is left alone.
export async function clearStaleSocket (file) {
  try {
    const st = await fs.lstat(file)
    if (!st.isSocket()) throw new Error(`${file} exists and is not a socket`)
  } catch (err) {
    if (err.code === 'ENOENT') return
    throw err
  }
  const refused = await new Promise((resolve) => {
    const s = net.connect(file)
    s.once('connect', () => { s.destroy(); resolve(null) })
    s.once('error', (err) => resolve(err))
  })
  if (refused?.code === 'ENOENT') return // gone meanwhile
  if (refused?.code !== 'ECONNREFUSED') {
    throw new Error(`${file} is in use by another process${refused ? ` (connecting to it: ${refused.code})` : ''}`)
  }
  await fs.unlink(file)
}

// Where the socket at `file` is bound first: <its dir>/.XXXXXX/s (mkdtemp adds six characters).
const bindDirPrefix = (file) => `${path.dirname(file)}/.`
const BOUND_NAME = 's'
export const bindPathBytes = (file) => Buffer.byteLength(bindDirPrefix(file)) + 'XXXXXX/'.length + BOUND_NAME.length

// A unix socket is bound in a directory of its own that only we can enter (mkdtemp: 0700), given
// its group, then its mode, and only then linked under its path: nobody else can connect in
// between, whatever the umask. The umask itself is left alone: it is the process's, and libuv's
// pool threads (the spool, the journal, a job submitted over TCP meanwhile) create files under it
// at any moment. link(), not rename(): a socket somebody put at the path meanwhile is not replaced.
export async function listenPrivately (server, file, config) {
  const dir = await fs.mkdtemp(bindDirPrefix(file)) // beside the socket, hidden
  const bound = path.join(dir, BOUND_NAME)
  try {
    await listen(server, bound)
    try {
      if (config.socketGid !== null) await fs.chown(bound, -1, config.socketGid) // resolved by config.js
      await fs.chmod(bound, config.socketMode)
      await fs.link(bound, file).catch((err) => {
        if (err.code === 'EEXIST') throw new Error(`${file} is in use by another process`)
        throw err
      })
    } catch (err) {
      await new Promise((resolve) => server.close(resolve))
      throw err
    }
  } finally {
    await fs.rm(dir, { recursive: true, force: true })
  }
}

export function listen (server, ...args) {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(...args, () => {
      server.off('error', reject)
      resolve()
    })
  })
}

// Binds `server` to a listen entry of the config (config.js parseListen): a unix socket in its
// directory (made if missing; a stale socket from a crash replaced), or a loopback TCP port.
// Returns the address to log.
export async function bindListener (server, l, config) {
  if (l.type === 'unix') {
    await fs.mkdir(path.dirname(l.path), { recursive: true, mode: 0o755 })
    await clearStaleSocket(l.path)
    await listenPrivately(server, l.path, config)
    return l.path
  }
  await listen(server, l.port, l.host)
  return server.address()
}

// Closes `server` (it stops accepting; resolves once its connections have ended) and removes its
// unix socket file.
export function closeListener (server, l) {
  return new Promise((resolve) => {
    server.close(() => {
      if (l.type === 'unix') fs.unlink(l.path).catch(() => {}).finally(resolve)
      else resolve()
    })
  })
}
