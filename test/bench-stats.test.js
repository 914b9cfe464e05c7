// The bench's statistics that decide issue #19's verdicts (bench/lib/stats.js).
import { describe, expect, it } from 'vitest'
import { fittedChange, pairedRatio } from '../bench/lib/stats.js'

describe('fittedChange: the slope of a ratio across sizes', () => {
  const sizes = [10, 100, 500, 1000, 1500]

  it('is 0 for a flat ratio and null with fewer than two sizes', () => {
    expect(fittedChange(sizes.map((size) => ({ size, ratio: 0.97 })))).toBeCloseTo(0, 12)
    expect(fittedChange([{ size: 10, ratio: 1 }])).toBeNull()
    expect(fittedChange([{ size: 10, ratio: 1 }, { size: 10, ratio: 2 }])).toBeNull() // one size twice: no line
  })

  it('gives the change of a line on log size from the smallest size to the largest, over the mean', () => {
    // ratio = 1 + 0.1 × log10(size / 10): 1.0 at 10 MiB, 1.0 + 0.1 × log10(150) at 1,500 MiB
    const points = sizes.map((size) => ({ size, ratio: 1 + 0.1 * Math.log10(size / 10) }))
    const mean = points.reduce((a, p) => a + p.ratio, 0) / points.length
    expect(fittedChange(points)).toBeCloseTo(0.1 * Math.log10(150) / mean, 12)
    expect(fittedChange(points.map((p) => ({ ...p, ratio: 2 - p.ratio })))).toBeLessThan(0)
  })

  it('leaves out points without a ratio', () => {
    const points = [{ size: 10, ratio: 1 }, { size: 100, ratio: null }, { size: 1000, ratio: 1.1 }]
    expect(fittedChange(points)).toBeCloseTo(0.1 / 1.05, 12)
  })
})

describe('pairedRatio', () => {
  it('is the median of the ratios of the same runs', () => {
    const a = [{ run: 1, mibps: 100 }, { run: 2, mibps: 90 }, { run: 3, mibps: 300 }]
    const b = [{ run: 1, mibps: 100 }, { run: 2, mibps: 100 }, { run: 3, mibps: 100 }]
    expect(pairedRatio(a, b, 'mibps')).toBe(1)
  })
})
