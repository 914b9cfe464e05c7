// Summaries of the per-transfer records. The machine drifts by ±30 % over an hour, so the
// headline ratio pairs curl and sidecar within the same run (measured back to back) and takes
// the median of those ratios; the ratio of the medians is kept as a cross-check.

export const MiB = 2 ** 20

export function median (values) {
  const v = values.filter((x) => x !== null && x !== undefined).sort((a, b) => a - b)
  if (v.length === 0) return null
  const mid = v.length >> 1
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2
}

function spread (values) {
  const v = values.filter((x) => x !== null && x !== undefined)
  if (v.length === 0) return null
  return { median: median(v), min: Math.min(...v), max: Math.max(...v) }
}

function maxOf (values) {
  const v = values.filter((x) => x !== null && x !== undefined)
  return v.length ? Math.max(...v) : null
}

// One summary row per target and direction, in the order they were measured.
export function summarize (records) {
  const keys = []
  for (const r of records) {
    const key = `${r.target}/${r.direction}`
    if (!keys.includes(key)) keys.push(key)
  }
  return keys.map((key) => {
    const [target, direction] = key.split('/')
    const rows = records.filter((r) => r.target === target && r.direction === direction)
    const of = (competitor) => rows.filter((r) => r.competitor === competitor)
    const curl = of('curl')
    const sidecar = of('sidecar')
    const pairedRatios = (curlField) => sidecar
      .map((s) => {
        const c = curl.find((x) => x.run === s.run)
        return c && c[curlField] ? s.mibps / c[curlField] : null
      })
      .filter((x) => x !== null)
    const curlMed = median(curl.map((r) => r.mibps))
    const sidecarMed = median(sidecar.map((r) => r.mibps))
    return {
      target,
      direction,
      runs: Math.max(curl.length, sidecar.length),
      curl: curl.length ? { mibps: spread(curl.map((r) => r.mibps)), cpuS: median(curl.map((r) => r.cpuS)), rssMiB: maxOf(curl.map((r) => r.rssMiB)) } : null,
      curlFsync: direction === 'download' && curl.length ? { mibps: spread(curl.map((r) => r.mibpsWithFsync)) } : null,
      sidecar: sidecar.length ? { mibps: spread(sidecar.map((r) => r.mibps)), cpuS: median(sidecar.map((r) => r.cpuS)), peakRssMiB: maxOf(sidecar.map((r) => r.rssMiB)) } : null,
      ratio: median(pairedRatios('mibps')),
      ratioWithFsync: direction === 'download' ? median(pairedRatios('mibpsWithFsync')) : null,
      ratioOfMedians: curlMed && sidecarMed ? sidecarMed / curlMed : null
    }
  })
}
