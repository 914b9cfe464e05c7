// One daemon per state directory. Two would share the journal: the second's start-up compaction
// replaces the file the first keeps appending to, and every job the first acknowledges after that
// is lost at its next restart. The lock is a unix socket in Linux's abstract namespace, named after
// the state directory's real path: binding it fails while another process holds it, and the kernel
// releases it when the holder exits, however it exits (kill -9 included), so no stale lock is ever
// left to clean up. Its scope is the network namespace: two containers with network namespaces of
// their own and one state volume are not kept apart (run one sidecar per volume).
import net from 'node:net'
import fs from 'node:fs/promises'
import crypto from 'node:crypto'

export class StateDirLockedError extends Error {}

// → { release() }; throws StateDirLockedError if another process holds the lock. Elsewhere than
// on Linux (no abstract sockets) nothing is locked.
export async function lockStateDir (stateDir) {
  if (process.platform !== 'linux') return { release: async () => {} }
  const real = await fs.realpath(stateDir)
  const name = '\0transfer-sidecar:' + crypto.createHash('sha256').update(real).digest('hex').slice(0, 40)
  const server = net.createServer((socket) => socket.destroy())
  try {
    await new Promise((resolve, reject) => {
      server.once('error', reject)
      server.listen(name, resolve)
    })
  } catch (err) {
    if (err.code === 'EADDRINUSE') throw new StateDirLockedError(`another transfer-sidecar is running on the state directory ${real}`)
    throw err
  }
  server.unref()
  return { release: () => new Promise((resolve) => server.close(() => resolve())) }
}
