// fast-check generators of hostile requests to the job API. Each case says what it sends and what
// the daemon must answer: `expect` lists the acceptable error codes ('accept' allows 200/202);
// `outside: true` marks a request whose local path resolves outside the roots (never acceptable).
// A submission is a valid job with exactly one field made hostile, so the expected code is
// determined by that field alone. `ctx` describes the fixtures (see reliability.fuzz.test.js).
import fc from 'fast-check'
import path from 'node:path'

const NOT_STRINGS = [null, 0, 1, -1, 1.5, true, false, [], ['x'], {}, { a: 1 }]

// Pieces of names: plain, look-alikes of "." and "/", direction overrides, invisible and
// combining characters, lone surrogates, percent- and double-percent-encoded dots and slashes.
export const TRICKY = [
  '\u202e', '\u202d', '\u2066', '\u200b', '\u200d', '\ufeff', '\u00ad', '\uff0e', '\uff0e\uff0e', '\uff0f', '\u2215', '\u2044',
  '\u29f8', '\u3002', '\ufe52', '\u2024', '\u2025', '\u0085', '\u2028', '\u2029', 'e\u0301', '\u00e9', 'cafe\u0301', 'caf\u00e9',
  '\ufffd', '\ud800', '\udfff', '\u{1f4a9}', '\u0130', '\ufb01', '\u212a', '%2e', '%2e%2e', '%2E%2E', '%2f', '%2F', '%5c',
  '%252e%252e', '%252f', '%25', '%00', '%0a', '%c0%ae', '%c0%af', '%e0%80%ae', '..%2f', '%2e%2e%2f', '.%2e', '..\\', '\\',
  '...', '. .', '.. ', ' ..', '..;', ';', '?', '#', '*', '~', '$HOME', '`id`', '$(id)', "'", '"', '<', '>', '|', ' '
]

const plainName = fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/)
// One path segment that is never "", "." or "..", has no "/" and no control character.
export const trickySegment = fc.array(fc.oneof(plainName, fc.constantFrom(...TRICKY)), { minLength: 1, maxLength: 5 })
  .map((parts) => 'w-' + parts.join(''))
  .filter((s) => !s.includes('/'))

const controlChar = fc.integer({ min: 0, max: 0x1f }).map((c) => String.fromCharCode(c)).chain((c) => fc.constantFrom(c, '\u007f', '\u0000'))

// Percent-encodes the UTF-8 bytes of `s` (lone surrogates become U+FFFD, as on the wire).
export function pctEncode (s, keep = /[A-Za-z0-9_.~-]/) {
  let out = ''
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b)
    out += b < 0x80 && keep.test(c) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0')
  }
  return out
}

function insertAt (s, piece, at) {
  const i = Math.floor(at * (s.length + 1))
  return s.slice(0, i) + piece + s.slice(i)
}

// Remote paths: hostile ones the daemon must refuse, and tricky names it may take (they stay names).
const remoteRefused = fc.oneof(
  fc.constantFrom('', 'relative/x', 'x', '.', './x', '/', '//', '/./', '/.//./', '\\x', '%2fx'),
  fc.tuple(fc.array(fc.constantFrom('a', 'b', '', '.', '..', 'etc', 'passwd'), { maxLength: 6 }), fc.nat({ max: 6 }), fc.constantFrom('/', '//', '/./'))
    .map(([segs, at, sep]) => { const s = [...segs]; s.splice(Math.min(at, s.length), 0, '..'); return '/' + s.join(sep) }),
  fc.tuple(trickySegment, controlChar, fc.double({ min: 0, max: 1, noNaN: true })).map(([s, c, at]) => insertAt('/' + s, c, at)),
  fc.integer({ min: 4097, max: 6000 }).map((n) => '/' + 'r'.repeat(n - 1))
)
const remoteTaken = fc.oneof(
  fc.array(trickySegment, { minLength: 1, maxLength: 4 }).map((s) => '/fuzz/' + s.join('/')),
  fc.array(fc.constantFrom('%2e%2e', '%252e%252e', '..%2f..%2f', '\uff0e\uff0e', '\u2025', '..\\..', '...', '%c0%ae%c0%ae', '.%2e'), { minLength: 1, maxLength: 4 })
    .map((s) => '/fuzz/' + s.join('/') + '/x'),
  fc.tuple(trickySegment, fc.constantFrom('//', '/./', '/.//', '/')).map(([s, sep]) => `/fuzz${sep}${s}`)
)

function localCases (ctx, direction) {
  const outsideFiles = [ctx.sentinel.secretPath, ctx.sentinel.notePath, ctx.besideStore, ctx.besideDav, '/etc/passwd', '/etc/shadow',
    '/proc/self/environ', '/proc/self/cmdline', '/proc/self/fd/0', '/dev/zero', '/dev/null', ctx.journal, ctx.configFile, ctx.storeFile]
  const upload = direction === 'upload'
  const base = upload ? ctx.srcDir : ctx.dlDir
  const depth = ctx.root.split('/').length
  const escapes = fc.tuple(fc.integer({ min: depth, max: depth + 3 }), fc.constantFrom(...outsideFiles), fc.constantFrom('/', '//', '/./'))
    .map(([k, abs, sep]) => base + sep + Array(k).fill('..').join(sep) + abs)
  const sibling = fc.constantFrom(
    `${ctx.root}/../${path.basename(ctx.sentinel.dir)}/secret.txt`,
    `${ctx.srcDir}/../../${path.basename(ctx.sentinel.dir)}/dir/note.txt`,
    `${ctx.root}/./../${path.basename(ctx.sentinel.dir)}/dir/${upload ? 'note.txt' : 'new.bin'}`
  )
  const cases = [
    // syntax: not a non-empty absolute string of at most 4096 characters without controls
    fc.constantFrom(...NOT_STRINGS, undefined, '').map((local) => ({ local, expect: ['INVALID_PATH'] })),
    fc.oneof(plainName, trickySegment, fc.constantFrom('~/x', './x', '../x', 'C:\\x', '\\\\host\\share')).map((local) => ({ local, expect: ['INVALID_PATH'] })),
    fc.tuple(controlChar, fc.double({ min: 0, max: 1, noNaN: true })).map(([c, at]) => ({ local: insertAt(upload ? ctx.srcFile : `${ctx.dlDir}/x.bin`, c, at), expect: ['INVALID_PATH'] })),
    fc.integer({ min: 4097, max: 9000 }).map((n) => ({ local: `${base}/${'l/'.repeat(n)}`.slice(0, n), expect: ['INVALID_PATH'] })),
    // outside the roots: absolute, by "..", by a sibling of the root; never acceptable
    fc.oneof(fc.constantFrom(...outsideFiles, '/', '/tmp', ctx.sentinel.dir, `${ctx.sentinel.dir}/dir/new.bin`), escapes, sibling)
      .map((local) => ({ local, outside: true, expect: ['PATH_NOT_ALLOWED', 'LOCAL_NOT_FOUND', 'INVALID_PATH'] })),
    // encoded traversal is a literal name: nothing there
    fc.array(fc.constantFrom('%2e%2e', '%252e%252e', '%2e%2e%2f', '..%2f', '%c0%ae%c0%ae', '\uff0e\uff0e', '\u2025', '..\\'), { minLength: 1, maxLength: 5 })
      .map((segs) => ({ local: `${base}/${segs.join('/')}/${path.basename(ctx.sentinel.dir)}/secret.txt`, expect: ['LOCAL_NOT_FOUND'] })),
    // tricky names inside the root: uploads find nothing there, downloads may create them
    trickySegment.map((name) => ({ local: `${base}/${name}`, expect: upload ? ['LOCAL_NOT_FOUND'] : ['accept'] })),
    fc.constant({ local: upload ? ctx.srcFileNfd : `${ctx.dlDir}/caf\u0065\u0301-nfd.bin`, expect: upload ? ['LOCAL_NOT_FOUND'] : ['accept'] }),
    // a component longer than the file system allows (multi-byte: few characters, many bytes)
    fc.tuple(fc.integer({ min: 90, max: 1300 }), fc.constantFrom('\u20ac', '\u{1f4a9}', 'n')).filter(([n, c]) => Buffer.byteLength(c.repeat(n)) > 255)
      .map(([n, c]) => ({ local: `${base}/${c.repeat(n)}`, expect: ['INVALID_PATH'] }))
  ]
  if (upload) {
    cases.push(fc.constantFrom(
      { local: ctx.links.secret, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: ctx.links.secretRelative, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: ctx.links.chain, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: ctx.links.viaProc, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.links.dir}/note.txt`, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.links.dir}/../secret.txt`, outside: true, expect: ['PATH_NOT_ALLOWED', 'LOCAL_NOT_FOUND'] },
      { local: ctx.links.loop, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.links.loop}/x`, expect: ['PATH_NOT_ALLOWED'] },
      // a link to a missing file outside the roots: answered as where it leads, whether or not
      // that exists (a 422 there would tell a caller which files exist outside)
      { local: ctx.links.dangling, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: ctx.links.inside, expect: ['accept'] },
      // inside, but not regular files: refused at submit (stat, without opening the FIFO)
      { local: ctx.fifo, expect: ['INVALID_PATH'] },
      { local: ctx.srcDir, expect: ['INVALID_PATH'] },
      { local: ctx.srcDir + '/', expect: ['INVALID_PATH'] }
    ))
  } else {
    cases.push(fc.constantFrom(
      { local: `${ctx.links.dir}/new.bin`, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.links.dir}/note.txt`, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.links.loop}/x`, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.links.dangling}/x`, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.dlDir}/missing/x`, expect: ['LOCAL_NOT_FOUND'] },
      { local: `${ctx.srcFile}/x`, expect: ['LOCAL_NOT_FOUND'] },
      { local: ctx.root, outside: true, expect: ['PATH_NOT_ALLOWED'] },
      { local: `${ctx.root}/..`, outside: true, expect: ['PATH_NOT_ALLOWED', 'INVALID_PATH'] },
      { local: `${ctx.dlDir}/${'\u20ac'.repeat(100)}/x`, expect: ['INVALID_PATH'] },
      // inside: a symlink to the secret as the destination is replaced (rename), never written through
      { local: ctx.links.dlSecret, expect: ['accept'] },
      // a directory cannot be a download's destination (its rename cannot replace one), nor can a
      // name ending in "/"
      { local: ctx.dlDir, expect: ['INVALID_PATH'] },
      { local: ctx.dlDir + '/', expect: ['INVALID_PATH'] },
      { local: `${ctx.dlDir}/new/`, expect: ['INVALID_PATH'] },
      { local: `${ctx.dlDir}/.`, expect: ['INVALID_PATH'] }
    ))
  }
  return fc.oneof(...cases)
}

// The callback policy, stated independently of the daemon: an http URL on the receiver's host and
// port, under /hooks/, without credentials, fragment or an encoded slash or backslash in its path
// (a receiver may decode "..%2f"), at most 2048 characters.
export function callbackAllowed (ctx, s) {
  if (typeof s !== 'string' || s.length > 2048) return false
  let u
  try { u = new URL(s) } catch { return false }
  return u.protocol === 'http:' && u.hostname === '127.0.0.1' && u.port === String(ctx.recvPort) &&
    !u.username && !u.password && !u.hash && u.pathname.startsWith('/hooks/') && !/%(2f|5c)/i.test(u.pathname)
}

export function callbackArb (ctx) {
  const R = ctx.recvPort
  const E = ctx.evilPort
  const ok = `http://127.0.0.1:${R}/hooks/`
  const hostile = [
    `http://127.0.0.2:${R}/hooks/`, `http://localhost:${R}/hooks/`, 'http://evil.example/hooks/', `http://127.0.0.1.evil.example:${R}/hooks/`,
    `http://127.0.0.1:${E}/hooks/`, `http://127.0.0.1:${R}@127.0.0.1:${E}/hooks/`, `http://user:pass@127.0.0.1:${R}/hooks/x`,
    `http://127.0.0.1:${R}%40127.0.0.1:${E}/hooks/`, `http://127.0.0.1:${E}\\@127.0.0.1:${R}/hooks/`, `http://127.0.0.1:${E}#@127.0.0.1:${R}/hooks/`,
    `http://127.0.0.1:${E}?@127.0.0.1:${R}/hooks/`, `http://%31%32%37.0.0.1:${E}/hooks/`, `http://0x7f.1:${E}/hooks/`, `http://2130706433:${E}/hooks/`,
    `http://017700000001:${E}/hooks/`, `http://[::1]:${R}/hooks/`, `http://[::ffff:127.0.0.1]:${R}/hooks/`, `http://[0:0:0:0:0:ffff:7f00:1]:${R}/hooks/`,
    `http://[::1]:${E}/hooks/`, `http://\uff11\uff12\uff17.0.0.1:${E}/hooks/`, `http://127.0.0.1:${R}/hooks`, `http://127.0.0.1:${R}/hooksX/`,
    `http://127.0.0.1:${R}/HOOKS/`, `${ok}../admin`, `${ok}%2e%2e/admin`, `${ok}.%2e/admin`, `${ok}%2E%2E/`, `${ok}x#frag`, `${ok}#`,
    `https://127.0.0.1:${R}/hooks/`, 'file:///etc/passwd', `file://127.0.0.1:${R}/hooks/`, `gopher://127.0.0.1:${R}/hooks/`, 'javascript:alert(1)',
    `ws://127.0.0.1:${R}/hooks/`, `ftp://127.0.0.1:${R}/hooks/`, `//127.0.0.1:${R}/hooks/`, '/hooks/', `127.0.0.1:${R}/hooks/`,
    `http://127.0.0.1:${R}:${E}/hooks/`, `http://127.0.0.1:0${R}/hooks/`, `http:/127.0.0.1:${R}/hooks/`, `http:\\\\127.0.0.1:${E}\\hooks\\`,
    ` http://127.0.0.1:${E}/hooks/`, `http://127.0.0.1:${R}/hooks/\r\nX-Injected: 1`, `http://127.0.0.1:${R}\r\nX-Injected: 1/hooks/`,
    `${ok}${'a'.repeat(2100)}`, `http://127.0.0.1:${R}/hooks/%0d%0aX-Injected:%201`, `${ok}%2e%2e%2fadmin`, `${ok}..%5cadmin`
  ]
  // Spellings of the allowed place itself: taking them is fine (same host, port and path).
  const sameHost = [
    `${ok}done`, `${ok}x?y=1&z=%0d%0a`, `HTTP://127.0.0.1:${R}/hooks/x`, `http://127.1:${R}/hooks/x`, `http://2130706433:${R}/hooks/x`,
    `http://127.0.0.1:${R}/hooks/a/../b`, `http://127.0.0.1:${R}/hooks/./x`, `http://127\u30020\u30020\u30021:${R}/hooks/x`,
    `\thttp://127.0.0.1:${R}/hooks/x`, `http://127.0.0.1:${R}/ho\toks/x`, `${ok}redirect`, `${ok}redirect-2`
  ]
  return fc.oneof(
    fc.constantFrom(...hostile, ...sameHost),
    fc.constantFrom(...NOT_STRINGS),
    fc.webUrl({ withQueryParameters: true, withFragments: true }),
    fc.tuple(fc.constantFrom(...hostile, ...sameHost), trickySegment).map(([u, s]) => u + pctEncode(s, /[A-Za-z0-9_.~%/-]/).slice(0, 300))
  ).map((callback) => ({
    callback,
    expect: callback === null ? ['accept'] : callbackAllowed(ctx, callback) ? ['accept'] : ['CALLBACK_NOT_ALLOWED', 'INVALID_REQUEST']
  }))
}

// A valid job: a small upload of a fixture, or a download of an existing remote into dl/.
function validJob (ctx) {
  return fc.record({
    direction: fc.constantFrom('upload', 'download'),
    target: fc.constantFrom(...ctx.targets),
    name: plainName,
    overwrite: fc.boolean()
  }).map(({ direction, target, name, overwrite }) => direction === 'upload'
    ? { direction, target, local: ctx.srcFile, remote: `/fuzz/up/${name}`, overwrite }
    : { direction, target, local: `${ctx.dlDir}/${name}.bin`, remote: ctx.remoteFixture, overwrite })
}

function mutate (field, arb) {
  return (job) => arb.map(({ expect, outside, ...patch }) => {
    const value = patch[field]
    const body = { ...job }
    if (value === undefined && field in patch) delete body[field]
    else body[field] = value
    // A path with a lone surrogate (no UTF-8 form) is malformed, whatever else it says.
    if ((field === 'local' || field === 'remote') && typeof value === 'string' && !value.isWellFormed()) expect = ['INVALID_PATH']
    return { body, expect, outside: Boolean(outside), label: `${field}` }
  })
}

// POST /v1/jobs bodies: a valid job with one hostile field, or a hostile body as a whole.
export function submitArb (ctx) {
  const fieldMutations = (job) => fc.oneof(
    { weight: 5, arbitrary: localCases(ctx, job.direction).chain((c) => mutate('local', fc.constant(c))(job)) },
    { weight: 2, arbitrary: mutate('remote', fc.oneof(remoteRefused.map((remote) => ({ remote, expect: ['INVALID_PATH'] })), remoteTaken.map((remote) => ({ remote, expect: ['accept'] })), fc.constantFrom(...NOT_STRINGS, undefined).map((remote) => ({ remote, expect: ['INVALID_PATH'] }))))(job) },
    { weight: 1, arbitrary: mutate('direction', fc.constantFrom('UPLOAD', 'up', '', ' upload', 'upload\u0000', 'download ', 'Download', 'copy', ...NOT_STRINGS, undefined).map((direction) => ({ direction, expect: ['INVALID_REQUEST'] })))(job) },
    {
      weight: 1,
      arbitrary: mutate('target', fc.oneof(
        fc.oneof(fc.constantFrom('__proto__', 'constructor', 'toString', 'hasOwnProperty', 'LOCAL', 'local ', '\uff4c\uff4f\uff43\uff41\uff4c', 'loca\u200bl', 'dav/..', '../local', '', 'x'.repeat(200)), trickySegment)
          .filter((target) => !ctx.targets.includes(target)).map((target) => ({ target, expect: ['UNKNOWN_TARGET'] })),
        fc.constantFrom(...NOT_STRINGS, undefined).map((target) => ({ target, expect: ['INVALID_REQUEST'] }))
      ))(job)
    },
    { weight: 1, arbitrary: mutate('overwrite', fc.constantFrom('true', 'false', 1, 0, null, [], {}, 'yes').map((overwrite) => ({ overwrite, expect: ['INVALID_REQUEST'] })))(job) },
    { weight: 1, arbitrary: mutate('sha256', fc.oneof(fc.constantFrom('', 'g'.repeat(64), 'a'.repeat(63), 'a'.repeat(65), ` ${'a'.repeat(64)}`, 1, [], {}, true).map((sha256) => ({ sha256, expect: ['INVALID_REQUEST'] })), fc.constantFrom('A'.repeat(64), 'f'.repeat(64), null).map((sha256) => ({ sha256, expect: ['accept'] }))))(job) },
    { weight: 1, arbitrary: mutate('id', fc.oneof(fc.constantFrom('short', 'x'.repeat(65), 'has space id', 'dots.are.not.ok', '../../etc/pw', 'idwith\u00e9accent', 'nul\u0000nul00', '', 12345678, [], {}), fc.string({ minLength: 8, maxLength: 20 }).filter((s) => !/^[A-Za-z0-9_-]{8,64}$/.test(s))).map((id) => ({ id, expect: ['INVALID_REQUEST'] })))(job) },
    { weight: 2, arbitrary: mutate('callback', callbackArb(ctx))(job) },
    { weight: 1, arbitrary: fc.constantFrom('Local', 'remotePath', 'constructor', 'prototype', 'toString', 'state', 'attempts', 'error', '').map((key) => ({ body: { ...job, [key]: 'x' }, expect: ['INVALID_REQUEST'], outside: false, label: 'unknown field' })) },
    {
      weight: 1,
      arbitrary: fc.integer({ min: 5000, max: 60000 }).chain((n) => fc.constantFrom('target', 'id', 'direction', 'callback', 'sha256').map((f) => ({
        body: { ...job, [f]: 'h'.repeat(n) }, expect: [{ target: 'UNKNOWN_TARGET', callback: 'INVALID_REQUEST' }[f] ?? 'INVALID_REQUEST'], outside: false, label: `huge ${f}`
      })))
    }
  )
  const asCase = ({ body, expect, outside, label }) => ({ text: JSON.stringify(body), expect, outside, label })
  return fc.oneof(
    { weight: 14, arbitrary: validJob(ctx).chain(fieldMutations).map(asCase) },
    { weight: 1, arbitrary: validJob(ctx).map((body) => ({ text: JSON.stringify(body), expect: ['accept'], outside: false, label: 'valid' })) },
    { weight: 3, arbitrary: wholeBodyArb(ctx) }
  )
}

function wholeBodyArb (ctx) {
  const job = { direction: 'upload', target: ctx.targets[0], local: ctx.srcFile, remote: '/fuzz/whole' }
  const valid = JSON.stringify(job)
  const outsideLocal = ctx.sentinel.secretPath
  return fc.oneof(
    // not JSON at all, or JSON whose top level is not an object or array
    fc.oneof(fc.string({ maxLength: 200 }), fc.constantFrom('', ' ', '{', '}', '{"a":', '{"direction":"upload",}', "{'a':1}", '{"a":1}}', 'nul', 'NaN', '[1,]', '\ufeff{}', '{"a":"\\x41"}', valid.slice(0, -1), valid + 'x'))
      .filter((t) => { try { const v = JSON.parse(t); return v === null || typeof v !== 'object' } catch { return true } })
      .map((text) => ({ text, expect: ['INVALID_JSON'], label: 'malformed json' })),
    fc.oneof(fc.jsonValue({ maxDepth: 3 }).filter((v) => v === null || typeof v !== 'object'), fc.constantFrom(1, 'x', true, null, 1e308))
      .map((v) => ({ text: JSON.stringify(v), expect: ['INVALID_JSON'], label: 'json scalar' })),
    fc.oneof(fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 5 }), fc.constant([job]))
      .map((v) => ({ text: JSON.stringify(v), expect: ['INVALID_REQUEST'], label: 'json array' })),
    fc.integer({ min: 1, max: 20000 }).map((n) => ({ text: '['.repeat(n) + ']'.repeat(n), expect: ['INVALID_REQUEST'], label: 'deep array' })),
    fc.integer({ min: 1, max: 10000 }).map((n) => ({ text: `{"local":${'{"a":'.repeat(n)}1${'}'.repeat(n)}}`, expect: ['INVALID_REQUEST'], label: 'deep object' })),
    fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { minKeys: 1, maxKeys: 5 })
      .filter((d) => Object.keys(d).some((k) => !['id', 'direction', 'target', 'local', 'remote', 'overwrite', 'sha256', 'callback'].includes(k)))
      .map((d) => ({ text: JSON.stringify({ ...job, ...d }), expect: ['INVALID_REQUEST'], label: 'unknown keys' })),
    fc.constantFrom(
      { text: valid.replace('{', '{"__proto__":{"target":"local"},'), expect: ['INVALID_REQUEST'], label: '__proto__' },
      { text: valid.replace('{', '{"constructor":{"prototype":{}},'), expect: ['INVALID_REQUEST'], label: 'constructor' },
      // duplicate keys: the last one counts, as JSON.parse has it
      { text: valid.replace('}', `,"local":${JSON.stringify(outsideLocal)}}`), expect: ['PATH_NOT_ALLOWED'], outside: true, label: 'duplicate key, outside last' },
      { text: valid.replace('{', `{"local":${JSON.stringify(outsideLocal)},`), expect: ['accept'], label: 'duplicate key, inside last' },
      { text: valid.replace('"upload"', '"\\u0075pload"'), expect: ['accept'], label: 'escaped value' },
      { text: valid.replace('"local"', '"\\u006cocal"'), expect: ['accept'], label: 'escaped key' }
    ),
    // bytes that are not UTF-8 (overlong encodings of "." and "/", lone continuation bytes,
    // surrogates encoded in UTF-8) inside the remote name: refused, never decoded as U+FFFD
    fc.array(fc.constantFrom('c0ae', 'c0af', 'e080ae', 'f08080ae', '80', 'bf', 'ff', 'fe', 'eda080', 'c1bf', 'f4908080'), { minLength: 1, maxLength: 6 })
      .map((bytes) => {
        const [head, tail] = valid.split('/fuzz/whole')
        return { bytes: Buffer.concat([Buffer.from(head + '/fuzz/bytes-'), Buffer.from(bytes.join(''), 'hex'), Buffer.from(tail)]), expect: ['INVALID_JSON'], label: 'invalid utf-8 in remote' }
      }),
    fc.array(fc.constantFrom('c0ae', 'ff', '80', '00'), { minLength: 1, maxLength: 4 })
      .map((bytes) => ({ bytes: Buffer.concat([Buffer.from(valid.slice(0, 1)), Buffer.from(bytes.join(''), 'hex'), Buffer.from(valid.slice(1))]), expect: ['INVALID_JSON'], label: 'invalid utf-8 in syntax' })),
    // over 64 KiB, with or without a Content-Length that says so
    fc.integer({ min: 64 * 1024 + 1, max: 300 * 1024 }).map((n) => ({ text: valid.replace('/fuzz/whole', '/' + 'b'.repeat(n)), expect: ['PAYLOAD_TOO_LARGE'], label: 'oversized body' })),
    fc.constantFrom('gzip', 'deflate', 'br', 'x-custom').map((enc) => ({ text: valid, headers: { 'content-encoding': enc }, expect: ['INVALID_REQUEST'], label: 'content-encoding' }))
  ).map((c) => ({ outside: false, ...c }))
}

// GET/DELETE on jobs with invalid ids and bad query strings, other methods, unknown routes.
export function queryArb (ctx) {
  const weirdId = fc.oneof(
    fc.string({ maxLength: 80 }).map((s) => pctEncode(s)),
    fc.constantFrom('..', '%2e%2e', '..%2f..%2fetc%2fpasswd', '%00', '%zz', '%E0%A4%A', '%', '%C0%AE', '%FF', 'a%2Fb', 'x'.repeat(8000),
      '__proto__', 'constructor', 'hasOwnProperty', pctEncode('\u202e'), '*', '%20', '.', '-' + 'a'.repeat(7)),
    trickySegment.map((s) => pctEncode(s, /[A-Za-z0-9_.~%-]/))
  ).filter((id) => id.length > 0)
  const badWait = fc.constantFrom('abc', '-1', '-0.5', 'NaN', 'Infinity', '1e400', '-Infinity', '1,2', '1;2', '%00', '1%00', 'null', 'true', '[]', '1abc',
    '1e3', '99999999', '300.5', '0x10', '') // only decimal seconds from 0 to 300
  const goodWait = fc.constantFrom('0', '1', '2.5', '300', '0.25')
  const badState = fc.oneof(fc.constantFrom('QUEUED', 'queued%20', '%20running', 'queued+', '', 'all', '__proto__', 'constructor', 'toString', 'length', '%00', 'succeeded%00'), fc.string({ maxLength: 20 }).map((s) => pctEncode(s)))
    .filter((s) => !['queued', 'running', 'succeeded', 'failed', 'cancelled'].includes(decodeURIComponentSafe(s)))
  const badLimit = fc.constantFrom('0', '-1', '10001', '1.5', 'abc', '', 'NaN', '1e5', '%00', 'Infinity')
  const finished = ctx.finishedId
  return fc.oneof(
    fc.tuple(fc.constantFrom('GET', 'DELETE'), weirdId).map(([method, id]) => ({ method, path: `/v1/jobs/${id}`, expect: ['JOB_NOT_FOUND', 'NOT_FOUND', 'INVALID_REQUEST'] })),
    fc.tuple(weirdId, badWait).map(([id, w]) => ({ method: 'GET', path: `/v1/jobs/${id}?wait=${w}`, expect: ['INVALID_REQUEST', 'JOB_NOT_FOUND', 'NOT_FOUND'] })),
    badWait.map((w) => ({ method: 'GET', path: `/v1/jobs/${finished}?wait=${w}`, expect: ['INVALID_REQUEST'] })),
    fc.constantFrom('wait=1&wait=2', 'wait[]=1', 'wait[a]=1', 'wait=1&wait=').map((q) => ({ method: 'GET', path: `/v1/jobs/${finished}?${q}`, expect: ['INVALID_REQUEST', 'accept'] })),
    goodWait.map((w) => ({ method: 'GET', path: `/v1/jobs/${finished}?wait=${w}`, expect: ['accept'] })),
    fc.constant({ method: 'DELETE', path: `/v1/jobs/${finished}`, expect: ['JOB_FINISHED'] }),
    badState.map((s) => ({ method: 'GET', path: `/v1/jobs?state=${s}`, expect: ['INVALID_REQUEST'] })),
    badLimit.map((l) => ({ method: 'GET', path: `/v1/jobs?limit=${l}`, expect: ['INVALID_REQUEST'] })),
    fc.constantFrom('state=queued&state=failed', 'state[]=queued', 'limit=1&limit=2', 'state=failed&limit=5', 'limit=10000', 'state=succeeded&limit=1&x=%00')
      .map((q) => ({ method: 'GET', path: `/v1/jobs?${q}`, expect: ['INVALID_REQUEST', 'accept'] })),
    fc.tuple(fc.constantFrom('PUT', 'PATCH', 'OPTIONS', 'POST'), fc.constantFrom(`/v1/jobs/${finished}`, '/v1/jobs/x', '/v1/observations'))
      .filter(([m, p]) => !(m === 'POST' && p === '/v1/observations'))
      .map(([method, path]) => ({ method, path, expect: ['METHOD_NOT_ALLOWED'] })),
    fc.tuple(fc.constantFrom('PUT', 'PATCH', 'DELETE'), fc.constant('/v1/jobs')).map(([method, path]) => ({ method, path, expect: ['METHOD_NOT_ALLOWED'] })),
    fc.oneof(fc.constantFrom('/', '/v1', '/v2/jobs', '/v1/jobz', '/v1/jobs/a/b', '//v1/jobs', '/v1//jobs', '/v1/jobs/%2e%2e/%2e%2e/healthz', '/.env', '/etc/passwd', '/v1/stream', '/v1/stream/local'),
      fc.string({ maxLength: 40 }).map((s) => '/' + pctEncode(s, /[A-Za-z0-9_.~%/-]/)))
      .map((path) => ({ method: 'GET', path, expect: null })),
    // the file-streaming route, with traversal in every spelling: never a byte of the secret
    fc.tuple(fc.constantFrom('GET', 'HEAD'), fc.constantFrom(...ctx.targets, '..', '%2e%2e', 'nope', '__proto__', `${ctx.targets[0]}%2f..`),
      fc.constantFrom('../secret-beside-store.txt', '..%2fsecret-beside-store.txt', '%2e%2e/secret-beside-store.txt', '%2e%2e%2fsecret-beside-store.txt',
        '..%252fsecret-beside-store.txt', '%c0%ae%c0%ae/secret-beside-store.txt', '..\\secret-beside-store.txt', '%00', 'a%00b', 'fixtures/a.txt',
        `..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2f${ctx.sentinel.secretPath.slice(1).replaceAll('/', '%2f')}`, `${'..%2f'.repeat(12)}etc%2fpasswd`, 'fixtures', '',
        `${'%2e%2e/'.repeat(12)}${ctx.sentinel.secretPath.slice(1)}`))
      .map(([method, target, p]) => ({ method, path: `/v1/stream/${target}/${p}`, expect: null, stream: true, legit: ctx.targets.includes(target) && p === 'fixtures/a.txt' })),
    // observations: anything but the two known shapes is 400
    fc.oneof(fc.jsonValue({ maxDepth: 3 }), fc.record({ type: fc.constantFrom('transfer', 'handoff', '__proto__', 'x'), via: fc.constantFrom('php_curl', 'x'), bytes: fc.oneof(fc.integer(), fc.double(), fc.string()) }, { requiredKeys: [] }))
      .map((v) => ({ method: 'POST', path: '/v1/observations', body: JSON.stringify(v), expect: ['INVALID_REQUEST', 'INVALID_JSON', 'accept'] }))
  )
}

function decodeURIComponentSafe (s) {
  try { return decodeURIComponent(s) } catch { return s }
}

// Raw requests: CRLF and bare CR/LF in fields, obs-fold, duplicate or conflicting framing
// headers, Transfer-Encoding variants, bad chunking, huge or many headers, bad request lines.
export function rawArb (ctx) {
  const body = JSON.stringify({ direction: 'upload', target: ctx.targets[0], local: ctx.srcFile, remote: '/fuzz/raw' })
  const len = Buffer.byteLength(body)
  const chunked = `${len.toString(16)}\r\n${body}\r\n0\r\n\r\n`
  const method = fc.constantFrom('GET', 'POST', 'DELETE', 'PUT', 'OPTIONS', 'TRACE', 'CONNECT', 'PRI', 'post', 'G ET', 'POST\u0000', 'X'.repeat(40), '')
  const target = fc.constantFrom('/v1/jobs', '/v1/jobs?x=1', '/v1/jobs/abc', '/healthz', '*', 'http://127.0.0.1/v1/jobs', '/v1/jobs\r\nX-Injected: 1',
    '/v1/jobs\nX-Injected: 1', '/v1/jobs\rX: 1', '/v1/jobs%0d%0aX-Injected:%201', '/v1/jobs\u0000', '/v1/ jobs', '/v1/jobs\t', `/${'a'.repeat(17000)}`, '/\u00ff\u00fe', '')
  const version = fc.constantFrom('HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0', 'HTTP/1.1 ', 'http/1.1', 'HTTP/9.9', 'HTTP/1', '')
  const framing = fc.constantFrom(
    { headers: [`Content-Length: ${len}`], body },
    { headers: [`Content-Length: ${len}`, `Content-Length: ${len}`], body },
    { headers: [`Content-Length: ${len}`, `Content-Length: ${len + 1}`], body: body + 'x' },
    { headers: [`Content-Length: ${len}, ${len}`], body },
    { headers: ['Content-Length: -1'], body },
    { headers: [`Content-Length: +${len}`], body },
    { headers: [`Content-Length: 0x${len.toString(16)}`], body },
    { headers: [`Content-Length:  ${len} `], body },
    { headers: ['Content-Length: 99999999999999999999999'], body },
    { headers: [`Content-Length: ${len - 5}`], body },
    { headers: ['Transfer-Encoding: chunked'], body: chunked },
    { headers: ['Transfer-Encoding: chunked', `Content-Length: ${len}`], body: chunked },
    { headers: ['Transfer-Encoding: Chunked'], body: chunked },
    { headers: ['Transfer-Encoding: chunked, identity'], body: chunked },
    { headers: ['Transfer-Encoding: identity'], body },
    { headers: ['Transfer-Encoding: gzip, chunked'], body: chunked },
    { headers: ['Transfer-Encoding: xchunked'], body: chunked },
    { headers: ['Transfer-Encoding:  chunked'], body: chunked },
    { headers: ['Transfer-Encoding: chunked\t'], body: chunked },
    { headers: ['Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'], body: chunked },
    { headers: ['Transfer-Encoding : chunked'], body: chunked },
    { headers: ['Transfer-Encoding:\u000bchunked'], body: chunked },
    { headers: ['Transfer-Encoding: chunked'], body: `zz\r\n${body}\r\n0\r\n\r\n` },
    { headers: ['Transfer-Encoding: chunked'], body: `${len.toString(16)};ext=${'e'.repeat(20000)}\r\n${body}\r\n0\r\n\r\n` },
    { headers: ['Transfer-Encoding: chunked'], body: `${len.toString(16)}\n${body}\n0\n\n` },
    { headers: ['Transfer-Encoding: chunked'], body: `-1\r\n${body}\r\n0\r\n\r\n` },
    { headers: ['Transfer-Encoding: chunked'], body: `ffffffffffffffffff\r\n${body}\r\n0\r\n\r\n` },
    { headers: ['Transfer-Encoding: chunked'], body: `${len.toString(16)}\r\n${body}\r\n0\r\nX-Trailer: 1\r\n\r\n` },
    { headers: [], body: '' },
    { headers: [], body }
  )
  const extra = fc.array(fc.constantFrom(
    'X-A: b\rX-B: c', 'X-A: b\nX-B: c', 'X-A: b\r\n continued', 'X-A: b\r\n\tcontinued', ' X-Lead: space', 'X A: b', ': novalue', 'X-A:\u0000b',
    'X-A: \u00ff\u00fe', 'Authorization: Bearer x\r\nX-Injected: 1', 'Expect: 100-continue', 'Expect: 200-ok', 'Expect: 100-continue, x',
    'Connection: upgrade\r\nUpgrade: h2c', 'Connection: upgrade\r\nUpgrade: websocket', 'Connection: close', 'Connection: keep-alive, x',
    'Content-Encoding: gzip', 'Content-Type: text/plain', 'Content-Type: application/json; charset=latin1', `X-Huge: ${'h'.repeat(17000)}`,
    Array.from({ length: 2500 }, (_, i) => `X-${i}: v`).join('\r\n'), 'Host: a', 'Host: a\r\nHost: b', 'Host:', `Host: ${'h'.repeat(300)}`,
    'X-Forwarded-For: 1.2.3.4', 'Range: bytes=0-'), { maxLength: 3 })
  const host = fc.constantFrom('Host: localhost', 'Host: localhost', 'Host: 127.0.0.1:1', '')
  return fc.tuple(method, target, version, host, framing, extra, fc.boolean()).map(([m, t, v, h, f, x, pipeline]) => {
    const head = [`${m} ${t} ${v}`.trimEnd(), ...(h ? [h] : []), ...f.headers, ...x].join('\r\n') + '\r\n\r\n'
    const one = head + f.body
    // A second, well-formed request behind the first: what it gets must still be a proper answer.
    const data = pipeline ? one + 'GET /v1/jobs/pipelined-x HTTP/1.1\r\nHost: localhost\r\n\r\n' : one
    // Every request is answered, a CONNECT (a tunnel request) too: 405, see listeners.js.
    return { data: Buffer.from(data, 'latin1'), label: JSON.stringify(head.slice(0, 120)), answers: pipeline ? 2 : 1 }
  })
}

// Authorization headers that are not exactly "Bearer <token>".
export function tokenArb (ctx) {
  const t = ctx.token
  const auth = fc.oneof(
    fc.constantFrom(undefined, '', 'Bearer', 'Bearer ', `bearer ${t}`, `BEARER ${t}`, `Bearer  ${t}`, `Bearer\t${t}`,
      `Bearer ${t.slice(0, -1)}`, `Bearer ${t}x`, `Bearer ${t.toUpperCase()}`, t, `Basic ${Buffer.from(`x:${t}`).toString('base64')}`,
      `Token ${t}`, `Bearer ${Buffer.from(t).toString('base64')}`, `Bearer ${t.slice(1)}`, `Bearer "${t}"`, `Bearer ${t},Bearer ${t}`),
    fc.string({ maxLength: 80 }).map((s) => s.replace(/[\r\n\0]/g, '')),
    fc.string({ minLength: t.length, maxLength: t.length }).map((s) => `Bearer ${s}`)
  ).filter((a) => a?.trim() !== `Bearer ${t}`) // whitespace around a field value is not part of it (RFC 9110 5.5)
  const route = fc.constantFrom(
    { method: 'POST', path: '/v1/jobs', body: JSON.stringify({ direction: 'upload', target: ctx.targets[0], local: ctx.srcFile, remote: '/fuzz/tok' }) },
    { method: 'POST', path: '/v1/jobs?x=1', body: '{}' },
    { method: 'GET', path: '/v1/jobs' },
    { method: 'GET', path: '/v1/jobs/some-job-id' },
    { method: 'DELETE', path: '/v1/jobs/some-job-id' },
    { method: 'GET', path: '/metrics' },
    { method: 'POST', path: '/v1/observations', body: '{"type":"handoff","transport":"unix","acked":true,"seconds":0.1}' },
    { method: 'GET', path: '/v1/stream/local/fixtures/a.txt' },
    { method: 'GET', path: '/nope' },
    { method: 'GET', path: `/v1/jobs?token=${t}` }
  )
  return fc.tuple(auth, route).map(([authorization, r]) => ({ ...r, authorization, expect: ['UNAUTHORIZED'] }))
}
