// Metrics, dashboard, alerts and deploy files. The end-to-end part starts a real Prometheus that
// scrapes a real daemon on loopback, runs real uploads and downloads through the sidecar and
// through php-curl (php-client's DirectCurl, reporting to /v1/observations) against the real
// httpd and MiniDFSCluster, then evaluates every PromQL expression of the Grafana dashboard.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import http from 'node:http'
import net from 'node:net'
import { execFile, spawnSync } from 'node:child_process'
import { promisify } from 'node:util'
import { request } from 'undici'
import { startHttpd } from './harness/httpd.js'
import { startHdfs } from './harness/hdfs.js'
import { startPrometheus } from './harness/prometheus.js'
import { startTestSidecar, tempDir, waitFor, spoolJob } from './helpers/sidecar.js'
import { makeFile } from './helpers/files.js'
import promClient from 'prom-client'
import { client as metricsClient, createMetrics, sizeClass, SIZE_CLASSES } from '../src/metrics.js'
import { validateConfig } from '../src/index.js'

const run = promisify(execFile)
const KiB = 1024
const MiB = 1 << 20
const repo = (p) => new URL(`../${p}`, import.meta.url).pathname
const readRepo = (p) => readFileSync(repo(p), 'utf8')
const PROMTOOL = process.env.PROMTOOL_BIN || '/usr/bin/promtool'
const DASHBOARD = JSON.parse(readRepo('deploy/grafana/transfer-sidecar.json'))
const DS_REF = { type: 'prometheus', uid: '${DS_PROMETHEUS}' } // eslint-disable-line no-template-curly-in-string

function promtool (args, input) {
  const r = spawnSync(PROMTOOL, args, { input, encoding: 'utf8', cwd: repo('deploy/prometheus') })
  if (r.error) throw r.error
  return { code: r.status, out: `${r.stdout}${r.stderr}` }
}

// Panels (rows included, and panels nested in collapsed rows) and their queries.
const allPanels = (panels = DASHBOARD.panels) => panels.flatMap((p) => [p, ...allPanels(p.panels ?? [])])
const queryPanels = allPanels().filter((p) => p.type !== 'row')
const exprs = queryPanels.flatMap((p) => p.targets.map((t) => ({ panel: p.title, refId: t.refId, expr: t.expr, legend: t.legendFormat })))

// Metric names a PromQL expression selects (identifiers followed by `{`).
const selectedMetrics = (expr) => [...expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{/g)].map((m) => m[1])

// Names a registry exports, histogram series included.
async function exportedNames (registry) {
  const names = new Set(['up'])
  for (const m of await registry.getMetricsAsJSON()) {
    names.add(m.name)
    if (m.type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(m.name + s)
  }
  return names
}

// Dashboard expressions made concrete for one short test: Grafana's interval variables become a
// window covering the test, $instance a regex matching the test's instance only.
function concrete (expr, { window, instance }) {
  const re = instance.replaceAll('.', '\\\\.')
  const out = expr
    .replaceAll('$__rate_interval', window)
    .replaceAll('$__range', window)
    .replaceAll('$__interval', '1s')
    .replaceAll('${instance:regex}', re) // eslint-disable-line no-template-curly-in-string
    .replaceAll('${instance}', re) // eslint-disable-line no-template-curly-in-string
    .replaceAll('$instance', re)
  if (out.includes('$')) throw new Error(`unsubstituted variable in ${expr}`)
  return out
}

// Samples of an instant query's answer; "data" is at least one sample, every one a number.
async function evaluate (prom, expr) {
  const data = await prom.query(expr)
  const samples = data.resultType === 'vector'
    ? data.result.map((r) => ({ labels: r.metric, value: Number(r.value[1]) }))
    : data.resultType === 'scalar' ? [{ labels: {}, value: Number(data.result[1]) }] : []
  const problem = samples.length === 0
    ? 'no data'
    : samples.some((s) => !Number.isFinite(s.value)) ? `non-finite values: ${JSON.stringify(samples.filter((s) => !Number.isFinite(s.value)))}` : null
  return { samples, problem }
}

const legendOf = (legend, labels) => (legend && legend !== '__auto' ? legend.replace(/\{\{\s*(\w+)\s*\}\}/g, (m, l) => labels[l] ?? '') : JSON.stringify(labels))

describe('src/metrics.js', () => {
  it("uses prom-client's own classes, loaded from their files without the package's index", () => {
    expect(metricsClient.Registry).toBe(promClient.Registry)
    expect(metricsClient.Counter).toBe(promClient.Counter)
    expect(metricsClient.Gauge).toBe(promClient.Gauge)
    expect(metricsClient.Histogram).toBe(promClient.Histogram)
    expect(metricsClient.collectDefaultMetrics).toBe(promClient.collectDefaultMetrics)
  })

  it('puts sizes in a handful of classes', () => {
    expect(SIZE_CLASSES.map(([, name]) => name)).toEqual(['lt_1MiB', '1_10MiB', '10_100MiB', '100MiB_1GiB', 'ge_1GiB'])
    expect([0, MiB - 1, MiB, 10 * MiB - 1, 10 * MiB, 1024 * MiB - 1, 1024 * MiB, 2 ** 50].map(sizeClass))
      .toEqual(['lt_1MiB', 'lt_1MiB', '1_10MiB', '1_10MiB', '10_100MiB', '100MiB_1GiB', 'ge_1GiB', 'ge_1GiB'])
  })

  it('exports counters with known labels at 0 before any event, failovers included', async () => {
    const m = createMetrics({ collectDefault: false })
    const text = await m.registry.metrics()
    expect(text).toMatch(/^sidecar_namenode_failovers_total 0$/m)
    expect(text).toMatch(/^sidecar_jobs_finished_total\{state="failed"\} 0$/m)
    expect(text).toMatch(/^sidecar_spool_files_total\{outcome="ingested"\} 0$/m)
    expect(text).toMatch(/^sidecar_callbacks_total\{outcome="failed"\} 0$/m)
    expect(text).toMatch(/^sidecar_queue_jobs\{state="queued"\} 0$/m)
    expect(text).toMatch(/^sidecar_spool_oldest_file_age_seconds 0$/m)
    m.failover('hdfs')
    m.failover('hdfs')
    expect(await m.registry.metrics()).toMatch(/^sidecar_namenode_failovers_total 2$/m)
  })

  it('exports the sidecar transfer counters of the configured backends at 0, so that the first failures after a start count', async () => {
    // A series that first appears at 3 has increase() 0 over that first sample: three jobs failing
    // together after a (re)start would be invisible to TransferSidecarFailureRatioHigh.
    const m = createMetrics({ collectDefault: false, backends: ['webhdfs', 'http', 'webhdfs'] })
    const text = await m.registry.metrics()
    for (const backend of ['webhdfs', 'http']) {
      for (const direction of ['upload', 'download']) {
        for (const outcome of ['succeeded', 'failed', 'cancelled']) {
          expect(text).toMatch(new RegExp(`^sidecar_transfers_total\\{direction="${direction}",backend="${backend}",via="sidecar",mode="streamed",outcome="${outcome}"\\} 0$`, 'm'))
        }
      }
    }
    expect(text).not.toMatch(/backend="file"/)
    expect(text).not.toMatch(/via="php_curl"/)
    m.transferDone({ direction: 'upload', bytes: 1 }, 'http', 'failed', 0.01, 'TIMEOUT')
    expect(await m.registry.metrics()).toMatch(/^sidecar_transfers_total\{direction="upload",backend="http",via="sidecar",mode="streamed",outcome="failed"\} 1$/m)
  })

  it('a started daemon exports the transfer counters of its targets at 0', async () => {
    const sc = await startTestSidecar({ roots: [], targets: { local: { type: 'file', dir: await tempDir('metrics-init-') } } })
    try {
      const text = await sc.metrics.registry.metrics()
      expect(text).toMatch(/^sidecar_transfers_total\{direction="download",backend="file",via="sidecar",mode="streamed",outcome="failed"\} 0$/m)
    } finally {
      await sc.stop({ graceMs: 0 })
    }
  })

  it('measures the spool backlog: pending files, rejected files, age of the oldest', async () => {
    const dir = await tempDir('metrics-spool-')
    await fs.mkdir(path.join(dir, 'rejected'))
    await fs.writeFile(path.join(dir, 'job-00000001.json'), '{}')
    await fs.writeFile(path.join(dir, 'job-00000002.json'), '{}')
    await fs.writeFile(path.join(dir, '.job-00000003.json.tmp'), '{}') // a temp file is not pending
    await fs.writeFile(path.join(dir, 'rejected', 'bad-00000001.json'), '{}')
    await fs.writeFile(path.join(dir, 'rejected', 'bad-00000001.json.error.json'), '{}')
    const old = new Date(Date.now() - 120_000)
    await fs.utimes(path.join(dir, 'job-00000001.json'), old, old)
    const m = createMetrics({ collectDefault: false, spoolDir: () => dir })
    const text = await m.registry.metrics()
    expect(text).toMatch(/^sidecar_spool_pending_files 2$/m)
    expect(text).toMatch(/^sidecar_spool_rejected_files 1$/m)
    const age = Number(text.match(/^sidecar_spool_oldest_file_age_seconds (\S+)$/m)[1])
    expect(age).toBeGreaterThan(119)
    expect(age).toBeLessThan(180)
    await fs.rm(dir, { recursive: true })
  })

  it('passes promtool check metrics, default metrics included', async () => {
    const m = createMetrics()
    m.transferDone({ direction: 'upload', bytes: 5 * MiB }, 'webhdfs', 'succeeded', 0.05)
    m.phpTransfer({ direction: 'download', backend: 'http', mode: 'buffered', outcome: 'succeeded', bytes: 3 * MiB, seconds: 0.01, peakMemoryBytes: 8 * MiB })
    const r = promtool(['check', 'metrics'], await m.registry.metrics())
    expect(r.out).toBe('')
    expect(r.code).toBe(0)
  })

  it('times what the last attempt moved: the rest of a resumed download; nothing for a finished publish', async () => {
    const m = createMetrics({ collectDefault: false })
    // 100 MiB resumed at 75 MiB: 25 MiB in 0.5 s is 50 MiB/s, not 200.
    m.transferDone({ direction: 'download', bytes: 100 * MiB }, 'http', 'succeeded', 0.5, undefined, 25 * MiB)
    // Only its publish after a restart: no duration nor throughput (both would be the publish's).
    m.transferDone({ direction: 'download', bytes: 100 * MiB }, 'http', 'succeeded', 0.002, undefined, 0)
    const text = await m.registry.metrics()
    const labels = 'direction="download",backend="http",via="sidecar",mode="streamed"'
    expect(text).toMatch(new RegExp(`^sidecar_transfer_throughput_bytes_per_second_sum\\{${labels},size_class="[^"]+"\\} ${50 * MiB}$`, 'm'))
    expect(text).toMatch(new RegExp(`^sidecar_transfer_throughput_bytes_per_second_count\\{${labels},size_class="[^"]+"\\} 1$`, 'm'))
    expect(text).toMatch(new RegExp(`^sidecar_transfer_duration_seconds_count\\{${labels},size_class="[^"]+"\\} 1$`, 'm'))
    expect(text).toMatch(new RegExp(`^sidecar_transfers_total\\{${labels},outcome="succeeded"\\} 2$`, 'm'))
    expect(text).toMatch(new RegExp(`^sidecar_transfer_bytes_total\\{${labels}\\} ${200 * MiB}$`, 'm'))
  })

  it('uses only bounded label names', async () => {
    const m = createMetrics()
    m.transferDone({ direction: 'upload', bytes: 1 }, 'file', 'failed', 0.01, 'LOCAL_IO')
    m.retry({}, 'http', 'TIMEOUT')
    m.phpHandoff({ transport: 'unix', acked: true, seconds: 0.0001 })
    m.streamBytes('http', 10)
    const bounded = new Set(['direction', 'backend', 'via', 'mode', 'outcome', 'size_class', 'state', 'code', 'transport', 'acked', 'le',
      // prom-client's default metrics
      'type', 'space', 'kind', 'version', 'major', 'minor', 'patch'])
    const names = new Set((await m.registry.getMetricsAsJSON()).flatMap((x) => x.values.flatMap((v) => Object.keys(v.labels))))
    expect([...names].filter((n) => !bounded.has(n))).toEqual([])
  })
})

describe('deploy/prometheus', () => {
  const alerts = readRepo('deploy/prometheus/alerts.yml')
  const alertNames = [...alerts.matchAll(/^\s+- alert: (\w+)$/gm)].map((m) => m[1])

  it('promtool check rules accepts alerts.yml', () => {
    const r = promtool(['check', 'rules', 'alerts.yml'])
    expect(r.out).toContain(`SUCCESS: ${alertNames.length} rules found`)
    expect(r.code).toBe(0)
  })

  it('promtool check config accepts prometheus.yml (and the rule file it loads)', () => {
    const r = promtool(['check', 'config', 'prometheus.yml'])
    expect(r.out).toContain('SUCCESS')
    expect(r.code).toBe(0)
  })

  it('every alert is unit-tested and the unit tests pass (promtool test rules)', () => {
    const tests = readRepo('deploy/prometheus/alerts.test.yml')
    expect(alertNames).toEqual(expect.arrayContaining(['TransferSidecarDown', 'TransferSidecarFailureRatioHigh', 'TransferSidecarQueueGrowing', 'TransferSidecarSpoolNotDraining']))
    for (const name of alertNames) expect(tests, name).toContain(`alertname: ${name}`)
    const r = promtool(['test', 'rules', 'alerts.test.yml'])
    expect(r.out).toContain('SUCCESS')
    expect(r.code).toBe(0)
  })

  it('alerts have a severity, a summary and a description, and name only exported metrics', async () => {
    const blocks = alerts.split(/^\s+- alert: /m).slice(1)
    expect(blocks).toHaveLength(alertNames.length)
    for (const b of blocks) {
      expect(b, b).toMatch(/severity: (critical|warning)/)
      expect(b, b).toMatch(/summary: /)
      expect(b, b).toMatch(/description: /)
    }
    const names = await exportedNames(createMetrics().registry)
    const used = [...alerts.matchAll(/\b((?:sidecar|process|nodejs)_[a-z0-9_]+|up)\{/g)].map((m) => m[1])
    expect(used.length).toBeGreaterThan(5)
    expect(used.filter((n) => !names.has(n))).toEqual([])
  })
})

describe('deploy/grafana/transfer-sidecar.json (structure)', () => {
  it('is importable: a DS_PROMETHEUS datasource input and no fixed datasource uid', () => {
    expect(DASHBOARD.__inputs).toEqual([expect.objectContaining({ name: 'DS_PROMETHEUS', type: 'datasource', pluginId: 'prometheus' })])
    expect(DASHBOARD.__requires.map((r) => r.id)).toEqual(expect.arrayContaining(['grafana', 'prometheus', ...new Set(queryPanels.map((p) => p.type))]))
    expect(DASHBOARD.id).toBeNull()
    expect(DASHBOARD.uid).toMatch(/^[a-z0-9-]{1,40}$/)
    const uids = [...JSON.stringify(DASHBOARD).matchAll(/"uid":"([^"]*)"/g)].map((m) => m[1])
    expect([...new Set(uids)].sort()).toEqual(['${DS_PROMETHEUS}', '-- Grafana --', 'transfer-sidecar'].sort()) // eslint-disable-line no-template-curly-in-string
  })

  it('has unique panel ids and titles, and every panel queries the DS_PROMETHEUS datasource', () => {
    const ids = allPanels().map((p) => p.id)
    expect(ids.every((id) => Number.isInteger(id) && id > 0)).toBe(true)
    expect(new Set(ids).size).toBe(ids.length)
    const titles = queryPanels.map((p) => p.title)
    expect(new Set(titles).size).toBe(titles.length)
    expect(queryPanels.length).toBeGreaterThanOrEqual(20)
    for (const p of queryPanels) {
      expect(p.datasource, p.title).toEqual(DS_REF)
      expect(p.targets.length, p.title).toBeGreaterThan(0)
      expect(new Set(p.targets.map((t) => t.refId)).size, p.title).toBe(p.targets.length)
      for (const t of p.targets) {
        expect(t.datasource, p.title).toEqual(DS_REF)
        expect(t.expr, p.title).toMatch(/\S/)
      }
      expect(p.description, p.title).toMatch(/\S/)
      expect(p.fieldConfig?.defaults?.unit, p.title).toMatch(/\S/)
    }
  })

  it('lays panels out on the 24-column grid without overlaps', () => {
    const cells = new Map()
    for (const p of allPanels()) {
      const { x, y, w, h } = p.gridPos
      expect(x >= 0 && w > 0 && x + w <= 24 && y >= 0 && h > 0, p.title).toBe(true)
      for (let i = x; i < x + w; i++) {
        for (let j = y; j < y + h; j++) {
          expect(cells.get(`${i},${j}`), `${p.title} overlaps`).toBeUndefined()
          cells.set(`${i},${j}`, p.title)
        }
      }
    }
  })

  it('has an instance variable, and every selector is filtered by it', () => {
    const vars = DASHBOARD.templating.list
    expect(vars.map((v) => v.name)).toEqual(['instance'])
    const [v] = vars
    expect(v).toMatchObject({ type: 'query', datasource: DS_REF, multi: true, includeAll: true, allValue: '.*' })
    expect(v.definition).toMatch(/^label_values\(sidecar_[a-z_]+, instance\)$/)
    expect(v.query.query).toBe(v.definition)
    for (const { panel, expr } of exprs) {
      expect(selectedMetrics(expr).length, `${panel}: ${expr}`).toBeGreaterThan(0)
      for (const m of expr.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*\{([^}]*)\}/g)) expect(m[1], `${panel}: ${expr}`).toContain('instance=~"$instance"')
      for (const m of expr.matchAll(/\$\{?(\w+)/g)) expect(['instance', '__rate_interval', '__range', '__interval'], `${panel}: ${expr}`).toContain(m[1])
      expect(expr, panel).not.toMatch(/\[\d+[smhd]\]/) // windows follow the scrape interval and the time range
    }
  })

  it('selects metrics other exporters also have (up, process_*, nodejs_*) only from the transfer-sidecar job', () => {
    // With "All" ($instance = .*) `sum(up{instance=~".*"})` counts every target Prometheus scrapes,
    // and the process panels would show Prometheus, node_exporter, other Node.js apps as "sidecars".
    for (const { panel, expr } of exprs) {
      for (const m of expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}/g)) {
        if (!m[1].startsWith('sidecar_')) expect(m[2], `${panel}: ${expr}`).toContain('job="transfer-sidecar"')
      }
    }
  })

  it('queries only metrics the daemon exports, and covers the issue\'s views', async () => {
    const names = await exportedNames(createMetrics().registry)
    const used = new Set(exprs.flatMap((e) => selectedMetrics(e.expr)))
    expect([...used].filter((n) => !names.has(n))).toEqual([])
    for (const metric of ['sidecar_transfer_throughput_bytes_per_second_bucket', 'sidecar_transfer_duration_seconds_bucket', 'sidecar_transfer_bytes_total',
      'sidecar_queue_jobs', 'sidecar_transfer_failures_total', 'sidecar_transfer_retries_total', 'sidecar_php_handoff_seconds_bucket',
      'sidecar_php_peak_memory_bytes_bucket', 'process_resident_memory_bytes', 'sidecar_namenode_failovers_total', 'sidecar_spool_oldest_file_age_seconds']) {
      expect(used, metric).toContain(metric)
    }
    const duration = exprs.filter((e) => e.expr.includes('sidecar_transfer_duration_seconds_bucket')).map((e) => e.expr.match(/histogram_quantile\(([\d.]+)/)[1])
    expect(new Set(duration)).toEqual(new Set(['0.5', '0.95', '0.99']))
  })
})

describe('deploy/systemd', () => {
  const unit = readRepo('deploy/systemd/transfer-sidecar.service')
  const directive = (key) => [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1])
  const config = JSON.parse(readRepo('deploy/systemd/config.json'))

  it('is a hardened unit: dedicated user, runtime and state directories, strict protection, restart policy', () => {
    expect(directive('User')).toEqual(['transfer-sidecar'])
    expect(directive('RuntimeDirectory')).toEqual(['transfer-sidecar'])
    expect(directive('StateDirectory')).toEqual(['transfer-sidecar'])
    expect(directive('ProtectSystem')).toEqual(['strict'])
    expect(directive('Restart')).toEqual(['on-failure'])
    expect(directive('NoNewPrivileges')).toEqual(['yes'])
    expect(directive('CapabilityBoundingSet')).toEqual([''])
    expect(directive('MemoryDenyWriteExecute')).toEqual([]) // V8's JIT needs W+X pages
    expect(readRepo('deploy/systemd/transfer-sidecar.sysusers')).toMatch(/^u\s+transfer-sidecar\s/m)
  })

  it('passes systemd-analyze verify, with an exposure level of at most 2.0 ("OK")', async () => {
    const dir = await tempDir('systemd-unit-')
    const file = path.join(dir, 'transfer-sidecar.service')
    await fs.writeFile(file, unit
      .replace(/^ExecStart=.*$/m, `ExecStart=${process.execPath} ${repo('bin/transfer-sidecar.js')}`)
      .replace(/^WorkingDirectory=.*$/m, `WorkingDirectory=${repo('.')}`))
    const verify = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' })
    expect(`${verify.stdout}${verify.stderr}`).toBe('')
    expect(verify.status).toBe(0)
    const security = spawnSync('systemd-analyze', ['security', '--offline=true', '--threshold=20', file], { encoding: 'utf8' })
    expect(security.stdout).toMatch(/Overall exposure level for transfer-sidecar.service: [0-2]\.\d OK/)
    expect(security.status).toBe(0)
    await fs.rm(dir, { recursive: true })
  })

  it('agrees with its example config: socket, state, spool and roots are where the unit allows writes', async () => {
    const runtime = `/run/${directive('RuntimeDirectory')[0]}/`
    const socket = config.listen.find((l) => l.startsWith('unix:')).slice(5)
    expect(socket.startsWith(runtime)).toBe(true)
    expect(config.stateDir).toBe(`/var/lib/${directive('StateDirectory')[0]}`)
    const writable = directive('ReadWritePaths').join(' ').split(/\s+/)
    for (const dir of [config.spool.dir, ...config.roots]) expect(writable, dir).toContain(dir)
    expect(readRepo('deploy/systemd/transfer-sidecar.tmpfiles')).toMatch(new RegExp(`^d\\s+${config.spool.dir}\\s+2770\\s+transfer-sidecar\\s+${config.socketGroup}\\s`, 'm'))
    expect(directive('SupplementaryGroups')).toEqual([config.socketGroup])
    // The config itself is valid (its paths moved into a temp dir).
    const base = await tempDir('systemd-config-')
    const moved = JSON.parse(JSON.stringify(config).replace(/"\/(var|run)\//g, `"${base}/$1/`))
    for (const r of moved.roots) await fs.mkdir(r, { recursive: true })
    expect(() => validateConfig({ ...moved, socketGroup: null })).not.toThrow()
    await fs.rm(base, { recursive: true })
  })
})

describe('deploy/kubernetes', () => {
  const yaml = readRepo('deploy/kubernetes/transfer-sidecar.yaml')
  const block = (from, to) => yaml.slice(yaml.indexOf(from), yaml.indexOf(to, yaml.indexOf(from)))
  const mounts = (text) => Object.fromEntries([...text.matchAll(/- name: ([\w-]+)\n\s+mountPath: (\S+)/g)].map((m) => [m[1], m[2]]))
  const sidecar = mounts(block('initContainers:', '      containers:'))
  const php = mounts(block('      containers:', '      volumes:'))
  const config = JSON.parse(yaml.match(/config\.json: \|\n((?: {4}.*\n)+)/)[1])

  it('runs the sidecar beside php-fpm with the socket, spool and files on shared volumes', () => {
    expect(yaml).toMatch(/restartPolicy: Always/)
    const socket = config.listen.find((l) => l.startsWith('unix:')).slice(5)
    expect(sidecar['sidecar-run']).toBe(path.dirname(socket))
    expect(php['sidecar-run']).toBe(path.dirname(socket))
    expect(sidecar['sidecar-spool']).toBe(config.spool.dir)
    expect(php['sidecar-spool']).toBe(config.spool.dir)
    expect(sidecar['sidecar-state']).toBe(config.stateDir)
    for (const root of config.roots) {
      const shared = Object.keys(sidecar).find((k) => sidecar[k] === root)
      expect(shared, root).toBeDefined()
      expect(php[shared], root).toBe(root)
    }
    expect(yaml).toMatch(new RegExp(`fsGroup: ${config.socketGroup} `))
    expect(config.socketMode).toBe('0660')
    expect(yaml).toContain(`value: ${socket}`)
    // The hand-off thread's socket beside it, named to PHP too.
    const handoff = config.handoff.listen[0].slice(5)
    expect(path.dirname(handoff)).toBe(path.dirname(socket))
    expect(yaml).toContain(`value: ${handoff}`)
  })

  it('admits Prometheus to the sidecar port by number: named ports of init containers are not resolved by every CNI', () => {
    // kubernetes/kubernetes#125285, projectcalico/calico#8881: a NetworkPolicy port named after a
    // port of a native sidecar (an init container) matched nothing, so scrapes were dropped.
    const policy = yaml.slice(yaml.indexOf('kind: NetworkPolicy'))
    const tcp = config.listen.find((l) => !l.startsWith('unix:'))
    const port = Number(tcp.slice(tcp.lastIndexOf(':') + 1))
    const monitoring = policy.slice(policy.indexOf('namespaceSelector:'))
    expect(monitoring).toMatch(new RegExp(`ports:\\n\\s+- port: ${port}\\b`))
    const sidecarPorts = [...block('initContainers:', '      containers:').matchAll(/- name: (\w+)\n\s+containerPort: \d+/g)].map((m) => m[1])
    for (const name of sidecarPorts) expect(policy, name).not.toMatch(new RegExp(`port: ${name}\\b`))
  })

  it('keeps the token in a Secret that PHP and Prometheus read, and the example config is valid', async () => {
    expect(yaml.match(/^ {2}token: (\S+)$/m)[1]).toBe(config.token)
    expect(yaml).toMatch(/secretKeyRef:\n\s+name: transfer-sidecar\n\s+key: token/)
    expect(yaml).toMatch(/readOnlyRootFilesystem: true/)
    expect(yaml).toMatch(/drop: \["ALL"\]/)
    const base = await tempDir('k8s-config-')
    const moved = JSON.parse(JSON.stringify(config).replace(/"\/(var|run)\//g, `"${base}/$1/`))
    for (const r of moved.roots) await fs.mkdir(r, { recursive: true })
    expect(() => validateConfig(moved)).not.toThrow()
    await fs.rm(base, { recursive: true })
  })
})

// ---------------------------------------------------------------------------------------------
// End to end: a real Prometheus scraping a real daemon.

const PHP_SCRIPT = String.raw`<?php
declare(strict_types=1);
$cfg = json_decode($argv[1], true, 512, JSON_THROW_ON_ERROR);
spl_autoload_register(static function (string $class) use ($cfg): void {
    $prefix = 'TransferSidecar\\';
    if (str_starts_with($class, $prefix)) {
        $file = $cfg['src'] . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
use TransferSidecar\Client;
use TransferSidecar\DirectCurl;

// Direct php-curl transfers, reported to the daemon (via="php_curl").
$curl = new DirectCurl(new Client(['socket' => $cfg['socket']]));
$transfers = [];
foreach ($cfg['files'] as $i => $file) {
    foreach (['buffered', 'streamed'] as $mode) {
        $name = sprintf('php-r%d-%d-%s.bin', $cfg['round'], $i, $mode);
        $transfers[] = $curl->uploadHttp($cfg['httpUrl'] . $name, $file, $mode);
        $transfers[] = $curl->downloadHttp($cfg['httpUrl'] . $name, $cfg['outDir'] . '/http-' . $name, $mode);
        $transfers[] = $curl->uploadWebHdfs($cfg['namenode'], $cfg['hdfsUser'], $cfg['hdfsDir'] . '/' . $name, $file, $mode, true);
        $transfers[] = $curl->downloadWebHdfs($cfg['namenode'], $cfg['hdfsUser'], $cfg['hdfsDir'] . '/' . $name, $cfg['outDir'] . '/hdfs-' . $name, $mode);
    }
}
// Hand-offs to the sidecar over both transports, each reported (type "handoff").
$jobs = [];
foreach ([['socket' => $cfg['socket']], ['port' => $cfg['port']]] as $k => $options) {
    $client = new Client($options);
    for ($j = 0; $j < 5; $j++) {
        $jobs[] = $client->upload('local', $cfg['files'][0], sprintf('/handoff/r%d-%d-%d.bin', $cfg['round'], $k, $j), ['overwrite' => true]);
        $client->observeLastHandoff();
    }
}
echo json_encode(['transfers' => $transfers, 'jobs' => $jobs]);
`

const SIZES = [200 * KiB, 3 * MiB + 17, 12 * MiB + 5] // lt_1MiB, 1_10MiB, 10_100MiB
const ROUNDS = 2 // counters need an increase inside the rate window: every series moves twice

describe('end to end: Prometheus scraping the daemon', () => {
  let httpd, hdfs, hooks, sc, prom, root, instance, promStarted, scriptFile
  const delivered = []
  const phpResults = []
  const report = []

  async function startHooks () {
    const server = http.createServer(async (req, res) => {
      let body = ''
      for await (const c of req) body += c
      delivered.push(JSON.parse(body).id)
      res.writeHead(204).end()
    })
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    return { url: `http://127.0.0.1:${server.address().port}`, stop: () => new Promise((resolve) => server.close(resolve)) }
  }

  async function closedPort () {
    const srv = net.createServer()
    await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve))
    const { port } = srv.address()
    await new Promise((resolve) => srv.close(resolve))
    return port
  }

  // Waits until Prometheus has scraped what /metrics shows (some counters move just after the
  // client saw the event, e.g. a callback is counted once its answer is read: compare afresh).
  async function scraped () {
    const names = ['sidecar_transfers_total', 'sidecar_php_handoff_seconds_count', 'sidecar_stream_bytes_total', 'sidecar_callbacks_total', 'sidecar_spool_files_total', 'sidecar_jobs_finished_total']
    let last
    const end = Date.now() + 30000
    for (;;) {
      const text = (await sc.api.call('GET', '/metrics')).text
      const local = (name) => [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].reduce((a, m) => a + Number(m[1]), 0)
      last = await Promise.all(names.map(async (name) => {
        const r = await prom.query(`sum(${name}{instance="${instance}"})`)
        return { name, local: local(name), prometheus: Number(r.result[0]?.value[1]) }
      }))
      if (last.every((x) => x.local === x.prometheus)) return
      if (Date.now() > end) throw new Error(`Prometheus did not catch up with /metrics: ${JSON.stringify(last)}`)
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
  }

  async function round (n) {
    const dir = path.join(root, `r${n}`)
    await fs.mkdir(path.join(dir, 'dl'), { recursive: true })
    const files = []
    for (const [i, size] of SIZES.entries()) {
      files.push(path.join(dir, `f${i}.bin`))
      await makeFile(files[i], size, 10 * n + i)
    }
    const ok = async (job) => {
      const done = await sc.api.run(job)
      expect(done.state, JSON.stringify(done)).toBe('succeeded')
      return done
    }
    const fails = async (job, code) => {
      const done = await sc.api.run(job)
      expect(done.state, JSON.stringify(done)).toBe('failed')
      expect(done.error.code).toBe(code)
    }
    // Sidecar transfers: every size up and down, on httpd and on HDFS.
    for (const target of ['files', 'hdfs']) {
      for (const [i, file] of files.entries()) {
        await ok({ direction: 'upload', target, local: file, remote: `/sc/r${n}-${i}.bin`, ...(i === 0 && { callback: `${hooks.url}/hooks/done` }) })
        const back = await ok({ direction: 'download', target, local: path.join(dir, 'dl', `${target}-${i}.bin`), remote: `/sc/r${n}-${i}.bin` })
        expect(back.bytes).toBe(SIZES[i])
      }
    }
    // Failures, one retried.
    await fails({ direction: 'upload', target: 'files', local: files[0], remote: `/sc/r${n}-0.bin` }, 'REMOTE_EXISTS')
    await fails({ direction: 'upload', target: 'hdfs', local: files[0], remote: `/sc/r${n}-0.bin` }, 'REMOTE_EXISTS')
    await fails({ direction: 'download', target: 'hdfs', local: path.join(dir, 'dl', 'missing.bin'), remote: `/sc/missing-${n}.bin` }, 'REMOTE_NOT_FOUND')
    await fails({ direction: 'upload', target: 'dead', local: files[0], remote: `/r${n}.bin` }, 'NETWORK_ERROR')
    // GET /v1/stream from both backends.
    for (const target of ['files', 'hdfs']) {
      const res = await request(`${sc.url}/v1/stream/${target}/sc/r${n}-1.bin`)
      expect(res.statusCode).toBe(200)
      expect((await res.body.arrayBuffer()).byteLength).toBe(SIZES[1])
    }
    // A job through the spool.
    const id = `spooled-job-r${n}`
    await spoolJob(sc.config.spool.dir, { id, direction: 'upload', target: 'local', local: files[1], remote: `/spool/r${n}.bin` })
    await waitFor(async () => (await sc.api.job(id)).json?.state === 'succeeded')
    // php-curl transfers and hand-offs from PHP.
    const input = JSON.stringify({
      src: repo('php-client/src'),
      socket: sc.socket,
      port: Number(new URL(sc.url).port),
      round: n,
      files,
      outDir: path.join(dir, 'dl'),
      httpUrl: `${httpd.uploadUrl}php/`,
      namenode: hdfs.namenodes[0],
      hdfsUser: 'www-data',
      hdfsDir: '/data/php'
    })
    if (n === 1) await request(`${httpd.uploadUrl}php/`, { method: 'MKCOL' }).then((r) => r.body.dump())
    const { stdout } = await run('php', [scriptFile, input], { maxBuffer: 16 * MiB, timeout: 120000 })
    const out = JSON.parse(stdout)
    expect(out.transfers).toHaveLength(SIZES.length * 2 * 4)
    for (const t of out.transfers) expect(t.outcome).toBe('succeeded')
    phpResults.push(...out.transfers)
    for (const job of out.jobs) expect((await sc.api.job(job, 30)).json.state).toBe('succeeded')
    await waitFor(() => delivered.length >= 2 * n)
    await scraped()
  }

  beforeAll(async () => {
    ;[httpd, hdfs, hooks] = await Promise.all([startHttpd(), startHdfs(), startHooks()])
    await hdfs.command('mkdir /data www-data 755')
    root = await tempDir('metrics-root-')
    scriptFile = path.join(root, 'php-transfers.php')
    await fs.writeFile(scriptFile, PHP_SCRIPT)
    sc = await startTestSidecar({
      roots: [root],
      extra: {
        spool: { intervalMs: 100 },
        callbacks: { allow: [`${hooks.url}/hooks/`], secret: 'metrics-callback-secret', attempts: 3, baseDelayMs: 20, maxDelayMs: 50 }
      },
      targets: {
        local: { type: 'file', dir: await tempDir('metrics-store-') },
        files: { type: 'http', url: httpd.uploadUrl },
        hdfs: { type: 'webhdfs', namenodes: hdfs.namenodes, user: 'www-data', base: '/data' },
        dead: { type: 'http', url: `http://127.0.0.1:${await closedPort()}/upload/`, timeouts: { connectMs: 1000, idleMs: 2000 } }
      }
    })
    instance = new URL(sc.url).host
    promStarted = Date.now()
    prom = await startPrometheus({ targets: [instance], scrapeIntervalMs: 500, evaluationIntervalMs: 500, ruleFiles: [repo('deploy/prometheus/alerts.yml')] })
    for (let n = 1; n <= ROUNDS; n++) await round(n)
  })

  afterAll(async () => {
    if (process.env.METRICS_REPORT) await fs.writeFile(process.env.METRICS_REPORT, JSON.stringify({ instance, report, php: phpResults }, null, 2))
    await prom?.stop()
    await sc?.stop({ graceMs: 0 })
    await Promise.all([httpd?.stop(), hdfs?.stop(), hooks?.stop()])
    if (root) await fs.rm(root, { recursive: true, force: true })
  })

  const window = () => `${Math.ceil((Date.now() - promStarted) / 1000) + 5}s`

  it('promtool check metrics accepts the live /metrics after real transfers', async () => {
    const text = (await sc.api.call('GET', '/metrics')).text
    expect(text).toMatch(/via="php_curl"/)
    expect(text).toMatch(/via="sidecar"/)
    const r = promtool(['check', 'metrics'], text)
    expect(r.out).toBe('')
    expect(r.code).toBe(0)
  })

  it('every PromQL expression of the dashboard returns data', async () => {
    const problems = []
    for (const e of exprs) {
      const { samples, problem } = await evaluate(prom, concrete(e.expr, { window: window(), instance }))
      report.push({ panel: e.panel, refId: e.refId, expr: e.expr, values: samples.map((s) => [legendOf(e.legend, s.labels), s.value]) })
      if (problem) problems.push(`${e.panel} [${e.refId}] ${e.expr}: ${problem}`)
    }
    expect(problems).toEqual([])
    expect(report.length).toBe(exprs.length)
  })

  it('shows both via values wherever a panel splits by via, per direction and size class', async () => {
    for (const e of exprs.filter((x) => /by \([^)]*\bvia\b/.test(x.expr))) {
      const { samples } = await evaluate(prom, concrete(e.expr, { window: window(), instance }))
      expect(new Set(samples.map((s) => s.labels.via)), `${e.panel}: ${e.expr}`).toEqual(new Set(['sidecar', 'php_curl']))
    }
    const mean = exprs.find((e) => e.panel.startsWith('Mean throughput by file size'))
    const { samples } = await evaluate(prom, concrete(mean.expr, { window: window(), instance }))
    for (const direction of ['upload', 'download']) {
      for (const size of SIZES) {
        const vias = samples.filter((s) => s.labels.direction === direction && s.labels.size_class === sizeClass(size)).map((s) => s.labels.via)
        expect(new Set(vias), `${direction} ${sizeClass(size)}`).toEqual(new Set(['sidecar', 'php_curl']))
      }
    }
  })

  it('fails on a panel that queries a metric that does not exist', async () => {
    const bogus = 'sum by (via) (rate(sidecar_transfer_bytes_totl{instance=~"$instance"}[$__rate_interval]))'
    const { problem } = await evaluate(prom, concrete(bogus, { window: window(), instance }))
    expect(problem).toBe('no data')
    expect(() => concrete('rate(x{job="$job"}[1m])', { window: '1m', instance })).toThrow(/unsubstituted/)
  })

  it('the instance variable lists the test instance', async () => {
    const [, metric, label] = DASHBOARD.templating.list[0].definition.match(/^label_values\((\w+), (\w+)\)$/)
    const { result } = await prom.query(`group by (${label}) (${metric})`)
    expect(result.map((r) => r.metric[label])).toContain(instance)
  })

  it('loads the alert rules, evaluates them on the live data without errors, and the failure-ratio alert sees the failures', async () => {
    const { groups } = await prom.api('/api/v1/rules')
    const rules = groups.flatMap((g) => g.rules)
    expect(rules.length).toBe([...readRepo('deploy/prometheus/alerts.yml').matchAll(/- alert: /g)].length)
    await waitFor(async () => (await prom.api('/api/v1/rules')).groups.flatMap((g) => g.rules).every((r) => r.health === 'ok'), { timeoutMs: 10000, intervalMs: 200 })
      .catch(async () => { throw new Error(JSON.stringify((await prom.api('/api/v1/rules')).groups)) })
    // 4 of about 26 sidecar jobs per round fail: over 5%.
    const active = await waitFor(async () => {
      const { alerts } = await prom.api('/api/v1/alerts')
      return alerts.some((a) => a.labels.alertname === 'TransferSidecarFailureRatioHigh') && alerts
    }, { timeoutMs: 10000, intervalMs: 200 })
    expect(active.find((a) => a.labels.alertname === 'TransferSidecarFailureRatioHigh').labels.instance).toBe(instance)
    expect(active.filter((a) => a.labels.alertname === 'TransferSidecarDown')).toEqual([])
  })

  it('measured php-curl transfers of every size, mode and backend, and the buffered ones held the file in memory', () => {
    expect(phpResults).toHaveLength(ROUNDS * SIZES.length * 2 * 4)
    const big = phpResults.filter((t) => t.bytes === SIZES[2] && t.direction === 'download')
    const buffered = big.filter((t) => t.mode === 'buffered').map((t) => t.peakMemoryBytes)
    const streamed = big.filter((t) => t.mode === 'streamed').map((t) => t.peakMemoryBytes)
    expect(Math.min(...buffered)).toBeGreaterThan(SIZES[2])
    expect(Math.max(...streamed)).toBeLessThan(SIZES[2])
  })
})
