#!/usr/bin/env -S node --max-semi-space-size=8 --heap-growing-percent=50
// Command line entry: parse flags, load the config, start, stop on SIGTERM/SIGINT.
// --max-semi-space-size=8: a young generation of up to 8 MiB (V8's default is 16). Small jobs in
// flight hold ~100 KB of short-lived objects each; with 1 MiB (this daemon's flag before) most
// of them were still alive at each scavenge and were copied and promoted: 4,000 small uploads took
// 460 scavenges and 510–557 ms of GC pauses, against 65 and 206–227 ms with 8 MiB, and the
// daemon's CPU per job fell to 0.83 × (median of five pairs of runs). It costs ~5 MiB of idle RSS
// and 6–12 MiB at the peak of a large transfer (its CPU unchanged); 16 MiB saved no more GC time.
// --heap-growing-percent=50: a full collection once the old generation has grown by half of what
// was reachable after the last one. V8's own factor let it grow to ~3 ×: 100,000 small jobs peaked
// at 345–346 MiB while they drained against 200–204, 3,000 small uploads to httpd at 147–186 MiB
// against 115–118, for the same CPU a job within the noise (GC pauses +15 % in the drain) and the
// same peak RSS in large transfers (bench/queue-memory.js, bench/job-cpu.js, the concurrency
// section; alternating pairs, 2026-11-26).
import { parseArgs } from 'node:util'
import { readFileSync } from 'node:fs'

// Checked before the daemon's modules load: on an older node they fail later, with a message that
// names some missing function instead (Node 20: "Promise.withResolvers is not a function").
const MIN_NODE = 24
if (Number(process.versions.node.split('.')[0]) < MIN_NODE) {
  console.error(`transfer-sidecar: needs Node.js ${MIN_NODE} or newer (24 or 26, LTS); this is ${process.execPath} ${process.version}`)
  process.exit(2)
}
const { loadConfig, startSidecar, ConfigError } = await import('../src/index.js')
const { describeConfig } = await import('../src/config.js')

const HELP = `transfer-sidecar — takes file transfer jobs from PHP and streams them to WebHDFS, httpd/WebDAV or a local store

Usage: transfer-sidecar [--config FILE] [--check-config] [--help] [--version]

Options:
  -c, --config FILE   JSON config file (default: $SIDECAR_CONFIG; without either, the embedded
                      default: 127.0.0.1:8765 and a unix socket in the state dir, a "local" file target)
      --check-config  validate the config (every mistake, a line each), print it (token hidden) and exit
  -h, --help          show this help
  -v, --version       print the version

Environment:
  SIDECAR_CONFIG      path of the JSON config file
  STATE_DIRECTORY     state dir when the config names none (systemd sets it);
                      otherwise $XDG_STATE_HOME/transfer-sidecar or ~/.local/state/transfer-sidecar

Signals: SIGTERM/SIGINT stop accepting, give running transfers shutdownGraceMs, leave the rest queued.
Docs: README.md (config reference, API, error codes).`

let args
try {
  args = parseArgs({
    options: {
      config: { type: 'string', short: 'c' },
      'check-config': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      version: { type: 'boolean', short: 'v' }
    }
  }).values
} catch (err) {
  console.error(`${err.message}\n\n${HELP}`)
  process.exit(2)
}

if (args.help) {
  console.log(HELP)
  process.exit(0)
}
if (args.version) {
  console.log(JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version)
  process.exit(0)
}

let config
try {
  // An empty --config or SIDECAR_CONFIG (an unset variable, say) is an error, not the embedded default.
  if (args.config === '') throw new ConfigError('--config', 'is empty: give a config file, or leave the option out for the embedded default')
  if (args.config === undefined && process.env.SIDECAR_CONFIG === '') throw new ConfigError('SIDECAR_CONFIG', 'is empty: give a config file, or unset it for the embedded default')
  config = loadConfig({ file: args.config ?? process.env.SIDECAR_CONFIG })
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  console.error(err.message)
  process.exit(2)
}
if (args['check-config']) {
  console.log(JSON.stringify(describeConfig(config), null, 2))
  process.exit(0)
}

let sidecar = null
let stopRequested = false
function stop () {
  sidecar.stop().then(() => process.exit(0), (err) => {
    sidecar.logger.fatal({ err }, 'shutdown failed')
    process.exit(1)
  })
}
// Handled from the start: a signal during it (journal replay, spool scan, listeners) must not kill
// the daemon in the middle of a journal write, as a crash would; the stop follows once the start is
// done, and no job is started meanwhile (holdJobs): recovered jobs stay queued, their attempts
// untouched. Only the first signal: a second SIGTERM or SIGINT (a double Ctrl-C, or a Ctrl-C after
// the service manager's SIGTERM) takes its default action and ends the daemon at once, as a crash.
const SIGNALS = ['SIGTERM', 'SIGINT']
function onSignal () {
  for (const signal of SIGNALS) process.removeListener(signal, onSignal)
  if (sidecar) stop()
  else stopRequested = true
}
for (const signal of SIGNALS) process.on(signal, onSignal)
try {
  sidecar = await startSidecar(config, { holdJobs: () => stopRequested })
} catch (err) {
  // Another daemon on the same state dir, a port in use, …: one line, not a stack trace.
  console.error(`transfer-sidecar: cannot start: ${err.message}`)
  if (err.code === 'EADDRINUSE') {
    console.error('Another process listens there. Choose other listeners in a config file ("listen": ["127.0.0.1:18765", "unix:/path/sidecar.sock"], with "roots" and "targets") and start with SIDECAR_CONFIG=/path/to/config.json (see README, Quick start).')
  }
  process.exit(1)
}
if (stopRequested) stop()
