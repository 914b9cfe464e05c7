// Publishing a finished file under its final name on a local file system, never replacing one
// that is there: link() the temp name to the final one, then unlink() the temp name.
import fs from 'node:fs/promises'

// A crash between link() and unlink() leaves both names on one inode; publishing again then only
// removes the temp name. Any other file under the final name fails with EEXIST.
export async function linkNoReplace (from, to) {
  try {
    await fs.link(from, to)
  } catch (err) {
    if (err.code !== 'EEXIST' || !await sameFile(from, to)) throw err
  }
  await fs.unlink(from)
}

async function sameFile (a, b) {
  const [x, y] = await Promise.all([fs.lstat(a), fs.lstat(b)])
  return x.ino === y.ino && x.dev === y.dev
}
