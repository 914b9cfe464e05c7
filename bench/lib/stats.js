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
