// Progress lines with elapsed time and an ETA. The ETA starts from each section's estimate
// (see the estimate functions of the sections) and is corrected by how fast the run has gone so far.

const fmt = (s) => {
  s = Math.max(0, Math.round(s))
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m` : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`
}
export const formatSeconds = fmt

export function createProgress (estimates) {
  const t0 = Date.now()
  const names = Object.keys(estimates)
  let current = null
  let steps = 1
  let done = 0
  let doneEstimate = 0 // estimated seconds of the work finished so far
  const elapsed = () => (Date.now() - t0) / 1000

  const eta = () => {
    const sectionEst = current ? estimates[current] : 0
    const later = names.slice(names.indexOf(current) + 1).reduce((s, n) => s + estimates[n], 0)
    const finished = doneEstimate + sectionEst * (done / steps)
    const scale = finished > 30 ? Math.min(3, Math.max(0.3, elapsed() / finished)) : 1
    return (sectionEst * (1 - done / steps) + later) * scale
  }

  const stamp = () => `[bench ${new Date().toISOString().slice(11, 19)} +${fmt(elapsed())}]`

  return {
    total: names.reduce((s, n) => s + estimates[n], 0),
    elapsed,
    log (msg) {
      console.log(`${stamp()} ${msg}`)
    },
    section (name, stepCount) {
      if (current) doneEstimate += estimates[current]
      current = name
      steps = Math.max(1, stepCount)
      done = 0
      console.log(`${stamp()} == ${name}: ${stepCount} steps, estimated ${fmt(estimates[name])}`)
    },
    step (msg) {
      done = Math.min(steps, done + 1)
      console.log(`${stamp()} ${current} ${done}/${steps} (ETA ${fmt(eta())}) ${msg}`)
    }
  }
}
