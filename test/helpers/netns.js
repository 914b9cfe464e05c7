// A network namespace of its own, as a container has: a daemon listening on the embedded default
// 127.0.0.1:8765 inside it neither collides with one on this host nor answers this host's clients.
// Needs root (unshare(CLONE_NEWNET)) and iproute2.
import { spawn } from 'node:child_process'
import { printed } from './sidecar.js'

// A process holding the namespace with its loopback up; `argv(cmd)` is [file, args] running cmd
// inside it (nsenter execs cmd: a spawned child is cmd itself).
export async function privateNetwork () {
  const holder = spawn('unshare', ['--net', 'sh', '-c', 'ip link set lo up && echo up && exec sleep 3600'], { stdio: ['ignore', 'pipe', 'pipe'] })
  await printed(holder, 'up', 'unshare --net (needs root and iproute2)')
  return {
    argv: (cmd) => ['nsenter', [`--net=/proc/${holder.pid}/ns/net`, '--', ...cmd]],
    stop: () => holder.kill('SIGKILL')
  }
}
