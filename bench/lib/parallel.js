// Runs fn(0), fn(1) … fn(count - 1), `parallel` of them at a time, and resolves with the wall-clock
// seconds and the CPU (ms, all of this process's threads) they took.
export async function timedParallel (count, parallel, fn) {
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  let next = 0
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < count) await fn(next++)
  }))
  const cpu = process.cpuUsage(cpu0)
  return { seconds: (performance.now() - t0) / 1000, cpuMs: (cpu.user + cpu.system) / 1000 }
}
