// The README is part of the interface: every error code and config key must be documented there,
// and every code documented must exist.
import { describe, it, expect } from 'vitest'
import fs from 'node:fs'
import { execFileSync } from 'node:child_process'
import { API_ERROR_CODES, JOB_ERROR_CODES } from '../src/errors.js'
import { DEFAULTS } from '../src/config.js'
import { createMetrics } from '../src/metrics.js'
import { PRODUCTION_FLAGS } from './reliability/daemon.js'

const readme = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8')
const section = (title) => readme.slice(readme.indexOf(title), readme.indexOf('\n## ', readme.indexOf(title) + 1))
const codesIn = (text) => [...text.matchAll(/^\| ((?:`[A-Z0-9_]+`(?:, )?)+) \|/gm)].flatMap((m) => m[1].match(/[A-Z0-9_]+/g))

describe('README', () => {
  it('documents exactly the error codes the code has', () => {
    const documented = new Set(codesIn(section('### Error codes')))
    expect([...documented].sort()).toEqual([...new Set([...API_ERROR_CODES, ...JOB_ERROR_CODES])].sort())
  })

  it('gives each job error code the HTTP status the code answers with', async () => {
    const errors = await import('../src/errors.js')
    const status = Object.fromEntries(Object.values(errors).filter((e) => typeof e === 'function' && e.code).map((e) => [e.code, e.statusCode]))
    const rows = [...section('### Error codes').matchAll(/^\| ((?:`[A-Z0-9_]+`(?:, )?)+) \| (?:yes|no) \| ([0-9, ]+) \|/gm)]
    expect(rows.length).toBeGreaterThan(10)
    for (const [, codes, statuses] of rows) {
      expect(statuses.split(', ').map(Number), codes).toEqual(codes.match(/[A-Z0-9_]+/g).map((c) => status[c]))
    }
  })

  it('documents every config key', () => {
    const table = section('## Configuration')
    const keys = ['listen', 'stateDir', 'roots', 'token', 'socketMode', 'socketGroup', 'shutdownGraceMs', 'logLevel', 'targets',
      ...Object.keys(DEFAULTS.queue).map((k) => `queue.${k}`), ...Object.keys(DEFAULTS.retry).map((k) => `retry.${k}`),
      ...Object.keys(DEFAULTS.timeouts).map((k) => `timeouts.${k}`),
      'spool.dir', 'spool.intervalMs', 'journal.sync', 'journal.syncIntervalMs', 'handoff.listen', 'callbacks.allow', 'callbacks.secret', 'callbacks.attempts', 'callbacks.timeoutMs',
      'webhdfs.namenodes', 'webhdfs.user', 'webhdfs.base', 'webhdfs.delegation', 'webhdfs.headers', 'webhdfs.checksum',
      'http.url', 'http.atomic', 'http.atomicPut', 'file.dir', 'targets.*.concurrency', 'targets.*.tempSuffix']
    for (const key of keys) expect(table, key).toContain(`\`${key}\``)
  })

  it('documents every sidecar_* metric with exactly its labels', async () => {
    const rows = [...section('### Metrics').matchAll(/^\| `(sidecar_\w+)` \| (\w+) \| ([^|]*) \|/gm)]
    const documented = Object.fromEntries(rows.map((m) => [m[1], { type: m[2], labels: [...m[3].replace(/\([^)]*\)/g, '').matchAll(/`(\w+)`/g)].map((l) => l[1]).sort() }]))
    const { registry } = createMetrics({ collectDefault: false })
    const live = Object.fromEntries(registry.getMetricsAsArray().map((m) => [m.name, { type: m.type, labels: [...m.labelNames].sort() }]))
    expect(documented).toEqual(live)
  })

  it('quick start test command is what .ci/run runs', () => {
    const ci = fs.readFileSync(new URL('../.ci/run', import.meta.url), 'utf8')
    expect(readme).toContain('bash scripts/test-all.sh')
    expect(ci).toContain('bash scripts/test-all.sh')
  })

  // The node flags are the bin's shebang's; each other way of starting the daemon spells them again
  // (Docker, systemd and npm run node on the script), and must spell the same.
  it('every way of starting the daemon gives node the flags of the bin\'s shebang', () => {
    const read = (file) => fs.readFileSync(new URL(`../${file}`, import.meta.url), 'utf8')
    const flags = PRODUCTION_FLAGS.join(' ')
    expect(flags).toMatch(/^--/)
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(read('Dockerfile'))[1])
    expect(entrypoint.join(' ')).toBe(`node ${flags} bin/transfer-sidecar.js`)
    expect(read('deploy/systemd/transfer-sidecar.service')).toMatch(new RegExp(`^ExecStart=/usr/bin/node ${flags} /opt/transfer-sidecar/bin/transfer-sidecar\\.js$`, 'm'))
    expect(JSON.parse(read('package.json')).scripts.start).toBe(`bash scripts/node.sh ${flags} bin/transfer-sidecar.js`)
  })

  it('--help names every flag the CLI accepts', () => {
    const help = execFileSync(process.execPath, [new URL('../bin/transfer-sidecar.js', import.meta.url).pathname, '--help'], { encoding: 'utf8' })
    for (const flag of ['--config', '--check-config', '--help', '--version', 'SIDECAR_CONFIG', 'STATE_DIRECTORY']) expect(help).toContain(flag)
  })
})
