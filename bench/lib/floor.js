// The hand-off's floor (issue #18): bench/lib/floor-server.js started for one journal mode, its
// socket and journal in `dir` (beside the daemons' state directories: the same file system).
import fs from 'node:fs/promises'
import { createReadStream } from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { onCleanup, onExitKill } from './cleanup.js'

const SERVER = fileURLToPath(new URL('./floor-server.js', import.meta.url))
const NEWLINE = 0x0a

// cpuProfDir: run it under --cpu-prof too (the bench's --cpu-prof), beside the daemons' profiles.
// steps: time each step of each line; stop() then resolves to their medians (µs).
export async function startFloor ({ dir, name, roots, targets, sync, cpuProfDir, steps = false }) {
  const socket = path.join(dir, `floor-${name}.sock`)
  const journal = path.join(dir, `floor-${name}.journal`)
  const profile = cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfDir, '--cpu-prof-name', `floor-${name}.cpuprofile`] : []
  const child = spawn(process.execPath, [...profile, SERVER, JSON.stringify({ socket, roots, targets, journal, sync, steps })], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const kill = () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') }
  onExitKill(kill)
  onCleanup(kill)
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (d) => { output += d })
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve)
    exited.then((code) => reject(new Error(`the floor server exited (${code}) before it was ready`)))
  })
  return {
    pid: child.pid,
    socket,
    // The records it has written: one per job it accepted (counted as the journal streams by).
    async lines () {
      let count = 0
      try {
        for await (const chunk of createReadStream(journal)) {
          for (let at = chunk.indexOf(NEWLINE); at !== -1; at = chunk.indexOf(NEWLINE, at + 1)) count++
        }
      } catch (err) {
        if (err.code !== 'ENOENT') throw err
      }
      return count
    },
    // steps: forget those timed so far (a warm-up's).
    async resetSteps () {
      const seen = output.length
      child.kill('SIGUSR2')
      while (!output.slice(seen).includes('reset\n')) await new Promise((resolve) => setTimeout(resolve, 5))
    },
    async stop () {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        await exited
      }
      await fs.rm(journal, { force: true })
      return steps ? JSON.parse(output.trim().split('\n').at(-1)) : null
    }
  }
}
