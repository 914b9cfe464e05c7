// Server processes started by the harnesses, killed when the test process exits, so that a
// crashing run does not leave servers listening on loopback.
const live = new Set()
let hooked = false

export function killOnExit (child) {
  if (!hooked) {
    hooked = true
    process.on('exit', () => {
      for (const c of live) {
        try { c.kill('SIGKILL') } catch { /* already gone */ }
      }
    })
  }
  live.add(child)
  child.once('exit', () => live.delete(child))
  return child
}
