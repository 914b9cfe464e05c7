import { describe, it, expect } from 'vitest'
import fs from 'node:fs/promises'
import fsSync from 'node:fs'
import path from 'node:path'
import { execFile, execFileSync } from 'node:child_process'
import { promisify } from 'node:util'
import { validateConfig, loadConfig, embeddedConfig, ConfigError } from '../src/config.js'
import { tempDir } from './helpers/sidecar.js'

const run = promisify(execFile)
const BIN = new URL('../bin/transfer-sidecar.js', import.meta.url).pathname

async function base () {
  const dir = await tempDir('config-')
  return { stateDir: dir, roots: [dir], targets: { local: { type: 'file', dir: path.join(dir, 'store') } } }
}

function fieldOf (raw) {
  try {
    validateConfig(raw)
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return err.field
  }
  throw new Error('config was accepted')
}

describe('config validation', () => {
  it('fills defaults and freezes the result', async () => {
    const c = validateConfig(await base())
    expect(c.listen.map((l) => l.type)).toEqual(['tcp', 'unix'])
    expect(c.listen[0]).toMatchObject({ host: '127.0.0.1', port: 8765 })
    expect(c.targets.local.concurrency).toBe(4)
    expect(c.targets.local.retry).toEqual({ attempts: 5, baseDelayMs: 1000, maxDelayMs: 60000 })
    expect(c.socketMode).toBe(0o660)
    expect(c.journal).toEqual({ sync: 'fsync', syncIntervalMs: 50 })
    expect(Object.isFrozen(c) && Object.isFrozen(c.targets.local)).toBe(true)
  })

  it.each([
    ['an unknown top-level key', (c) => ({ ...c, listn: [] }), 'listn'],
    ['a non-loopback listener without token', (c) => ({ ...c, listen: ['0.0.0.0:8765'] }), 'listen[0]'],
    ['an unparsable listener', (c) => ({ ...c, listen: ['8765'] }), 'listen[0]'],
    // sun_path holds 107 bytes and a NUL: node would silently bind a truncated name instead.
    ['a unix socket path over 107 bytes', (c) => ({ ...c, listen: [`unix:/run/${'d'.repeat(90)}/sidecar.sock`] }), 'listen[0]'],
    // 106 bytes, but bound first as <dir>/.XXXXXX/s (listeners.js): 109.
    ['a unix socket whose directory leaves no room for its private bind', (c) => ({ ...c, listen: [`unix:/run/${'d'.repeat(94)}/s.sock`] }), 'listen[0]'],
    ['a default socket path over 107 bytes (a long stateDir)', (c) => ({ ...c, listen: undefined, stateDir: path.join(c.stateDir, 'd'.repeat(100)) }), 'listen[1]'],
    ['a relative root', (c) => ({ ...c, roots: ['uploads'] }), 'roots[0]'],
    ['a missing root', (c) => ({ ...c, roots: ['/nonexistent/dir'] }), 'roots[0]'],
    ['/ as root', (c) => ({ ...c, roots: ['/'] }), 'roots'],
    ['a short token', (c) => ({ ...c, token: 'short' }), 'token'],
    // HTTP headers carry bytes: curl and PHP send a UTF-8 "ö" as 2 bytes, which node reads back as
    // two Latin-1 characters, so such a token never matches; a control character cannot be sent.
    ['a token with non-ASCII characters', (c) => ({ ...c, token: 'pässwörd-sehr-geheim-1234' }), 'token'],
    ['a token with a control character', (c) => ({ ...c, token: 'token-with-\u0001-in-the-middle' }), 'token'],
    ['a bad socket mode', (c) => ({ ...c, socketMode: '999' }), 'socketMode'],
    ['an unknown socket group', (c) => ({ ...c, socketGroup: 'nosuchgroup' }), 'socketGroup'],
    ['a negative gid', (c) => ({ ...c, socketGroup: -1 }), 'socketGroup'],
    ['a negative queue limit', (c) => ({ ...c, queue: { limit: -1 } }), 'queue.limit'],
    ['zero attempts', (c) => ({ ...c, retry: { attempts: 0 } }), 'retry.attempts'],
    ['zero attempts on a target (same rule as the top-level retry)', (c) => ({ ...c, targets: { f: { type: 'http', url: 'http://h/', retry: { attempts: 0 } } } }), 'targets.f.retry.attempts'],
    ['no targets', (c) => ({ ...c, targets: {} }), 'targets'],
    ['an unknown target type', (c) => ({ ...c, targets: { x: { type: 's3' } } }), 'targets.x.type'],
    ['a bad target name', (c) => ({ ...c, targets: { 'a b': { type: 'file', dir: '/tmp' } } }), 'targets.a b'],
    ['webhdfs without namenodes', (c) => ({ ...c, targets: { h: { type: 'webhdfs' } } }), 'targets.h.namenodes'],
    ['a namenode with a path', (c) => ({ ...c, targets: { h: { type: 'webhdfs', namenodes: ['http://nn:9870/webhdfs/v1'] } } }), 'targets.h.namenodes[0]'],
    ['an http target with credentials', (c) => ({ ...c, targets: { f: { type: 'http', url: 'http://u:p@h/' } } }), 'targets.f.url'],
    ['an unknown target key', (c) => ({ ...c, targets: { f: { type: 'http', url: 'http://h/', pasword: 'x' } } }), 'targets.f.pasword'],
    ['a zero concurrency', (c) => ({ ...c, targets: { f: { type: 'http', url: 'http://h/', concurrency: 0 } } }), 'targets.f.concurrency'],
    ['atomicPut not a boolean', (c) => ({ ...c, targets: { f: { type: 'http', url: 'http://h/', atomicPut: 'yes' } } }), 'targets.f.atomicPut'],
    ['atomicPut on a file target', (c) => ({ ...c, targets: { f: { type: 'file', dir: '/tmp', atomicPut: true } } }), 'targets.f.atomicPut'],
    ['an unknown journal.sync', (c) => ({ ...c, journal: { sync: 'none' } }), 'journal.sync'],
    ['a zero journal.syncIntervalMs', (c) => ({ ...c, journal: { sync: 'write', syncIntervalMs: 0 } }), 'journal.syncIntervalMs'],
    ['an unknown journal key', (c) => ({ ...c, journal: { fsync: true } }), 'journal.fsync'],
    // Not a crash (Object.hasOwn converts it to a key), nor a list taken for its one string.
    ['a target type that is an object', (c) => ({ ...c, targets: { x: JSON.parse('{"type":{"toString":1}}') } }), 'targets.x.type'],
    ['a target type that is a list', (c) => ({ ...c, targets: { x: { type: ['file'], dir: '/tmp' } } }), 'targets.x.type'],
    // Set on an object, "__proto__" sets its prototype: the target vanished and the daemon started without it.
    ['a target named __proto__', (c) => ({ ...c, targets: JSON.parse('{"__proto__":{"type":"file","dir":"/tmp/p"}}') }), 'targets.__proto__'],
    // Node fires a timer of more than 2^31 − 1 ms after 1 ms, and AbortSignal.timeout(0) at once.
    ['a connect timeout beyond a timer', (c) => ({ ...c, timeouts: { connectMs: 2 ** 31 } }), 'timeouts.connectMs'],
    ['a target idle timeout beyond a timer', (c) => ({ ...c, targets: { f: { type: 'http', url: 'http://h/', timeouts: { idleMs: 2 ** 31 } } } }), 'targets.f.timeouts.idleMs'],
    ['a retry delay beyond a timer', (c) => ({ ...c, retry: { baseDelayMs: 2 ** 33 } }), 'retry.baseDelayMs'],
    ['a callback backoff beyond a timer', (c) => ({ ...c, callbacks: { maxDelayMs: 2 ** 34 } }), 'callbacks.maxDelayMs'],
    ['a zero callback timeout', (c) => ({ ...c, callbacks: { timeoutMs: 0 } }), 'callbacks.timeoutMs'],
    ['a zero spool interval', (c) => ({ ...c, spool: { intervalMs: 0 } }), 'spool.intervalMs']
  ])('names the field for %s', async (label, change, field) => {
    expect(fieldOf(change(await base()))).toBe(field)
  })

  it('allows a non-loopback listener with a token', async () => {
    const c = validateConfig({ ...await base(), listen: ['0.0.0.0:8765'], token: 'x'.repeat(32) })
    expect(c.listen[0].host).toBe('0.0.0.0')
  })

  it('resolves socketGroup when it validates: a name to its gid, a numeric gid as is', async () => {
    const gid = Number(execFileSync('getent', ['group', 'www-data'], { encoding: 'utf8' }).split(':')[2])
    expect(validateConfig({ ...await base(), socketGroup: 'www-data' })).toMatchObject({ socketGroup: 'www-data', socketGid: gid })
    expect(validateConfig({ ...await base(), socketGroup: 54321 })).toMatchObject({ socketGroup: 54321, socketGid: 54321 })
    expect(validateConfig(await base())).toMatchObject({ socketGroup: null, socketGid: null })
    const raw = { ...await base(), socketGroup: 'nosuchgroup' }
    expect(() => validateConfig(raw)).toThrow('config: socketGroup: no such group "nosuchgroup"')
  })

  it('embedded default: loopback, a socket and a local target under the state dir', () => {
    const raw = embeddedConfig({ STATE_DIRECTORY: '/var/lib/ts' })
    expect(raw.listen).toEqual(['127.0.0.1:8765', 'unix:/var/lib/ts/sidecar.sock'])
    expect(raw.targets.local).toEqual({ type: 'file', dir: '/var/lib/ts/store' })
    expect(raw.roots).toEqual(['/var/lib/ts/files'])
  })

  it('reports a bad file with its path', async () => {
    const dir = await tempDir()
    const file = path.join(dir, 'c.json')
    await fs.writeFile(file, '{ nope')
    expect(() => loadConfig({ file })).toThrow(/c\.json: not valid JSON/)
  })

  it('--check-config reports every mistake of a file in one run, each with its field', async () => {
    const dir = await tempDir()
    const file = path.join(dir, 'c.json')
    await fs.writeFile(file, JSON.stringify({
      ...await base(),
      logLevel: 'loud',
      queue: { limit: 0 },
      targets: { h: { type: 'http' }, w: { type: 'webhdfs', namenodes: ['ftp://x'] }, f: { type: 'file', dir: path.join(dir, 's') } }
    }))
    const bad = await run(process.execPath, [BIN, '--check-config', '--config', file]).catch((e) => e)
    expect(bad.code).toBe(2)
    for (const line of ['config: queue.limit: must be an integer of at least 1, got 0', 'config: targets.h.url: is required', 'config: targets.w.namenodes[0]: must be an http(s) URL, got "ftp://x"', 'config: logLevel: must be one of']) {
      expect(bad.stderr).toContain(line)
    }
    expect(() => validateConfig(JSON.parse(fsSync.readFileSync(file, 'utf8')))).toThrow(expect.objectContaining({ field: 'queue.limit' })) // the first
  })

  it('reports every mistake within one section or target too, not only its first', async () => {
    const raw = {
      ...await base(),
      retry: { baseDelayMs: -1, maxDelayMs: -1, attempts: 0 },
      journal: { sync: 'later', syncIntervalMs: 0 },
      callbacks: { allow: ['ftp://x/', 'http://h/no-slash'], secret: 'short', attempts: 0 },
      targets: { hdfs: { type: 'webhdfs', concurrency: 0, namenodes: ['nn1:9870', 'http://nn2:9870/x'], checksum: 'yes', user: 'a b', digest: 'md5', retry: { attempts: 0, idle: 1 } } }
    }
    const err = (() => { try { validateConfig(raw) } catch (e) { return e } })()
    expect(err.errors.map((e) => e.field)).toEqual([
      'retry.attempts', 'retry.baseDelayMs', 'retry.maxDelayMs',
      'targets.hdfs.concurrency', 'targets.hdfs.retry.idle', 'targets.hdfs.retry.attempts', 'targets.hdfs.digest',
      'targets.hdfs.namenodes[0]', 'targets.hdfs.namenodes[1]', 'targets.hdfs.user', 'targets.hdfs.checksum',
      'callbacks.allow[0]', 'callbacks.allow[1]', 'callbacks.secret', 'callbacks.attempts',
      'journal.sync', 'journal.syncIntervalMs'
    ])
    expect(err.message.split('\n')).toHaveLength(17)
  })

  it('the CLI exits 2 with the field named, and --check-config hides the token', async () => {
    const dir = await tempDir()
    const file = path.join(dir, 'c.json')
    await fs.writeFile(file, JSON.stringify({ ...await base(), targets: { h: { type: 'webhdfs', namenodes: ['ftp://x'] } } }))
    const bad = await run(process.execPath, [BIN, '--config', file]).catch((e) => e)
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain('targets.h.namenodes[0]: must be an http(s) URL, got "ftp://x"')
    await fs.writeFile(file, JSON.stringify({ ...await base(), token: 'secret-token-0123456789' }))
    const ok = await run(process.execPath, [BIN, '--check-config'], { env: { ...process.env, SIDECAR_CONFIG: file } })
    expect(ok.stdout).not.toContain('secret-token-0123456789')
    expect(JSON.parse(ok.stdout).token).toBe('[set]')
    expect(JSON.parse(ok.stdout).socketMode).toBe('0660') // as written, not 432
  })

  it('the CLI exits 2, naming the field, for an empty --config and for an embedded stateDir it cannot create', async () => {
    const empty = await run(process.execPath, [BIN, '--check-config', '--config', '']).catch((e) => e)
    expect(empty.code).toBe(2) // before: the embedded default, exit 0
    expect(empty.stderr).toMatch(/^config: --config: is empty/)
    const env = { ...process.env, XDG_STATE_HOME: '/etc/passwd' } // a file: no directory under it
    delete env.STATE_DIRECTORY
    delete env.SIDECAR_CONFIG
    const unusable = await run(process.execPath, [BIN, '--check-config'], { env }).catch((e) => e)
    expect(unusable.code).toBe(2) // before: a stack trace, exit 1
    expect(unusable.stderr).toMatch(/^config: stateDir: \/etc\/passwd\/transfer-sidecar is not usable \(ENOTDIR\)/)
  })

  it('the CLI exits 2 for an empty SIDECAR_CONFIG, as for an empty --config (an unset variable, not the embedded default)', async () => {
    const empty = await run(process.execPath, [BIN, '--check-config'], { env: { ...process.env, SIDECAR_CONFIG: '' } }).catch((e) => e)
    expect(empty.code).toBe(2) // before: the embedded default, exit 0
    expect(empty.stderr).toMatch(/^config: SIDECAR_CONFIG: is empty/)
  })

  it('the CLI names the node it needs on an older one, before the daemon\'s modules fail on it', async () => {
    const older = 'data:text/javascript,Object.defineProperty(process.versions,"node",{value:"20.20.2"})'
    const bad = await run(process.execPath, ['--import', older, BIN, '--check-config']).catch((e) => e)
    expect(bad.code).toBe(2)
    expect(bad.stderr).toMatch(/^transfer-sidecar: needs Node\.js 24 or newer/)
  })

  // What a config error shows of a value must not be a secret: the user and password of a URL
  // written with them, the text around a JSON mistake (a token templated in without quotes).
  it('config errors show no credentials of a URL and none of the text around a JSON mistake', async () => {
    const cases = [
      { targets: { w: { type: 'http', url: 'dav://admin:S3CRET-PW@files/x/' } } },
      { targets: { w: { type: 'http', url: 'http//admin:S3CRET-PW@files/x/' } } },
      { targets: { w: { type: 'http', url: 'http://admin:S3CRET/PW@files/x/' } } }, // a "/" in it: no URL at all
      { targets: { h: { type: 'webhdfs', namenodes: ['hdfs://admin:S3CRET-PW@nn:9870'] } } },
      { targets: { l: { type: 'file', dir: '/tmp' } }, callbacks: { allow: ['ftp://admin:S3CRET-PW@hooks/'] } }
    ]
    for (const extra of cases) {
      const err = (() => { try { validateConfig({ ...extra, roots: ['/tmp'], stateDir: '/tmp' }) } catch (e) { return e } })()
      expect(err, JSON.stringify(extra)).toBeInstanceOf(ConfigError)
      expect(err.message).not.toContain('S3CRET')
    }
    const dir = await tempDir()
    const file = path.join(dir, 'c.json')
    await fs.writeFile(file, '{"stateDir": "/tmp", "token": S3cretT0kenValue-abcdef}')
    const err = (() => { try { loadConfig({ file }) } catch (e) { return e } })()
    expect(err.message).toMatch(/not valid JSON/)
    expect(err.message).not.toMatch(/S3cret/)
    await fs.writeFile(file, '{"stateDir": "/tmp",\n "token": "abc" "x"}')
    expect((() => { try { loadConfig({ file }) } catch (e) { return e } })().message).toMatch(/not valid JSON \(line 2, column \d+\)/)
  })

  it('an unknown key of callbacks or spool is named with every key the section takes; webhdfs.user may be null (its default)', () => {
    const err = (() => { try { validateConfig({ roots: ['/tmp'], stateDir: '/tmp', targets: { l: { type: 'file', dir: '/tmp' } }, callbacks: { alow: [] }, spool: { directory: '/tmp' } }) } catch (e) { return e } })()
    expect(err.message).toContain('callbacks.alow: unknown key (allowed: allow, secret, ')
    expect(err.message).toContain('spool.directory: unknown key (allowed: dir, intervalMs)')
    const config = validateConfig({ roots: ['/tmp'], stateDir: '/tmp', targets: { h: { type: 'webhdfs', namenodes: ['http://nn:9870'], user: null } } })
    expect(config.targets.h.user).toBe(null)
  })

  it('an unknown socketGroup stops --check-config and a start with exit 2, before any socket exists', async () => {
    const dir = await tempDir()
    const file = path.join(dir, 'c.json')
    const socket = path.join(dir, 'run', 'sidecar.sock')
    await fs.writeFile(file, JSON.stringify({ ...await base(), listen: ['127.0.0.1:0', `unix:${socket}`], socketGroup: 'nosuchgroup' }))
    for (const args of [['--check-config', '--config', file], ['--config', file]]) {
      const bad = await run(process.execPath, [BIN, ...args], { timeout: 10000 }).catch((e) => e)
      expect(bad.code, args.join(' ')).toBe(2)
      expect(bad.stderr.trim()).toBe('config: socketGroup: no such group "nosuchgroup"') // no stack trace
      await expect(fs.access(socket)).rejects.toThrow(/ENOENT/)
    }
  })
})
