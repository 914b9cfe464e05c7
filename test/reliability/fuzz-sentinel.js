// A sentinel tree outside the daemon's roots and targets: a secret file and a directory (plus
// copies beside each target's base). A snapshot records type, size, mode, mtime, ctime, atime,
// symlink targets and content hashes, so that a comparison after the run tells whether anything
// there was written (content, mtime, ctime, new entries) or even read: each file's atime is set
// before its mtime, and with relatime (the default mount option) the first read moves it.
import fs from 'node:fs/promises'
import { constants as fsConstants } from 'node:fs'
import path from 'node:path'
import crypto from 'node:crypto'

const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex')

// Marks a file as never read since it was written (atime an hour before mtime).
async function backdateAtime (file) {
  const st = await fs.lstat(file)
  await fs.utimes(file, new Date(st.mtimeMs - 3600e3), st.mtime)
}

// Creates `dir` with secret.txt (random, unique content), dir/ (holding note.txt) and an empty
// dir/empty/. Returns the secret's content and sha256.
export async function createSentinel (dir) {
  const secret = `SECRET-${crypto.randomBytes(24).toString('hex')}\n`
  await fs.mkdir(path.join(dir, 'dir', 'empty'), { recursive: true })
  await fs.writeFile(path.join(dir, 'secret.txt'), secret, { mode: 0o644 })
  await fs.writeFile(path.join(dir, 'dir', 'note.txt'), `note beside ${secret}`)
  for (const f of ['secret.txt', 'dir/note.txt']) await backdateAtime(path.join(dir, f))
  return { dir, secret, secretSha: sha256(secret) }
}

// A copy of the secret placed beside a target's base (e.g. next to the file target's dir), so
// that a remote path escaping the base would find it.
export async function plantSecret (file, secret) {
  await fs.writeFile(file, secret, { mode: 0o644 })
  await backdateAtime(file)
}

// Reads without moving the atime (O_NOATIME: we own the files, or are root), so that our own
// hashing does not look like a read by the daemon.
async function readNoAtime (file) {
  const handle = await fs.open(file, fsConstants.O_RDONLY | fsConstants.O_NOATIME)
  try {
    return await handle.readFile()
  } finally {
    await handle.close()
  }
}

// Stats every entry (a directory before it is listed, so that our own readdir does not count),
// then hashes the files; `skip(rel)` leaves out subtrees that legitimately change.
export async function snapshot (root, { skip = () => false } = {}) {
  const entries = new Map()
  async function walk (rel) {
    const abs = path.join(root, rel)
    const st = await fs.lstat(abs)
    const e = { type: st.isDirectory() ? 'dir' : st.isFile() ? 'file' : st.isSymbolicLink() ? 'link' : 'other', mode: st.mode, size: st.size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino, nlink: st.nlink }
    if (e.type === 'file') e.atimeMs = st.atimeMs
    if (e.type === 'link') e.link = await fs.readlink(abs)
    entries.set(rel || '.', e)
    if (e.type === 'dir') {
      for (const name of (await fs.readdir(abs)).sort()) {
        const child = rel ? `${rel}/${name}` : name
        if (!skip(child)) await walk(child)
      }
    }
  }
  await walk('')
  for (const [rel, e] of entries) if (e.type === 'file') e.sha256 = sha256(await readNoAtime(path.join(root, rel)))
  return entries
}

// Differences between two snapshots, as readable lines (empty when nothing changed).
export function diffSnapshots (before, after) {
  const out = []
  for (const [rel, a] of before) {
    const b = after.get(rel)
    if (!b) { out.push(`${rel}: removed`); continue }
    for (const key of Object.keys(a)) if (a[key] !== b[key]) out.push(`${rel}: ${key} ${a[key]} → ${b[key]}`)
  }
  for (const rel of after.keys()) if (!before.has(rel)) out.push(`${rel}: new entry`)
  return out
}

// Every regular file under `dir` whose content hashes to `sha` (e.g. the secret uploaded somewhere).
export async function filesWithSha (dir, sha) {
  const found = []
  async function walk (d) {
    for (const ent of await fs.readdir(d, { withFileTypes: true })) {
      const p = path.join(d, ent.name)
      if (ent.isDirectory()) await walk(p)
      else if (ent.isFile() && sha256(await fs.readFile(p)) === sha) found.push(p)
    }
  }
  await walk(dir)
  return found
}

// Entries under `dir` that are symlinks or resolve outside `dir` (nothing a target may create).
export async function escapesUnder (dir) {
  const bad = []
  const base = await fs.realpath(dir)
  async function walk (d) {
    for (const ent of await fs.readdir(d, { withFileTypes: true })) {
      const p = path.join(d, ent.name)
      if (ent.isSymbolicLink()) bad.push(`${p}: symlink`)
      else if (!(await fs.realpath(p)).startsWith(base + '/')) bad.push(`${p}: outside ${base}`)
      else if (ent.isDirectory()) await walk(p)
    }
  }
  await walk(dir)
  return bad
}
