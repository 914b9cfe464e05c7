// Medians, spreads and ratios. The machine drifts (±30 % over an hour), so a ratio pairs two
// competitors measured back to back in the same run and takes the median of those per-run ratios.

export const MiB = 2 ** 20
export const GiB = 2 ** 30

const present = (values) => values.filter((x) => x !== null && x !== undefined && Number.isFinite(x))

export function median (values) {
  const v = present(values).sort((a, b) => a - b)
  if (v.length === 0) return null
  const mid = v.length >> 1
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2
}

// { median, min, max, n } or null when there is no value.
export function spread (values) {
  const v = present(values)
  if (v.length === 0) return null
  return { median: median(v), min: Math.min(...v), max: Math.max(...v), n: v.length }
}

export function maxOf (values) {
  const v = present(values)
  return v.length ? Math.max(...v) : null
}

/**
 * Median over runs of a[field] / b[bField] where a and b are records of the same run.
 * `as` and `bs` are the records of the two competitors at one point of the matrix.
 */
export function pairedRatio (as, bs, field, bField = field) {
  const ratios = as.map((a) => {
    const b = bs.find((x) => x.run === a.run)
    return b && a[field] && b[bField] ? a[field] / b[bField] : null
  })
  return median(ratios)
}

// How much a ratio moves across sizes: the least-squares line of ratio on log(size), its change
// from the smallest size to the largest, as a fraction of the mean ratio (0.05 = 5 % higher at the
// largest size). Null with fewer than two sizes.
export function fittedChange (points) {
  const p = points.filter((q) => q.size > 0 && Number.isFinite(q.ratio))
  if (p.length < 2) return null
  const xs = p.map((q) => Math.log(q.size))
  const mx = xs.reduce((a, b) => a + b) / p.length
  const my = p.reduce((a, q) => a + q.ratio, 0) / p.length
  let sxy = 0
  let sxx = 0
  for (let i = 0; i < p.length; i++) {
    sxy += (xs[i] - mx) * (p[i].ratio - my)
    sxx += (xs[i] - mx) ** 2
  }
  if (sxx === 0) return null
  return (sxy / sxx) * (Math.max(...xs) - Math.min(...xs)) / my
}

// Distinct values of `key` in order of appearance.
export function distinct (records, key) {
  return [...new Set(records.map((r) => r[key]))]
}

// One row per target, direction, value of `key` (size, concurrency) and competitor, with the
// figures `measure(mine, curl, competitor)` gives from that competitor's runs and curl's runs at
// the same point, then the CPU per GiB and peak RSS every table shows.
export function summarizeBy (records, key, measure) {
  const rows = []
  for (const target of distinct(records, 'target')) {
    for (const direction of distinct(records, 'direction')) {
      for (const value of distinct(records, key)) {
        const at = records.filter((r) => r.target === target && r.direction === direction && r[key] === value)
        const curl = at.filter((r) => r.competitor === 'curl')
        for (const competitor of distinct(at, 'competitor')) {
          const mine = at.filter((r) => r.competitor === competitor)
          rows.push({
            target,
            direction,
            [key]: value,
            competitor,
            runs: mine.length,
            ...measure(mine, curl, competitor),
            cpuSPerGiB: median(mine.map((r) => r.cpuSPerGiB)),
            rssMiB: maxOf(mine.map((r) => r.rssMiB))
          })
        }
      }
    }
  }
  return rows
}
