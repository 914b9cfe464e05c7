// Memory and CPU of another process, read from /proc (Linux only).
import { readFileSync } from 'node:fs'
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

// User + system CPU seconds the process has used so far.
export function cpuSeconds (pid) {
  const text = readFileSync(`/proc/${pid}/stat`, 'latin1')
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  const utime = Number(fields[11])
  const stime = Number(fields[12])
  return (utime + stime) / ticksPerSecond()
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
