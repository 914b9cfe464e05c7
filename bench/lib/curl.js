// Runs the curl CLI, the reference competitor, under /usr/bin/time so that its CPU time and
// peak RSS are known too. The wall time is measured here, from spawn to exit, which is what a
// shell user (or PHP exec) would see.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import fs from 'node:fs/promises'
import { performance } from 'node:perf_hooks'
import { killOnExit } from '../../test/harness/children.js'

const TIME_BIN = '/usr/bin/time'
// /usr/bin/time prints CPU seconds with two decimals: below this the figure says little.
export const CPU_FLOOR_S = 0.05
const HAS_TIME = existsSync(TIME_BIN)

// Spawns a command, collects stdout/stderr (small: we never let curl print a body we need to keep).
export function runCommand (cmd, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    killOnExit(child)
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (d) => { stdout += d })
    child.stderr.setEncoding('utf8').on('data', (d) => { stderr += d })
    child.once('error', reject)
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
}

// Runs `program` under /usr/bin/time (its report, "user sys maxrssKiB", goes to `timeFile`) and
// times it from spawn to exit. Returns { ms, stdout, cpuS, sysS, rssMiB }; throws when it fails.
async function timed (program, args, timeFile, what) {
  const [cmd, fullArgs] = HAS_TIME
    ? [TIME_BIN, ['-o', timeFile, '-f', '%U %S %M', program, ...args]]
    : [program, args]
  const t0 = performance.now()
  const res = await runCommand(cmd, fullArgs)
  const ms = performance.now() - t0
  if (res.code !== 0) {
    throw new Error(`${what} failed (${res.signal ?? `exit ${res.code}`}): ${res.stderr.trim()}`)
  }
  const usage = HAS_TIME ? await readTimeFile(timeFile) : { cpuS: null, rssMiB: null }
  return { ms, stdout: res.stdout, ...usage }
}

// One curl invocation.
export const curl = (args, { timeFile }) => timed('curl', args, timeFile, `curl ${args.join(' ')}`)

async function readTimeFile (file) {
  const lines = (await fs.readFile(file, 'utf8')).trim().split('\n')
  const [user, sys, maxKiB] = lines[lines.length - 1].split(' ').map(Number)
  return { cpuS: user + sys, sysS: sys, rssMiB: maxKiB / 1024 }
}

// A bash pipeline around curl (issue #19's "curl doing the same work": sha256 with tee, an fsync),
// timed like curl; /usr/bin/time reports the CPU of every process of it and the largest RSS.
// `script` gets `args` as $1, $2, …; set -o pipefail makes it fail when any part fails.
export const shell = (script, args, { timeFile }) =>
  timed('bash', ['-c', `set -euo pipefail; ${script}`, 'bench', ...args], timeFile, `bash -c '${script}' ${args.join(' ')}`)

// The sha256 a `sha256sum` line starts with.
export const sha256Of = (stdout) => stdout.trim().split(/\s+/)[0]

// curl doing the sidecar's work (issue #19), with the hashing command of each such competitor:
// coreutils' sha256sum, the issue's choice (9.1 here: no SHA-NI, ~270 MiB/s), and OpenSSL's, which
// uses SHA-NI as the daemon's does (~1.5 GiB/s). Both print "<hex> <name>".
export const HASHERS = { 'curl-sha256': 'sha256sum', 'curl-openssl': 'openssl dgst -sha256 -r' }

// Download: the sha256 of the bytes while they are written (tee), then the file fsync'd
// (coreutils `sync FILE`), as the sidecar fsyncs before its rename. $1 URL, $2 file, $3 curl flag.
export const hashedDownload = (hasher) => `curl -sS -f $3 -o - "$1" | tee "$2" | ${HASHERS[hasher]}; sync "$2"`
// Upload: the hash of the file and `curl -T FILE` side by side. $1 file, $2 URL.
export const hashedUpload = (hasher) => `${HASHERS[hasher]} "$1" & curl -sS -f -T "$1" -o /dev/null "$2"; wait $!`

// curl -w '%{http_code}' prints the final status; anything but 2xx is a failed transfer.
export function expect2xx (stdout, what) {
  const status = Number(stdout.trim().slice(-3))
  if (!(status >= 200 && status < 300)) throw new Error(`${what}: HTTP ${stdout.trim().slice(-3)}`)
  return status
}

// Adds up the steps of a multi-request transfer (WebHDFS CREATE is two curl calls).
export function sumSteps (steps) {
  return {
    ms: steps.reduce((s, x) => s + x.ms, 0),
    cpuS: steps.every((x) => x.cpuS !== null) ? steps.reduce((s, x) => s + x.cpuS, 0) : null,
    rssMiB: steps.every((x) => x.rssMiB !== null) ? Math.max(...steps.map((x) => x.rssMiB)) : null
  }
}
