// Child processes (httpd, the HDFS JVM, the daemon) must not outlive the benchmark, whether it
// ends normally, throws, or is interrupted. Cleanups run in reverse order of registration.
const tasks = []
const lastResorts = []
let running = null
let interrupted = null

// The signal that interrupted the run, if any: in-flight work then fails as a consequence of
// the cleanup, which is not worth a stack trace.
export const interruptedBy = () => interrupted

export function onCleanup (fn) {
  tasks.push(fn)
}

// Synchronous kill for the 'exit' event, when an awaited stop() never got the chance to run.
export function onExitKill (fn) {
  lastResorts.push(fn)
}

export function cleanup () {
  running ??= (async () => {
    while (tasks.length) {
      const fn = tasks.pop()
      try {
        await fn()
      } catch (err) {
        console.error(`cleanup: ${err.message}`)
      }
    }
  })()
  return running
}

export function installCleanupHandlers () {
  const signals = { SIGINT: 2, SIGTERM: 15, SIGHUP: 1 }
  for (const [signal, number] of Object.entries(signals)) {
    process.once(signal, () => {
      interrupted = signal
      console.error(`\n${signal}: stopping child processes…`)
      cleanup().finally(() => process.exit(128 + number))
    })
  }
  process.on('exit', () => {
    for (const fn of lastResorts) {
      try { fn() } catch { /* already gone */ }
    }
  })
}
