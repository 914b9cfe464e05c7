// Confinement of caller-given paths: local paths must resolve (symlinks included) inside a root,
// remote paths are normalised and may never climb out of the target's base.
//
// The metadata calls of every hand-off and upload (realpath, stat, open, readlink, fstat, close)
// are made directly on the main thread, as nginx makes its open() and stat(): each is one
// non-blocking system call of 1–3 µs, while the same call sent through libuv's thread pool
// (fs/promises) costs 21–32 µs of CPU here (measured: a thread hand-off and wake-up each way), and
// more under load. A source opened O_NONBLOCK cannot block (see openSource); reading and writing
// file contents still goes through the pool.
import fs from 'node:fs/promises'
import { constants as C, closeSync, fstatSync, fsync, lstatSync, open, openSync, readlinkSync, realpathSync, statSync } from 'node:fs'
import { promisify } from 'node:util'
import path from 'node:path'
import { InvalidPathError, PathNotAllowedError, LocalNotFoundError, LocalIoError } from './errors.js'

const fsyncOnPool = promisify(fsync)
const openAsync = promisify(open)
const MAX_PATH = 4096
const MAX_SYMLINKS = 40 // links followed on one path, as Linux (ELOOP beyond)
const NAME_MAX = 255 // bytes, on every Linux file system
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/

export function isInside (real, roots) {
  return roots.some((root) => real === root || real.startsWith(root.endsWith('/') ? root : root + '/'))
}

export function checkLocalSyntax (local, field = 'local') {
  if (typeof local !== 'string' || local.length === 0) throw new InvalidPathError(`${field} must be a non-empty string`)
  if (local.length > MAX_PATH) throw new InvalidPathError(`${field} is longer than ${MAX_PATH} characters`)
  if (CONTROL.test(local)) throw new InvalidPathError(`${field} must not contain NUL or control characters`)
  if (!local.isWellFormed()) throw new InvalidPathError(`${field} must be valid Unicode (it has a lone surrogate)`)
  if (!path.isAbsolute(local)) throw new InvalidPathError(`${field} must be an absolute path`)
  return path.resolve(local)
}

// A download's destination: a file to create or replace. path.resolve drops a final "/" (and a
// final "." or ".."), so "dir/" would become a file named dir: refused before that.
export function checkDestinationSyntax (local, field = 'local') {
  const abs = checkLocalSyntax(local, field)
  if (abs === '/' || /(^|\/)\.{0,2}$/.test(local)) throw new InvalidPathError(`${field} must name a file, not a directory`)
  return abs
}

export function normalizeRemote (remote, field = 'remote') {
  if (typeof remote !== 'string' || remote.length === 0) throw new InvalidPathError(`${field} must be a non-empty string`)
  if (remote.length > MAX_PATH) throw new InvalidPathError(`${field} is longer than ${MAX_PATH} characters`)
  if (CONTROL.test(remote)) throw new InvalidPathError(`${field} must not contain NUL or control characters`)
  // A lone surrogate has no UTF-8 form: URL encoding of it throws (INTERNAL), the file system mangles it.
  if (!remote.isWellFormed()) throw new InvalidPathError(`${field} must be valid Unicode (it has a lone surrogate)`)
  if (!remote.startsWith('/')) throw new InvalidPathError(`${field} must start with "/"`)
  const segments = remote.split('/').filter((s) => s !== '' && s !== '.')
  if (segments.includes('..')) throw new InvalidPathError(`${field} must not contain ".." segments`)
  if (segments.length === 0) throw new InvalidPathError(`${field} must name a file, not the target's base`)
  return '/' + segments.join('/')
}

function notAllowed (local, roots) {
  const named = roots.length ? roots.slice(0, 10).map((r) => JSON.stringify(r)).join(', ') + (roots.length > 10 ? ', …' : '') : '(none configured)'
  return new PathNotAllowedError(`${local} is not inside a configured root (roots: ${named})`)
}

// The path the kernel actually opened, so a symlink swapped in after our check cannot fool us.
export async function openedPath (handle) {
  return readlinkSync(`/proc/self/fd/${handle.fd}`)
}

// Where `p` leads when it is a symlink whose target does not exist (followed through a chain of
// them); `p` itself otherwise.
function danglingTarget (p) {
  let at = p.replace(/\/+$/, '') || '/'
  for (let hops = 0; hops < MAX_SYMLINKS; hops++) {
    let link
    try {
      if (!lstatSync(at).isSymbolicLink()) return at
      link = readlinkSync(at)
    } catch {
      return at
    }
    at = path.resolve(path.dirname(at), link)
  }
  return at
}

// The deepest directory on the way to `p` that resolves, resolved (or null). A directory on the
// way that is a symlink to a missing one is answered as where it leads.
function realAncestor (p, depth = 0) {
  if (depth > MAX_SYMLINKS) return null
  for (let dir = path.dirname(p.replace(/\/+$/, '')); ; dir = path.dirname(dir)) {
    try {
      return realpathSync.native(dir)
    } catch {}
    const target = danglingTarget(dir)
    if (target !== dir) return realAncestor(target, depth + 1)
    if (dir === '/') return null
  }
}

// `p` resolved. A path that does not resolve is answered as its nearest directory that does: one
// outside every root is PATH_NOT_ALLOWED whatever lies below it, so that the answers do not tell
// a caller which files exist outside the roots (a file there that exists was 403, one that does
// not 422).
function realOrThrow (p, roots) {
  try {
    return realpathSync.native(p)
  } catch (err) {
    // A symlink in a root to a missing file outside is answered as the path it leads to.
    const known = realAncestor(danglingTarget(p))
    if (known === null || !isInside(known, roots)) throw notAllowed(p, roots)
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') throw new LocalNotFoundError(`${p} does not exist`)
    // The caller's path, not our disk: 4xx like the other path errors (not 500 LOCAL_IO).
    if (err.code === 'ENAMETOOLONG') throw new InvalidPathError(`${p} has a name longer than the file system allows`)
    if (err.code === 'ELOOP') throw new PathNotAllowedError(`${p} does not resolve: too many levels of symbolic links`)
    if (err.code === 'EACCES' || err.code === 'EPERM') throw new PathNotAllowedError(`${p}: the sidecar is not permitted to look it up (${err.code})`)
    throw new LocalIoError(`cannot resolve ${p} (${err.code})`)
  }
}

// Upload source: an existing regular file inside a root. Returns its real path. (stat, not open:
// a FIFO is refused without blocking on it.)
export async function resolveSource (local, roots) {
  const abs = checkLocalSyntax(local)
  const real = realOrThrow(abs, roots)
  if (!isInside(real, roots)) throw notAllowed(local, roots)
  let st = null
  try {
    st = statSync(real)
  } catch {}
  if (!st) throw new LocalNotFoundError(`${local} does not exist`)
  if (!st.isFile()) throw new InvalidPathError(`${local} is not a regular file`)
  return real
}

// Download destination: the parent must exist inside a root; the file itself is replaced by rename.
export async function resolveDestination (local, roots) {
  const abs = checkDestinationSyntax(local)
  const name = path.basename(abs)
  if (Buffer.byteLength(name) > NAME_MAX) throw new InvalidPathError(`${local} has a name longer than the file system allows (${NAME_MAX} bytes)`)
  const dir = realOrThrow(path.dirname(abs) + '/', roots) // the slash: ENOTDIR unless a directory
  const real = path.join(dir, name)
  if (!isInside(dir, roots) || !isInside(real, roots)) throw notAllowed(local, roots)
  // Replaced by a rename, which cannot replace a directory (a symlink is replaced, not followed).
  let st = null
  try {
    st = lstatSync(real)
  } catch (err) {
    // A directory it may not search (realpath of the directory itself needs no such right): refused
    // now, as for an upload's source, not a LOCAL_IO failure of the job later.
    if (err.code === 'EACCES' || err.code === 'EPERM') throw new PathNotAllowedError(`${local}: the sidecar is not permitted to look it up (${err.code})`)
  }
  if (st?.isDirectory()) throw new InvalidPathError(`${local} is a directory; local must name a file`)
  return { dir, name, path: real }
}

// An open file or directory: its descriptor and the FileHandle methods the data path uses, its
// fstat and close made on this thread (see the top), its fsync on the pool (it waits for the disk).
export class LocalFile {
  constructor (fd) { this.fd = fd }
  async stat () { return fstatSync(this.fd) }
  sync () { return fsyncOnPool(this.fd) }
  async close () {
    if (this.fd < 0) return
    const fd = this.fd
    this.fd = -1
    closeSync(fd)
  }
}

// A LocalFile opened on the pool: an open that may create a file, or wait for a directory's lock
// while other jobs link and fsync in it, does not stall this thread (a scratch test with the file
// target's opens, links and renames on this thread quadrupled its system time: BENCHMARKS.md).
export async function openOnPool (file, flags, mode) {
  return new LocalFile(await openAsync(file, flags, mode))
}

// Opens an upload source without following a final symlink and re-checks where it really is.
export async function openSource (local, roots) {
  const real = await resolveSource(local, roots)
  // O_NONBLOCK: a FIFO put there would otherwise block the open (and the daemon) for good.
  let handle
  try {
    handle = new LocalFile(openSync(real, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK))
  } catch (err) {
    if (err.code === 'ELOOP') throw notAllowed(local, roots)
    throw err
  }
  try {
    if (!isInside(await openedPath(handle), roots)) throw notAllowed(local, roots)
    const stat = await handle.stat()
    if (!stat.isFile()) throw new InvalidPathError(`${local} is not a regular file`)
    return { handle, size: stat.size, path: real }
  } catch (err) {
    await handle.close()
    throw err
  }
}

// The directory of a download's destination, opened and checked inside the roots. The download's
// files are created, linked and renamed through it (/proc/self/fd/N/name, as the *at() calls
// would), so a directory swapped for a symlink after it was resolved cannot get a file created or
// published outside the roots.
export async function openDestDir (dest, roots) {
  const dir = await fs.open(dest.dir, C.O_RDONLY | C.O_DIRECTORY)
  try {
    if (!isInside(await openedPath(dir), roots)) throw new PathNotAllowedError(`${dest.path} is not inside a configured root`)
    return dir
  } catch (err) {
    await dir.close()
    throw err
  }
}

// `name` in the directory opened as `dir`, whatever its path is now.
export const inDir = (dir, name) => `/proc/self/fd/${dir.fd}/${name}`

// Opens (creating it if needed) the temporary file of a download next to its final name, confined
// like the source, through the destination's directory (openDestDir), which the caller keeps for
// the publish and closes: { handle, dir }. Not truncated: a resumed download keeps what an
// earlier attempt wrote; readable, so that those bytes can be hashed again after a restart.
export async function openTemp (dest, tmpName, roots) {
  const dir = await openDestDir(dest, roots)
  try {
    const handle = await fs.open(inDir(dir, tmpName), C.O_RDWR | C.O_CREAT | C.O_NOFOLLOW, 0o640)
    return { handle, dir }
  } catch (err) {
    await dir.close()
    throw err
  }
}
