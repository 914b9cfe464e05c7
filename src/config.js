// The whole configuration is read and validated once at start-up, defaults filled in, then frozen.
// Every message names the offending field and says what is expected.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import net from 'node:net'
import { execFileSync } from 'node:child_process'
import { bindPathBytes } from './sockets.js'

export class ConfigError extends Error {
  constructor (field, message) {
    super(`config: ${field}: ${message}`)
    this.name = 'ConfigError'
    this.field = field
    this.errors = [this]
  }

  // One error for several mistakes: the first's field, every mistake on a line of its own.
  static all (errors) {
    if (errors.length === 1) return errors[0]
    const err = new ConfigError(errors[0].field, '')
    err.message = errors.map((e) => e.message).join('\n')
    err.errors = errors
    return err
  }
}

const TARGET_NAME = /^[A-Za-z0-9_.-]{1,64}$/
const UNIX_PATH_MAX = 107
const KNOWN_TOP = new Set(['listen', 'stateDir', 'roots', 'token', 'socketMode', 'socketGroup', 'targets',
  'queue', 'retry', 'timeouts', 'shutdownGraceMs', 'logLevel', 'spool', 'callbacks', 'journal', 'handoff'])
const TARGET_COMMON = ['type', 'concurrency', 'retry', 'timeouts', 'tempSuffix', 'digest']
export const DIGESTS = Object.freeze(['sha256', 'none'])
const TARGET_KEYS = {
  webhdfs: [...TARGET_COMMON, 'namenodes', 'user', 'base', 'delegation', 'headers', 'checksum'],
  http: [...TARGET_COMMON, 'url', 'atomic', 'atomicPut'],
  file: [...TARGET_COMMON, 'dir']
}

export const DEFAULTS = Object.freeze({
  port: 8765,
  socketMode: '0660',
  queue: { limit: 10000, retentionSeconds: 86400, keepFinished: 10000 },
  retry: { attempts: 5, baseDelayMs: 1000, maxDelayMs: 60000 },
  timeouts: { connectMs: 10000, idleMs: 60000 },
  concurrency: 4,
  spool: { intervalMs: 1000 },
  callbacks: { attempts: 8, baseDelayMs: 1000, maxDelayMs: 60000, timeoutMs: 10000 },
  journal: { sync: 'fsync', syncIntervalMs: 50 },
  shutdownGraceMs: 10000,
  logLevel: 'info',
  tempSuffix: '._COPYING_',
  webhdfsChecksum: true
})

// The state directory when neither the config nor systemd (STATE_DIRECTORY) names one.
export function defaultStateDir (env = process.env) {
  if (env.STATE_DIRECTORY) return env.STATE_DIRECTORY.split(':')[0]
  const base = env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state')
  return path.join(base, 'transfer-sidecar')
}

// The embedded default: loopback TCP, a unix socket and a `local` file target, all under stateDir.
export function embeddedConfig (env = process.env) {
  const stateDir = defaultStateDir(env)
  return {
    listen: [`127.0.0.1:${DEFAULTS.port}`, `unix:${path.join(stateDir, 'sidecar.sock')}`],
    stateDir,
    roots: [path.join(stateDir, 'files')],
    token: null,
    targets: { local: { type: 'file', dir: path.join(stateDir, 'store') } }
  }
}

export function loadConfig ({ file, env = process.env } = {}) {
  if (!file) {
    const raw = embeddedConfig(env)
    for (const [field, dir] of [['stateDir', raw.stateDir], ...raw.roots.map((r, i) => [`roots[${i}]`, r])]) {
      try {
        fs.mkdirSync(dir, { recursive: true, mode: 0o750 })
      } catch (err) {
        throw new ConfigError(field, `${dir} is not usable (${err.code}); create it or fix the path`)
      }
    }
    return validateConfig(raw)
  }
  let text
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    throw new ConfigError(file, `cannot read config file (${err.code})`)
  }
  let raw
  try {
    raw = JSON.parse(text)
  } catch (err) {
    // Only where: V8's message quotes the text around the mistake, which may be a secret (a token
    // templated in without its quotes).
    throw new ConfigError(file, `not valid JSON${jsonErrorPlace(text, err)}`)
  }
  return validateConfig(raw, { env })
}

function isObject (v) { return v !== null && typeof v === 'object' && !Array.isArray(v) }

// " (line L, column C)" of a JSON.parse error, from V8's position when it gives one.
function jsonErrorPlace (text, err) {
  const line = /\(line (\d+) column (\d+)\)/.exec(err.message)
  if (line) return ` (line ${line[1]}, column ${line[2]})`
  const pos = /at position (\d+)/.exec(err.message)
  if (!pos) return /end of JSON input/.test(err.message) ? ' (it ends too early)' : /^Unexpected token/.test(err.message) ? ' (an unexpected character: check quotes and commas)' : ''
  const before = text.slice(0, Number(pos[1])).split('\n')
  return ` (line ${before.length}, column ${before.at(-1).length + 1})`
}

// A URL as a config error may show it: the user and password of one written with them are not.
function shownUrl (value) {
  return typeof value === 'string' ? value.replace(/^([a-z][a-z0-9+.-]*:\/*)?.*@/is, '$1…@') : value
}

// "must be …, got X", or "is required: must be …" when the field is missing.
function mustBe (what, value) {
  return value === undefined ? `is required: ${what}` : `${what}, got ${JSON.stringify(value)}`
}

function checkKeys (obj, allowed, where) {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) throw new ConfigError(`${where}${key}`, `unknown key (allowed: ${allowed.join(', ')})`)
  }
}

function int (value, field, { min = 0, max = Number.MAX_SAFE_INTEGER, fallback }) {
  if (value === undefined) return fallback
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(field, mustBe(max === Number.MAX_SAFE_INTEGER ? `must be an integer of at least ${min}` : `must be an integer from ${min} to ${max}`, value))
  }
  return value
}

// Every mistake in one run, not only the first: each field is checked on its own by
// `check(fn, fallback)`, which returns what fn returns or, after a mistake, `fallback` (a stand-in
// for the checks after it); `check.done()` then throws them all together.
function collector () {
  const errors = []
  const check = (fn, fallback = null) => {
    try {
      return fn()
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err
      errors.push(...err.errors)
      return fallback
    }
  }
  check.done = () => {
    if (errors.length) throw ConfigError.all(errors)
  }
  return check
}

function absDir (value, field) {
  if (typeof value !== 'string' || !path.isAbsolute(value) || value.includes('\0')) {
    throw new ConfigError(field, mustBe('must be an absolute path', value))
  }
  return path.resolve(value)
}

function realDir (value, field, { create = false } = {}) {
  const dir = absDir(value, field)
  try {
    if (create) fs.mkdirSync(dir, { recursive: true, mode: 0o750 })
    const real = fs.realpathSync(dir)
    if (!fs.statSync(real).isDirectory()) throw new ConfigError(field, `${dir} is not a directory`)
    return real
  } catch (err) {
    if (err instanceof ConfigError) throw err
    throw new ConfigError(field, `${dir} is not usable (${err.code}); create it or fix the path`)
  }
}

// Milliseconds that go to a timer: node fires a timer of more than 2^31 − 1 ms after 1 ms.
export const MAX_TIMER_MS = 2 ** 31 - 1
// Bounds of the integer fields of the sections, where they are not 0 … Number.MAX_SAFE_INTEGER.
const BOUNDS = {
  'queue.limit': { min: 1 },
  'retry.attempts': { min: 1 },
  'retry.baseDelayMs': { max: MAX_TIMER_MS },
  'retry.maxDelayMs': { max: MAX_TIMER_MS },
  'timeouts.connectMs': { max: MAX_TIMER_MS },
  'timeouts.idleMs': { max: MAX_TIMER_MS },
  'spool.intervalMs': { min: 1, max: MAX_TIMER_MS },
  'callbacks.attempts': { min: 1 },
  'callbacks.baseDelayMs': { max: MAX_TIMER_MS },
  'callbacks.maxDelayMs': { max: MAX_TIMER_MS },
  'callbacks.timeoutMs': { min: 1, max: MAX_TIMER_MS }
}

// `kind`: the section's name in BOUNDS (a target's retry and timeouts are bounded as the top ones).
// `others`: the section's keys validated elsewhere (named with the allowed ones of an unknown key).
function section (value, field, spec, kind = field, others = []) {
  if (value === undefined) return { ...spec }
  if (!isObject(value)) throw new ConfigError(field, 'must be an object')
  const check = collector()
  check(() => checkKeys(value, [...others, ...Object.keys(spec)], `${field}.`))
  const out = {}
  for (const [key, fallback] of Object.entries(spec)) {
    out[key] = check(() => int(value[key], `${field}.${key}`, { min: 0, ...BOUNDS[`${kind}.${key}`], fallback }), fallback)
  }
  check.done()
  return out
}

export function isLoopbackHost (host) {
  if (host === 'localhost') return true
  if (net.isIPv4(host)) return host.startsWith('127.')
  if (net.isIPv6(host)) return host === '::1'
  return false
}

function parseListen (entry, field, hasToken) {
  if (typeof entry !== 'string') throw new ConfigError(field, 'must be a string like "127.0.0.1:8765" or "unix:/path/sidecar.sock"')
  if (entry.startsWith('unix:')) {
    const file = absDir(entry.slice(5), field)
    // sockaddr_un.sun_path: 108 bytes with the NUL. Node binds a longer path cut short, silently.
    if (Buffer.byteLength(file) > UNIX_PATH_MAX) throw new ConfigError(field, `the socket path is ${Buffer.byteLength(file)} bytes; unix sockets allow at most ${UNIX_PATH_MAX}`)
    // It is bound first as <dir>/.XXXXXX/s (listeners.js), 10 bytes longer than its directory.
    const bound = bindPathBytes(file)
    if (bound > UNIX_PATH_MAX) throw new ConfigError(field, `the socket's directory is too long: the socket is bound as <dir>/.XXXXXX/s first, ${bound} bytes; unix sockets allow at most ${UNIX_PATH_MAX}`)
    return { type: 'unix', path: file }
  }
  const m = /^(?:\[([0-9a-fA-F:]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(entry)
  if (!m) throw new ConfigError(field, `cannot parse ${JSON.stringify(entry)}; use "host:port", "[::1]:port" or "unix:/path"`)
  const host = m[1] ?? m[2]
  const port = Number(m[3])
  if (port > 65535) throw new ConfigError(field, `port ${port} is out of range`)
  if (!isLoopbackHost(host) && !hasToken) {
    throw new ConfigError(field, `refusing to listen on non-loopback address ${host} without a token; set "token" or listen on 127.0.0.1`)
  }
  return { type: 'tcp', host, port }
}

function httpUrl (value, field) {
  let url
  try {
    url = new URL(value)
  } catch {
    throw new ConfigError(field, mustBe('must be an http(s) URL', shownUrl(value)))
  }
  if (url.username || url.password) throw new ConfigError(field, 'must not carry credentials in the URL')
  if (!['http:', 'https:'].includes(url.protocol)) throw new ConfigError(field, mustBe('must be an http(s) URL', shownUrl(value)))
  if (url.search || url.hash) throw new ConfigError(field, 'must not have a query or fragment')
  return url
}

function validateTarget (name, t, top) {
  const field = `targets.${name}`
  if (!TARGET_NAME.test(name)) throw new ConfigError(field, 'target names may use letters, digits, "_", "-" and "." (1–64)')
  // Set on an object, that name sets its prototype instead: the target would vanish.
  if (name === '__proto__') throw new ConfigError(field, '__proto__ is reserved; choose another target name')
  if (!isObject(t)) throw new ConfigError(field, 'must be an object')
  if (typeof t.type !== 'string' || !Object.hasOwn(TARGET_KEYS, t.type)) throw new ConfigError(`${field}.type`, mustBe(`must be one of ${Object.keys(TARGET_KEYS).join(', ')}`, t.type))
  const check = collector()
  const flag = (key, fallback) => check(() => {
    if (t[key] !== undefined && typeof t[key] !== 'boolean') throw new ConfigError(`${field}.${key}`, 'must be true or false')
    return t[key] ?? fallback
  })
  check(() => checkKeys(t, TARGET_KEYS[t.type], `${field}.`))
  const out = {
    name,
    type: t.type,
    concurrency: check(() => int(t.concurrency, `${field}.concurrency`, { min: 1, max: 1024, fallback: DEFAULTS.concurrency })),
    retry: check(() => section(t.retry, `${field}.retry`, top.retry, 'retry')),
    timeouts: check(() => section(t.timeouts, `${field}.timeouts`, top.timeouts, 'timeouts')),
    tempSuffix: check(() => tempSuffix(t.tempSuffix, `${field}.tempSuffix`)),
    digest: check(() => {
      const digest = t.digest ?? 'sha256'
      if (!DIGESTS.includes(digest)) throw new ConfigError(`${field}.digest`, 'must be "sha256" (hash every byte) or "none" (the size is still checked)')
      return digest
    })
  }
  if (t.type === 'webhdfs') {
    out.namenodes = check(() => {
      if (!Array.isArray(t.namenodes) || t.namenodes.length === 0) throw new ConfigError(`${field}.namenodes`, 'must be a non-empty array of namenode HTTP URLs, e.g. ["http://nn1:9870"]')
      return t.namenodes.map((u, i) => check(() => {
        const url = httpUrl(u, `${field}.namenodes[${i}]`)
        if (url.pathname !== '/') throw new ConfigError(`${field}.namenodes[${i}]`, 'give only scheme, host and port; /webhdfs/v1 is added')
        return url.origin
      }))
    })
    out.user = check(() => {
      if (t.user !== undefined && t.user !== null && (typeof t.user !== 'string' || !/^[A-Za-z0-9_.@-]{1,128}$/.test(t.user))) throw new ConfigError(`${field}.user`, 'must be null or a user name')
      return t.user ?? null
    })
    out.base = check(() => remoteBase(t.base ?? '/', `${field}.base`))
    // A delegation token as HDFS encodes it (URL-safe base64); it travels as a query parameter.
    out.delegation = check(() => {
      if (t.delegation !== undefined && t.delegation !== null && (typeof t.delegation !== 'string' || !/^[A-Za-z0-9_-]{8,4096}$/.test(t.delegation))) {
        throw new ConfigError(`${field}.delegation`, 'must be a delegation token string (URL-safe base64, as `hdfs fetchdt` or GETDELEGATIONTOKEN prints it)')
      }
      return t.delegation ?? null
    })
    out.headers = check(() => extraHeaders(t.headers, `${field}.headers`))
    out.checksum = flag('checksum', DEFAULTS.webhdfsChecksum)
  } else if (t.type === 'http') {
    out.url = check(() => {
      const url = httpUrl(t.url, `${field}.url`)
      if (!url.pathname.endsWith('/')) url.pathname += '/'
      return url.href
    })
    out.atomic = flag('atomic', true)
    out.atomicPut = flag('atomicPut', false)
  } else {
    out.dir = check(() => realDir(t.dir, `${field}.dir`, { create: true }))
  }
  check.done()
  return Object.freeze(out)
}

function tempSuffix (value, field) {
  if (value === undefined) return DEFAULTS.tempSuffix
  if (typeof value !== 'string' || !/^[A-Za-z0-9._~-]{1,32}$/.test(value)) {
    throw new ConfigError(field, mustBe('must be 1–32 of A-Z a-z 0-9 . _ ~ -, e.g. "._COPYING_"', value))
  }
  return value
}

// Extra request headers for the namenodes (e.g. Authorization for a gateway). Values are secrets:
// never logged, hidden by describeConfig.
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/
const RESERVED_HEADERS = new Set(['host', 'content-length', 'content-type', 'transfer-encoding', 'connection', 'expect', 'range', 'if-range'])
function extraHeaders (value, field) {
  if (value === undefined || value === null) return Object.freeze({})
  if (!isObject(value)) throw new ConfigError(field, 'must be an object of header name → string value, e.g. {"Authorization": "Bearer …"}')
  const out = {}
  for (const [name, v] of Object.entries(value)) {
    if (!HEADER_NAME.test(name)) throw new ConfigError(`${field}.${name}`, 'is not a valid header name')
    if (RESERVED_HEADERS.has(name.toLowerCase())) throw new ConfigError(`${field}.${name}`, 'is set by the sidecar itself and cannot be configured')
    // eslint-disable-next-line no-control-regex
    if (typeof v !== 'string' || /[\u0000-\u001f\u007f]/.test(v)) throw new ConfigError(`${field}.${name}`, 'must be a string without control characters')
    out[name.toLowerCase()] = v
  }
  return Object.freeze(out)
}

function remoteBase (value, field) {
  if (typeof value !== 'string' || !value.startsWith('/') || value.split('/').some((s) => s === '..' || s === '.')) {
    throw new ConfigError(field, mustBe('must be an absolute path without . or .. segments', value))
  }
  return '/' + value.split('/').filter(Boolean).join('/')
}

// The gid of socketGroup (null: leave the socket's group alone). A name is looked up now, with the
// system's own resolver (getent: /etc/group, NSS), so that a typo stops the start like any other
// config error instead of failing after the socket is created.
function groupId (group) {
  if (group === null) return null
  if (Number.isInteger(group) && group >= 0 && group < 0xffffffff) return group
  if (typeof group !== 'string' || !/^[A-Za-z0-9_.-]{1,64}$/.test(group)) {
    throw new ConfigError('socketGroup', 'must be null, a group name or a numeric gid')
  }
  let line
  try {
    line = execFileSync('getent', ['group', group], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
  } catch (err) {
    if (err.status === 2) throw new ConfigError('socketGroup', `no such group ${JSON.stringify(group)}`) // getent: key not found
    throw new ConfigError('socketGroup', `cannot look up group ${JSON.stringify(group)} (${err.code ?? `getent exited ${err.status}`})`)
  }
  const gid = Number(line.split(':')[2])
  if (!Number.isInteger(gid)) throw new ConfigError('socketGroup', `cannot read the gid of group ${JSON.stringify(group)} from getent`)
  return gid
}

function validateSpool (value, stateDir) {
  if (value !== undefined && !isObject(value)) throw new ConfigError('spool', 'must be an object')
  const { dir, ...rest } = value ?? {}
  const check = collector()
  const out = check(() => section(rest, 'spool', DEFAULTS.spool, 'spool', ['dir']), {})
  out.dir = check(() => realDir(dir ?? path.join(stateDir, 'spool'), 'spool.dir', { create: true }))
  check.done()
  return Object.freeze(out)
}

// "fsync": a job is acknowledged once its record is on disk (fdatasync). "write": once the record is
// in the journal file (in the page cache: it survives the daemon's crash, not the host's), synced
// in the background within syncIntervalMs.
function validateJournal (value) {
  if (value !== undefined && !isObject(value)) throw new ConfigError('journal', 'must be an object')
  const check = collector()
  check(() => checkKeys(value ?? {}, Object.keys(DEFAULTS.journal), 'journal.'))
  const { sync = DEFAULTS.journal.sync, syncIntervalMs } = value ?? {}
  check(() => {
    if (sync !== 'fsync' && sync !== 'write') throw new ConfigError('journal.sync', 'must be "fsync" or "write"')
  })
  const out = {
    sync,
    syncIntervalMs: check(() => int(syncIntervalMs, 'journal.syncIntervalMs', { min: 1, max: 60000, fallback: DEFAULTS.journal.syncIntervalMs }))
  }
  check.done()
  return Object.freeze(out)
}

// handoff.listen: sockets that speak only the line protocol, served with the journal by a thread of
// their own (handoff-thread.js), so that the transfers on the main thread do not hold up a
// hand-off's acknowledgement. None by default.
function validateHandoff (value, hasToken, listen) {
  if (value !== undefined && !isObject(value)) throw new ConfigError('handoff', 'must be an object')
  const check = collector()
  check(() => checkKeys(value ?? {}, ['listen'], 'handoff.'))
  const raw = value?.listen ?? []
  const entries = check(() => {
    if (!Array.isArray(raw)) throw new ConfigError('handoff.listen', 'must be an array like ["unix:/run/transfer-sidecar/handoff.sock"] (may be empty)')
    return raw.map((e, i) => check(() => Object.freeze(parseListen(e, `handoff.listen[${i}]`, hasToken))))
  }, [])
  check(() => {
    const taken = new Set((listen ?? []).filter(Boolean).map(listenKey))
    entries.forEach((l, i) => {
      if (!l) return
      if (taken.has(listenKey(l))) throw new ConfigError(`handoff.listen[${i}]`, 'is also in listen; give the hand-off thread a socket or port of its own')
      taken.add(listenKey(l))
    })
  })
  check.done()
  return Object.freeze({ listen: Object.freeze(entries) })
}

const listenKey = (l) => l.type === 'unix' ? `unix:${l.path}` : `${l.host}:${l.port}`

function validateCallbacks (value) {
  if (value !== undefined && !isObject(value)) throw new ConfigError('callbacks', 'must be an object')
  const { allow = [], secret = null, ...rest } = value ?? {}
  const check = collector()
  const prefixes = check(() => {
    if (!Array.isArray(allow)) throw new ConfigError('callbacks.allow', 'must be an array of URL prefixes, e.g. ["http://127.0.0.1:8080/hooks/"]')
    return allow.map((p, i) => check(() => {
      const url = httpUrl(p, `callbacks.allow[${i}]`)
      if (!url.pathname.endsWith('/')) throw new ConfigError(`callbacks.allow[${i}]`, 'must end with "/" so that it is a path prefix')
      return url.href
    }))
  })
  check(() => {
    if (secret !== null && (typeof secret !== 'string' || secret.length < 16)) throw new ConfigError('callbacks.secret', 'must be null or a string of at least 16 characters')
  })
  const out = check(() => section(rest, 'callbacks', DEFAULTS.callbacks, 'callbacks', ['allow', 'secret']))
  check.done()
  return Object.freeze({ ...out, allow: Object.freeze(prefixes), secret })
}

export function validateConfig (raw, { env = process.env } = {}) {
  if (!isObject(raw)) throw new ConfigError('(top level)', 'must be a JSON object')
  const check = collector()
  check(() => checkKeys(raw, [...KNOWN_TOP], ''))
  const token = check(() => {
    const token = raw.token ?? null
    // Visible ASCII only: a header carries bytes, and node reads them as Latin-1, so a UTF-8 "ö" sent
    // by curl or PHP never matches, and a control character cannot be sent at all.
    if (token !== null && (typeof token !== 'string' || token.length < 16 || !/^[\x21-\x7e]+$/.test(token))) {
      throw new ConfigError('token', 'must be null or a string of at least 16 visible ASCII characters (no spaces)')
    }
    return token
  })
  const stateDir = check(() => realDir(raw.stateDir ?? defaultStateDir(env), 'stateDir', { create: true }))
  const listen = check(() => {
    if (raw.listen === undefined && stateDir === null) return []
    const listenRaw = raw.listen ?? [`127.0.0.1:${DEFAULTS.port}`, `unix:${path.join(stateDir, 'sidecar.sock')}`]
    if (!Array.isArray(listenRaw) || listenRaw.length === 0) throw new ConfigError('listen', 'must be a non-empty array')
    return listenRaw.map((e, i) => check(() => Object.freeze(parseListen(e, `listen[${i}]`, token !== null))))
  }, [])

  const roots = check(() => {
    if (!Array.isArray(raw.roots)) throw new ConfigError('roots', 'must be an array of absolute directories that local paths may be in (may be empty)')
    const roots = raw.roots.map((r, i) => check(() => realDir(r, `roots[${i}]`)))
    if (roots.some((r) => r === '/')) throw new ConfigError('roots', '"/" cannot be a root; name the directories PHP uses')
    return roots
  }, [])

  const socketMode = check(() => {
    const socketMode = raw.socketMode ?? DEFAULTS.socketMode
    if (typeof socketMode !== 'string' || !/^0?[0-7]{3}$/.test(socketMode)) throw new ConfigError('socketMode', 'must be an octal string like "0660"')
    return socketMode
  }, DEFAULTS.socketMode)
  const socketGroup = raw.socketGroup ?? null
  const socketGid = check(() => groupId(socketGroup))

  const queue = check(() => section(raw.queue, 'queue', DEFAULTS.queue), { ...DEFAULTS.queue })
  const retry = check(() => section(raw.retry, 'retry', DEFAULTS.retry), { ...DEFAULTS.retry })
  const timeouts = check(() => section(raw.timeouts, 'timeouts', DEFAULTS.timeouts), { ...DEFAULTS.timeouts })

  const targets = {}
  check(() => {
    if (!isObject(raw.targets) || Object.keys(raw.targets).length === 0) throw new ConfigError('targets', 'must be an object with at least one target')
    for (const [name, t] of Object.entries(raw.targets)) targets[name] = check(() => validateTarget(name, t, { retry, timeouts }))
  })

  const logLevel = check(() => {
    const logLevel = raw.logLevel ?? DEFAULTS.logLevel
    if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) throw new ConfigError('logLevel', 'must be one of fatal, error, warn, info, debug, trace, silent')
    return logLevel
  })
  const shutdownGraceMs = check(() => int(raw.shutdownGraceMs, 'shutdownGraceMs', { min: 0, max: 600000, fallback: DEFAULTS.shutdownGraceMs }))
  const spool = stateDir === null ? null : check(() => validateSpool(raw.spool, stateDir))
  const callbacks = check(() => validateCallbacks(raw.callbacks))
  const journal = check(() => validateJournal(raw.journal))
  const handoff = check(() => validateHandoff(raw.handoff, token !== null, listen))
  check.done()

  return Object.freeze({
    listen: Object.freeze(listen),
    stateDir,
    roots: Object.freeze(roots),
    token,
    socketMode: parseInt(socketMode, 8),
    socketGroup,
    socketGid,
    queue: Object.freeze(queue),
    retry: Object.freeze(retry),
    timeouts: Object.freeze(timeouts),
    shutdownGraceMs,
    logLevel,
    spool,
    callbacks,
    journal,
    handoff,
    targets: Object.freeze(targets)
  })
}

// What is safe to log or print: the token, delegation tokens and configured header values are never shown.
export function describeConfig (config) {
  const targets = Object.fromEntries(Object.entries(config.targets).map(([name, t]) => [name, t.type !== 'webhdfs'
    ? t
    : {
        ...t,
        delegation: t.delegation ? '[set]' : null,
        headers: Object.fromEntries(Object.keys(t.headers).map((h) => [h, '[set]']))
      }]))
  return {
    ...config,
    socketMode: '0' + config.socketMode.toString(8), // as written in the file
    targets,
    token: config.token ? '[set]' : null,
    callbacks: { ...config.callbacks, secret: config.callbacks.secret ? '[set]' : null }
  }
}
