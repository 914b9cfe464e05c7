// The anchor of the hand-off sections (issue #18): a private redis-server (Debian's), with its
// append-only file synced once a second (`appendonly yes`, `appendfsync everysec`), listening on a
// loopback port, its files in a temporary directory. PHP hands a job off with php-redis LPUSH.
import fs from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { spawn, spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../test/helpers/ports.js'

const START_TIMEOUT_MS = 10_000
const STOP_TIMEOUT_MS = 10_000

// Fails early, with the packages to install, when redis-server or php-redis is missing.
export function requireRedis () {
  if (spawnSync('redis-server', ['--version']).status !== 0) throw new Error('the redis anchor needs redis-server (apt-get install redis-server)')
  const php = spawnSync('php', ['-r', 'echo class_exists("Redis") ? "yes" : "no";'], { encoding: 'utf8' })
  if (php.stdout !== 'yes') throw new Error('the redis anchor needs php-redis (apt-get install php-redis)')
}

export function redisVersion () {
  const r = spawnSync('redis-server', ['--version'], { encoding: 'utf8' })
  return /v=(\S+)/.exec(r.stdout ?? '')?.[1] ?? 'unknown'
}

// One command over RESP, the answer's first line (enough for PING, LLEN, DEL, FLUSHALL).
function command (port, ...args) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let answer = ''
    socket.setEncoding('utf8')
    socket.once('error', reject)
    socket.on('data', (d) => {
      answer += d
      if (answer.includes('\r\n')) {
        socket.end()
        resolve(answer.slice(0, answer.indexOf('\r\n')))
      }
    })
    socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`)
  })
}

export async function startRedis ({ workDir }) {
  const dir = path.join(workDir, 'redis')
  await fs.mkdir(dir, { recursive: true })
  const port = await freePort()
  const conf = path.join(dir, 'redis.conf')
  await fs.writeFile(conf, [
    `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, 'daemonize no', 'logfile ""', 'loglevel warning',
    'appendonly yes', 'appendfsync everysec', 'save ""', ''
  ].join('\n'))
  const child = spawn('redis-server', [conf], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (d) => { output = (output + d).slice(-4096) })
  child.stderr.setEncoding('utf8').on('data', (d) => { output = (output + d).slice(-4096) })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const deadline = Date.now() + START_TIMEOUT_MS
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited at start (${child.exitCode}): ${output}`)
    if (await command(port, 'PING').catch(() => null) === '+PONG') break
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`redis-server not answering after ${START_TIMEOUT_MS} ms: ${output}`)
    }
    await sleep(50)
  }
  return {
    port,
    pid: child.pid,
    version: redisVersion(),
    // The length of a list (LLEN), and DEL of it.
    llen: async (key) => Number((await command(port, 'LLEN', key)).slice(1)),
    del: (key) => command(port, 'DEL', key),
    killNow () {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    },
    async stop () {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS)
      await exited
      clearTimeout(timer)
    }
  }
}
