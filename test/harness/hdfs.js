// Test harness: a real Hadoop MiniDFSCluster (WebHDFS on, loopback, ephemeral
// ports) in a child JVM, driven over stdin/stdout. See hdfs/src/main/java/
// sidecar/harness/MiniHdfs.java for the protocol.
//
//   const hdfs = await startHdfs({ datanodes: 1, ha: false });
//   hdfs.namenodes[0]          // 'http://127.0.0.1:PORT' (WebHDFS at /webhdfs/v1)
//   await hdfs.command('mkdir /data www-data 755');
//   await hdfs.stop();
//
// With `tls: { cert, key }` (PEM files, e.g. test/helpers/tls.js) WebHDFS is served over HTTPS
// only, namenodes and datanodes alike, and `namenodes` are https URLs.
//
// Commands: transition-to-standby I, transition-to-active I (HA only),
// shutdown-namenode I, restart-namenode I (same ports; in HA it comes back as
// standby), stop-datanode I, restart-datanode I (same ports), and
// mkdir PATH OWNER[:GROUP] OCTALMODE (as the superuser, on the active namenode).
// Indexes are those of the `namenodes` / `datanodes` arrays.
//
// Needs Java 17+ and Maven on PATH; the first build downloads ~110 MB of jars.
// An idle cluster does not keep the Node process alive; if Node exits without
// stop(), the JVM sees stdin close and shuts the cluster down by itself.

import { execFile, spawn } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'

const HARNESS_DIR = fileURLToPath(new URL('./hdfs/', import.meta.url))
const POM = path.join(HARNESS_DIR, 'pom.xml')
const TARGET = path.join(HARNESS_DIR, 'target')
const CLASSES = path.join(TARGET, 'classes')
const LIB = path.join(TARGET, 'lib')
const STAMP = path.join(TARGET, '.harness-built')
const LOCK = path.join(TARGET, '.build-lock')
const MAIN_CLASS = 'sidecar.harness.MiniHdfs'
const STDERR_TAIL = 40
const BUILD_TIMEOUT_MS = 10 * 60 * 1000
const STOP_KILL_MS = 30 * 1000

function newestSourceMtime () {
  let newest = statSync(POM).mtimeMs
  const walk = (dir) => {
    for (const ent of readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, ent.name)
      if (ent.isDirectory()) walk(p)
      else newest = Math.max(newest, statSync(p).mtimeMs)
    }
  }
  walk(path.join(HARNESS_DIR, 'src'))
  return newest
}

/** True when target/ holds a build at least as new as the harness sources. */
function isBuilt () {
  try {
    if (!existsSync(path.join(CLASSES, 'sidecar', 'harness', 'MiniHdfs.class'))) return false
    if (!readdirSync(LIB).some((f) => f.endsWith('.jar'))) return false
    return statSync(STAMP).mtimeMs >= newestSourceMtime()
  } catch {
    return false
  }
}

function runMaven () {
  return new Promise((resolve, reject) => {
    const args = ['-B', '-q', '-f', POM, 'package', '-DskipTests']
    const child = spawn('mvn', args, { cwd: HARNESS_DIR, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    const keep = (d) => {
      out += d
      if (out.length > 64 * 1024) out = out.slice(-32 * 1024)
    }
    child.stdout.on('data', keep)
    child.stderr.on('data', keep)
    const timer = setTimeout(() => child.kill('SIGKILL'), BUILD_TIMEOUT_MS)
    child.on('error', (err) => {
      clearTimeout(timer)
      reject(new Error(`hdfs harness: cannot run mvn (is Maven installed?): ${err.message}`))
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      if (code === 0) resolve()
      else {
        const tail = out.split('\n').slice(-60).join('\n')
        reject(new Error(`hdfs harness: mvn package failed (${signal ?? `exit ${code}`}):\n${tail}`))
      }
    })
  })
}

/**
 * Build the Java harness (mvn package: target/classes + target/lib/*.jar).
 * Safe to call concurrently from several processes (a lock dir serialises
 * the builds). With { force: false } it is a no-op when the build is fresh.
 */
export async function buildHdfsHarness ({ force = true } = {}) {
  await mkdir(TARGET, { recursive: true })
  // Take the lock: mkdir is atomic. Break locks older than the build timeout.
  for (;;) {
    try {
      await mkdir(LOCK)
      break
    } catch (err) {
      if (err.code !== 'EEXIST') throw err
      try {
        const st = await stat(LOCK)
        if (Date.now() - st.mtimeMs > BUILD_TIMEOUT_MS) {
          await rm(LOCK, { recursive: true, force: true })
          continue
        }
      } catch {
        continue
      }
      await sleep(500)
      if (!force && isBuilt()) return
    }
  }
  try {
    if (!force && isBuilt()) return
    await runMaven()
    await writeFile(STAMP, `${new Date().toISOString()}\n`)
  } finally {
    await rm(LOCK, { recursive: true, force: true })
  }
}

function javaBin () {
  const home = process.env.JAVA_HOME
  if (home && existsSync(path.join(home, 'bin', 'java'))) return path.join(home, 'bin', 'java')
  return 'java'
}

// Hadoop's HTTP servers read their keystore from an ssl-server.xml on the classpath: a directory
// with that file and a PKCS#12 keystore made from the PEM pair.
async function sslConfigDir (dir, { cert, key }) {
  await mkdir(dir)
  const keystore = path.join(dir, 'keystore.p12')
  const password = 'minihdfs-test'
  await promisify(execFile)('openssl', ['pkcs12', '-export', '-in', cert, '-inkey', key, '-out', keystore, '-passout', `pass:${password}`])
  const property = (name, value) => `  <property><name>${name}</name><value>${value}</value></property>`
  await writeFile(path.join(dir, 'ssl-server.xml'), [
    '<?xml version="1.0"?>',
    '<configuration>',
    property('ssl.server.keystore.location', keystore),
    property('ssl.server.keystore.type', 'pkcs12'),
    property('ssl.server.keystore.password', password),
    property('ssl.server.keystore.keypassword', password),
    '</configuration>',
    ''
  ].join('\n'))
  return dir
}

/**
 * Start a MiniDFSCluster. Resolves once it printed READY.
 * @param {object} [opts]
 * @param {number} [opts.datanodes=1]
 * @param {boolean} [opts.ha=false] two namenodes, index 0 active, 1 standby
 * @param {number} [opts.blocksize] dfs.blocksize in bytes (multiple of 512)
 * @param {{cert: string, key: string}} [opts.tls] PEM files: WebHDFS over HTTPS only
 * @param {string} [opts.base] cluster dir. The JVM deletes it at shutdown
 *   (MiniDFSCluster.shutdown(true)); by default a fresh temp dir, which is also
 *   removed here if the JVM dies or has to be killed.
 * @param {number} [opts.timeoutMs=120000] for JVM start to READY (the one-off
 *   Maven build before it, if needed, has its own 10 min limit)
 * @returns {Promise<{namenodes: string[], datanodes: string[], rpc: string[],
 *   superuser: string, command: (line: string) => Promise<string>,
 *   stop: () => Promise<void>, pid: number, stderrTail: () => string}>}
 */
export async function startHdfs ({ datanodes = 1, ha = false, blocksize, base, tls, timeoutMs = 120000 } = {}) {
  if (!isBuilt()) await buildHdfsHarness({ force: false })

  // The JVM's own temp files (Jetty's per-server work dirs, which it leaves behind) go to a dir of
  // ours, removed when the JVM exits.
  const javaTmp = await mkdtemp(path.join(os.tmpdir(), 'minihdfs-tmp-'))
  const classpath = [CLASSES, path.join(LIB, '*')]
  if (tls) {
    classpath.push(await sslConfigDir(path.join(javaTmp, 'ssl'), tls).catch(async (err) => {
      await rm(javaTmp, { recursive: true, force: true })
      throw err
    }))
  }
  const args = [
    '--add-opens=java.base/java.lang=ALL-UNNAMED',
    `-Djava.io.tmpdir=${javaTmp}`,
    '-Xmx512m',
    '-cp',
    classpath.join(path.delimiter),
    MAIN_CLASS,
    '--datanodes',
    String(datanodes),
  ]
  if (ha) args.push('--ha')
  if (tls) args.push('--https')
  if (blocksize != null) args.push('--blocksize', String(blocksize))
  const ownBase = base == null
  const baseDir = ownBase ? await mkdtemp(path.join(os.tmpdir(), 'minihdfs-')) : path.resolve(base)
  args.push('--base', baseDir)

  const startedAt = Date.now()
  const child = spawn(javaBin(), args, { stdio: ['pipe', 'pipe', 'pipe'] })
  const verbose = !!process.env.HDFS_HARNESS_VERBOSE

  const stderrLines = []
  let stderrPartial = ''
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk) => {
    if (verbose) process.stderr.write(chunk)
    const parts = (stderrPartial + chunk).split('\n')
    stderrPartial = parts.pop()
    for (const l of parts) {
      stderrLines.push(l)
      if (stderrLines.length > STDERR_TAIL) stderrLines.shift()
    }
  })
  const stderrTail = () =>
    [...stderrLines, ...(stderrPartial ? [stderrPartial] : [])].slice(-STDERR_TAIL).join('\n')

  // Keep Node alive only while we wait for the JVM.
  let busy = 0
  const setRef = () => {
    const on = busy > 0
    for (const h of [child, child.stdin, child.stdout, child.stderr]) {
      if (h && typeof h.ref === 'function') on ? h.ref() : h.unref()
    }
  }
  const hold = () => {
    busy++
    setRef()
  }
  const release = () => {
    busy--
    setRef()
  }

  let exited = false
  let exitInfo = ''
  const exitPromise = new Promise((resolve) => {
    const done = async (info) => {
      if (exited) return
      exited = true
      exitInfo = info
      // Normally already gone (shutdown(true)); not after a crash or SIGKILL.
      if (ownBase) await rm(baseDir, { recursive: true, force: true }).catch(() => {})
      await rm(javaTmp, { recursive: true, force: true }).catch(() => {})
      resolve()
    }
    child.on('exit', (code, signal) => done(signal ? `signal ${signal}` : `exit code ${code}`))
    child.on('error', (err) => {
      if (child.pid === undefined) done(`spawn error: ${err.message}`) // never started
    })
  })
  // stdin write errors (EPIPE after the JVM died) surface through 'exit'.
  child.stdin.on('error', () => {})

  let onReady
  const pending = [] // FIFO of { cmd, resolve, reject }
  let stdoutPartial = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (chunk) => {
    const parts = (stdoutPartial + chunk).split('\n')
    stdoutPartial = parts.pop()
    for (const line of parts) {
      if (line.startsWith('READY ') && onReady) {
        onReady(line.slice(6))
        onReady = null
        continue
      }
      const p = pending.shift()
      if (!p) {
        process.stderr.write(`hdfs harness: unexpected stdout line: ${line}\n`)
        continue
      }
      p.settle()
      if (p.timedOut) continue // already rejected; the JVM caught up
      if (line.startsWith('OK ')) p.resolve(line)
      else if (line.startsWith('ERR ')) p.reject(new Error(`hdfs harness: '${p.cmd}' failed: ${line.slice(4)}`))
      else p.reject(new Error(`hdfs harness: '${p.cmd}': unexpected answer: ${line}`))
    }
  })

  hold()
  let info
  try {
    const readyJson = await new Promise((resolve, reject) => {
      const fail = (why) =>
        reject(
          new Error(
            `hdfs harness: MiniDFSCluster did not start (${why}); last stderr lines:\n${stderrTail()}`
          )
        )
      const timer = setTimeout(() => {
        child.kill('SIGKILL')
        fail(`no READY line within ${timeoutMs} ms`)
      }, timeoutMs)
      onReady = (json) => {
        clearTimeout(timer)
        resolve(json)
      }
      child.on('error', (err) => {
        clearTimeout(timer)
        fail(`cannot run ${javaBin()}: ${err.message}`)
      })
      exitPromise.then(() => {
        clearTimeout(timer)
        fail(`JVM exited before ready, ${exitInfo}`) // no-op once resolved
      })
    })
    info = JSON.parse(readyJson)
  } catch (err) {
    if (!exited) child.kill('SIGKILL')
    throw err
  } finally {
    release()
  }
  const readyMs = Date.now() - startedAt

  // After READY: a dying JVM fails every outstanding command.
  exitPromise.then(() => {
    while (pending.length) {
      const p = pending.shift()
      p.settle()
      if (!p.timedOut) {
        p.reject(new Error(`hdfs harness: JVM exited (${exitInfo}) during '${p.cmd}'; last stderr lines:\n${stderrTail()}`))
      }
    }
  })

  let stopping = null

  /**
   * Send one command line; resolves to 'OK <cmd>', rejects on 'ERR ...'.
   * Commands run one at a time in the JVM, in the order sent. A command that
   * does not answer within timeoutMs is rejected (the JVM may still be busy).
   */
  function command (cmdLine, { timeoutMs: cmdTimeoutMs = 120000 } = {}) {
    const cmd = String(cmdLine).trim()
    if (!cmd || /[\r\n]/.test(cmd)) return Promise.reject(new Error(`hdfs harness: bad command ${JSON.stringify(cmdLine)}`))
    if (exited) return Promise.reject(new Error(`hdfs harness: JVM already exited (${exitInfo})`))
    if (stopping) return Promise.reject(new Error('hdfs harness: cluster is stopping'))
    return new Promise((resolve, reject) => {
      const entry = { cmd, resolve, reject, timedOut: false, held: true }
      const unhold = () => {
        if (!entry.held) return
        entry.held = false
        release()
      }
      const timer = setTimeout(() => {
        entry.timedOut = true // stays queued so later answers line up
        unhold()
        reject(new Error(`hdfs harness: '${cmd}' got no answer within ${cmdTimeoutMs} ms; last stderr lines:\n${stderrTail()}`))
      }, cmdTimeoutMs)
      entry.settle = () => {
        clearTimeout(timer)
        unhold()
      }
      pending.push(entry)
      hold()
      child.stdin.write(`${cmd}\n`)
    })
  }

  function stop () {
    if (stopping) return stopping
    stopping = (async () => {
      if (exited) return
      hold()
      try {
        child.stdin.end()
        const timer = setTimeout(() => {
          process.stderr.write(`hdfs harness: JVM ${child.pid} did not exit ${STOP_KILL_MS} ms after stdin EOF; killing\n`)
          child.kill('SIGKILL')
        }, STOP_KILL_MS)
        await exitPromise
        clearTimeout(timer)
      } finally {
        release()
      }
    })()
    return stopping
  }

  return {
    namenodes: info.namenodes,
    datanodes: info.datanodes,
    rpc: info.rpc,
    superuser: info.superuser,
    ha: !!info.ha,
    readyMs,
    pid: child.pid,
    command,
    stop,
    stderrTail,
  }
}
