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
