// Charts of the summaries as SVG: vega-lite specs compiled to vega and rendered headless
// (View.toSVG needs no canvas). One file per figure, next to the JSON and CSV.
import fs from 'node:fs/promises'
import path from 'node:path'
import * as vega from 'vega'
import { compile } from 'vega-lite'
import { isPaced } from './reuse.js'

const WIDTH = 300
const HEIGHT = 200
const CONFIG = { font: 'sans-serif', axis: { labelFontSize: 11, titleFontSize: 12 }, legend: { labelFontSize: 11 } }

export async function renderSvg (spec) {
  const { spec: compiled } = compile({ config: CONFIG, ...spec })
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' })
  try {
    return await view.toSVG()
  } finally {
    view.finalize()
  }
}

// Median line with a min–max bar per point, one panel per target × direction.
function linesWithSpread ({ values, x, xTitle, y, yTitle, color, logX = false, logY = false, title }) {
  const xEnc = { field: x, type: 'quantitative', title: xTitle, scale: logX ? { type: 'log' } : {} }
  const yScale = logY ? { type: 'log' } : { zero: true }
  return {
    title,
    data: { values },
    facet: { row: { field: 'target', type: 'nominal' }, column: { field: 'direction', type: 'nominal' } },
    resolve: { scale: { y: 'independent' } },
    spec: {
      width: WIDTH,
      height: HEIGHT,
      layer: [
        { mark: { type: 'line', point: true }, encoding: { x: xEnc, y: { field: y, type: 'quantitative', title: yTitle, scale: yScale }, color: { field: color, type: 'nominal' } } },
        { mark: { type: 'rule' }, encoding: { x: xEnc, y: { field: 'min', type: 'quantitative', scale: yScale }, y2: { field: 'max' }, color: { field: color, type: 'nominal' } } }
      ]
    }
  }
}

function bars ({ values, category, value, title, xTitle, logX = false, sort }) {
  return {
    title,
    width: WIDTH * 1.5,
    data: { values },
    layer: [
      // A log axis has no zero: the bars then start at 1.
      { mark: 'bar', encoding: { y: { field: category, type: 'nominal', title: null, sort }, x: { field: value, type: 'quantitative', title: xTitle, scale: logX ? { type: 'log' } : {} }, ...(logX ? { x2: { datum: 1 } } : {}) } },
      { mark: { type: 'text', align: 'left', dx: 3 }, encoding: { y: { field: category, type: 'nominal', sort }, x: { field: value, type: 'quantitative' }, text: { field: value, type: 'quantitative', format: ',.0f' } } }
    ]
  }
}

// The figures for whatever sections ran; returns the file names written.
export async function writeCharts (dir, results) {
  const specs = {}
  const tp = results.throughput?.summary
  if (tp?.length) {
    const rows = tp.map((r) => ({ ...r, median: r.mibps.median, min: r.mibps.min, max: r.mibps.max }))
    specs['throughput.svg'] = linesWithSpread({ values: rows, x: 'sizeMiB', xTitle: 'file size (MiB, log)', y: 'median', yTitle: 'MiB/s (median, bar: min–max)', color: 'competitor', logX: true, title: 'Throughput against file size' })
    const rss = tp.map((r) => ({ ...r, median: r.rssMiB, min: r.rssMiB, max: r.rssMiB }))
    specs['rss.svg'] = linesWithSpread({ values: rss, x: 'sizeMiB', xTitle: 'file size (MiB, log)', y: 'median', yTitle: 'peak RSS MiB (log)', color: 'competitor', logX: true, logY: true, title: 'Peak RSS against file size (sidecar: the daemon; PHP: the php process)' })
    const cpu = tp.filter((r) => r.cpuSPerGiB !== null).map((r) => ({ ...r, median: r.cpuSPerGiB, min: r.cpuSPerGiB, max: r.cpuSPerGiB }))
    specs['cpu.svg'] = linesWithSpread({ values: cpu, x: 'sizeMiB', xTitle: 'file size (MiB, log)', y: 'median', yTitle: 'CPU s per GiB', color: 'competitor', logX: true, title: 'CPU seconds per GiB moved' })
  }
  const alloc = results.alloc?.summary
  if (alloc?.length) {
    const rows = alloc.map((r) => ({ ...r, median: r.mibps.median, min: r.mibps.min, max: r.mibps.max }))
    specs['alloc.svg'] = linesWithSpread({ values: rows, x: 'sizeMiB', xTitle: 'file size (MiB)', y: 'median', yTitle: 'MiB/s (log; median, bar: min–max)', color: 'variant', logY: true, title: 'Blocks grown as on Windows: php-curl RETURNTRANSFER falls, the sidecar does not' })
  }
  const conc = results.concurrency?.summary
  if (conc?.length) {
    const rows = conc.map((r) => ({ ...r, median: r.aggMiBps.median, min: r.aggMiBps.min, max: r.aggMiBps.max }))
    specs['concurrency.svg'] = linesWithSpread({ values: rows, x: 'concurrency', xTitle: 'concurrent transfers (log)', y: 'median', yTitle: 'aggregate MiB/s', color: 'competitor', logX: true, title: 'Aggregate throughput against concurrency' })
    const rss = conc.map((r) => ({ ...r, median: r.rssMiB, min: r.rssMiB, max: r.rssMiB }))
    specs['concurrency-rss.svg'] = linesWithSpread({ values: rss, x: 'concurrency', xTitle: 'concurrent transfers (log)', y: 'median', yTitle: 'MiB (daemon peak RSS / sum of curl peaks)', color: 'competitor', logX: true, title: 'Memory against concurrency' })
  }
  const ho = results.handoff?.records
  if (ho?.length) {
    const labelled = ho.map((r) => ({ ...r, variant: r.mode ? `${r.variant} (${r.mode})` : r.variant }))
    specs['handoff.svg'] = bars({ values: labelled, category: 'variant', value: 'medianUs', xTitle: 'µs per call, median (log)', logX: true, title: 'Hand-off from PHP: time per call', sort: null })
    specs['handoff-cpu.svg'] = bars({ values: labelled, category: 'variant', value: 'totalCpuUsPerUpload', xTitle: 'CPU µs per upload, all processes (log)', logX: true, title: 'CPU per handed-off upload, transfer included', sort: null })
  }
  const burst = results.burst?.records
  if (burst?.length) {
    const rows = burst.map((r) => ({ client: r.mode ? `${r.variant} (${r.mode})` : r.variant, ackedPerSecond: r.ackedPerSecond }))
    specs['burst.svg'] = bars({ values: rows, category: 'client', value: 'ackedPerSecond', xTitle: 'acked hand-offs/s', title: `${burst[0].clients} PHP processes handing off at once`, sort: null })
  }
  const web = results.web?.records
  if (web?.length) {
    specs['web.svg'] = bars({ values: web.map((r) => ({ ...r, label: `${r.page}${r.thread ? ' (thread)' : ''} ${r.rttMs ? `${r.rttMs} ms RTT` : 'loopback'}` })), category: 'label', value: 'requestsPerSecond', xTitle: 'requests/s', title: 'PHP endpoint under wrk: hand off vs upload directly', sort: null })
  }
  const reuse = results.reuse?.summary
  if (reuse?.length) {
    const rows = reuse.filter((r) => !isPaced(r.variant)).map((r) => ({ variant: r.mode ? `${r.variant} (${r.mode})` : r.variant, filesPerSecond: r.filesPerSecond.median }))
    specs['reuse.svg'] = bars({ values: rows, category: 'variant', value: 'filesPerSecond', xTitle: 'files/s (median)', title: `${reuse[0].files} small files to httpd`, sort: null })
  }
  const written = []
  for (const [name, spec] of Object.entries(specs)) {
    await fs.writeFile(path.join(dir, name), await renderSvg(spec))
    written.push(name)
  }
  return written
}
