// Memory and CPU of another process, read from /proc (Linux only).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { execFileSync } from 'node:child_process'

let clockTicks = null
function ticksPerSecond () {
  if (clockTicks === null) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
    } catch {
      clockTicks = 100
    }
  }
  return clockTicks
}

// A "VmXxx:   1234 kB" field of /proc/PID/status, in KiB; null when the process is gone.
export function statusKiB (pid, field) {
  let text
  try {
    text = readFileSync(`/proc/${pid}/status`, 'latin1')
  } catch {
    return null
  }
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)
  return m ? Number(m[1]) : null
}

// User and system CPU seconds of a /proc/…/stat line.
function statCpu (text) {
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  return { user: Number(fields[11]) / ticksPerSecond(), sys: Number(fields[12]) / ticksPerSecond() }
}

// User + system CPU seconds the process has used so far.
export function cpuSeconds (pid) {
  const { user, sys } = statCpu(readFileSync(`/proc/${pid}/stat`, 'latin1'))
  return user + sys
}

// Samples VmRSS every `intervalMs` until stop(); stop() returns the peak in KiB and the count.
export function sampleRss (pid, intervalMs = 20) {
  let peakKiB = 0
  let samples = 0
  const take = () => {
    const kib = statusKiB(pid, 'VmRSS')
    if (kib !== null) {
      peakKiB = Math.max(peakKiB, kib)
      samples++
    }
  }
  take()
  const timer = setInterval(take, intervalMs)
  return {
    stop () {
      clearInterval(timer)
      take()
      return { peakKiB, samples }
    }
  }
}

// Peak RSS of a process over an interval. The kernel's own high-water mark (VmHWM) is exact; it is
// reset at the start by writing 5 to /proc/PID/clear_refs (Linux ≥ 4.0, needs the right to
// ptrace the process). When that is not allowed the peak of 20 ms VmRSS samples is used.
export function trackPeakRss (pid) {
  let exact = true
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5')
  } catch {
    exact = false
  }
  const sampler = sampleRss(pid)
  return {
    stop () {
      const sampled = sampler.stop().peakKiB
      const hwm = exact ? statusKiB(pid, 'VmHWM') : null
      return { peakKiB: Math.max(sampled, hwm ?? 0), exact: exact && hwm !== null }
    }
  }
}

// The process and all its descendants, from /proc/PID/task/TID/children.
export function processTree (pid) {
  const pids = [pid]
  for (let i = 0; i < pids.length; i++) {
    let tasks = []
    try {
      tasks = readdirSync(`/proc/${pids[i]}/task`)
    } catch {
      continue
    }
    for (const tid of tasks) {
      try {
        const text = readFileSync(`/proc/${pids[i]}/task/${tid}/children`, 'latin1').trim()
        if (text) pids.push(...text.split(' ').map(Number))
      } catch { /* gone */ }
    }
  }
  return pids
}

// CPU seconds of a process tree (processes that exited in between are not counted).
export function treeCpuSeconds (pid) {
  let sum = 0
  for (const p of processTree(pid)) {
    try {
      sum += cpuSeconds(p)
    } catch { /* gone */ }
  }
  return sum
}

// CPU seconds of each thread of a process so far, summed by thread name (/proc/PID/task/TID/comm:
// "node" for the main thread, "libuv-worker", "V8 DefaultWorke", a worker thread's name…), with
// the main thread (TID = PID) apart as `main` (of which `mainSys` in the kernel). Threads that ended in between are not counted.
export function threadCpuSeconds (pid) {
  const byName = {}
  let main = 0
  let mainSys = 0
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat, comm
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'latin1')
      comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'latin1').trim()
    } catch {
      continue
    }
    const { user, sys } = statCpu(stat)
    if (Number(tid) === pid) {
      main = user + sys
      mainSys = sys
    } else byName[comm] = (byName[comm] ?? 0) + user + sys
  }
  return { main, mainSys, byName }
}

// What `threadCpuSeconds` counted between two readings, per name; threads started in between count whole.
export function threadCpuDelta (before, after) {
  const byName = {}
  for (const [name, s] of Object.entries(after.byName)) byName[name] = s - (before.byName[name] ?? 0)
  return { main: after.main - before.main, mainSys: after.mainSys - before.mainSys, byName }
}
