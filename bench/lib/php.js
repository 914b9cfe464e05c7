// Runs one of bench/php/*.php in its own php process: the arguments go in as one JSON object, the
// script prints one JSON line (see bench/php/common.php). A failing script fails the benchmark.
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { performance } from 'node:perf_hooks'
import { killOnExit } from '../../test/harness/children.js'

export const PHP_DIR = fileURLToPath(new URL('../php/', import.meta.url))
const OUTPUT_LIMIT = 8 << 20

// `onStart(pid)` runs right after the spawn, e.g. to sample the process from outside; `env` adds to
// the process's environment (e.g. LD_PRELOAD).
export function runPhp (script, args, { memoryLimit = '256M', onStart, env } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    const child = spawn('php', ['-d', `memory_limit=${memoryLimit}`, '-d', 'display_errors=stderr', PHP_DIR + script, JSON.stringify(args)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(env && { env: { ...process.env, ...env } })
    })
    killOnExit(child) // an interrupted run leaves no transfer behind
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (d) => { if (stdout.length < OUTPUT_LIMIT) stdout += d })
    child.stderr.setEncoding('utf8').on('data', (d) => { if (stderr.length < OUTPUT_LIMIT) stderr += d })
    child.once('error', (err) => reject(new Error(`cannot run php (apt-get install php-cli php-curl): ${err.message}`)))
    child.once('spawn', () => onStart?.(child.pid))
    child.once('close', (code, signal) => {
      const wallMs = performance.now() - t0
      if (code !== 0) {
        reject(new Error(`php ${script} ${signal ?? `exited ${code}`}: ${stderr.trim() || stdout.trim().slice(-2000)}`))
        return
      }
      const line = stdout.trim().split('\n').at(-1)
      try {
        resolve({ ...JSON.parse(line), wallMs, stderr })
      } catch {
        reject(new Error(`php ${script} printed no JSON result: ${stdout.slice(-2000)} ${stderr.slice(-2000)}`))
      }
    })
  })
}
