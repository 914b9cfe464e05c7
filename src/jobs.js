// The job record: what a caller may ask for, what is persisted, and what the API shows.
import crypto from 'node:crypto'
import { InvalidRequestError, UnknownTargetError, CallbackNotAllowedError } from './errors.js'
import { checkDestinationSyntax, checkLocalSyntax, normalizeRemote } from './paths.js'
import { DIGESTS } from './config.js'

export const STATES = Object.freeze(['queued', 'running', 'succeeded', 'failed', 'cancelled'])
export const FINAL_STATES = new Set(['succeeded', 'failed', 'cancelled'])
const FIELDS = new Set(['id', 'direction', 'target', 'local', 'remote', 'overwrite', 'sha256', 'digest', 'callback'])
export const ID = /^[A-Za-z0-9_-]{8,64}$/ // a job id, ours or a client's
const SHA256 = /^[0-9a-fA-F]{64}$/

// Validates a POST /v1/jobs body; throws a 4xx SidecarError naming the field.
export function parseJobRequest (body, { targets, callbacks }) {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new InvalidRequestError('the body must be a JSON object')
  }
  for (const key of Object.keys(body)) {
    if (!FIELDS.has(key)) throw new InvalidRequestError(`unknown field ${JSON.stringify(key.slice(0, 64))}`)
  }
  const { id, direction, target, local, remote, overwrite = false, sha256, digest, callback } = body
  if (id !== undefined && id !== null && (typeof id !== 'string' || !ID.test(id))) { // null: absent, like sha256 and callback
    throw new InvalidRequestError('id must be 8–64 characters of A-Z a-z 0-9 _ -')
  }
  if (direction === undefined) throw new InvalidRequestError('direction is required: "upload" or "download"')
  if (direction !== 'upload' && direction !== 'download') {
    throw new InvalidRequestError('direction must be "upload" or "download"')
  }
  if (typeof target !== 'string') throw new InvalidRequestError('target must be the name of a configured target')
  if (!Object.hasOwn(targets, target)) throw unknownTarget(target, targets)
  if (typeof overwrite !== 'boolean') throw new InvalidRequestError('overwrite must be true or false')
  if (sha256 !== undefined && sha256 !== null && (typeof sha256 !== 'string' || !SHA256.test(sha256))) {
    throw new InvalidRequestError('sha256 must be 64 hexadecimal characters')
  }
  if (digest !== undefined && digest !== null && !DIGESTS.includes(digest)) throw new InvalidRequestError('digest must be "sha256" or "none"')
  return {
    id: id ?? null,
    direction,
    target,
    local: direction === 'download' ? checkDestinationSyntax(local) : checkLocalSyntax(local),
    remote: normalizeRemote(remote),
    overwrite,
    expectedSha256: sha256 ? sha256.toLowerCase() : null,
    digest: digest ?? null,
    callback: callback === undefined || callback === null ? null : checkCallback(callback, callbacks.allow)
  }
}

// Names the configured targets (their names are not secret), at most ten.
export function unknownTarget (target, targets) {
  const names = Object.keys(targets)
  return new UnknownTargetError(`no target named ${JSON.stringify(target.slice(0, 64))} (configured: ${names.slice(0, 10).map((n) => JSON.stringify(n)).join(', ')}${names.length > 10 ? ', …' : ''})`)
}

// A callback must fall under a configured prefix after URL normalisation (so "/hooks/../admin"
// does not pass as "/hooks/"); no credentials, no fragment.
function checkCallback (callback, allow) {
  if (typeof callback !== 'string' || callback.length > 2048) throw new InvalidRequestError('callback must be a URL string')
  let url
  try {
    url = new URL(callback)
  } catch {
    throw new InvalidRequestError('callback must be an absolute URL')
  }
  if (url.username || url.password || url.hash) throw new CallbackNotAllowedError('callback must not carry credentials or a fragment')
  if (ENCODED_SLASH.test(url.pathname)) throw new CallbackNotAllowedError('callback path must not contain an encoded slash or backslash')
  if (!callbackAllowed(url.href, allow)) {
    throw new CallbackNotAllowedError('callback is not under a prefix listed in callbacks.allow')
  }
  return url.href
}

// An encoded slash or backslash ("/hooks/..%2fadmin") is one segment here, but a receiver that
// decodes it before resolving ".." would leave the prefix.
const ENCODED_SLASH = /%(2f|5c)/i

// The rule at submission and at every delivery (callbacks.js). `href` is a normalised URL
// (checkCallback's result, as journaled).
export function callbackAllowed (href, allow) {
  return !ENCODED_SLASH.test(new URL(href).pathname) && allow.some((prefix) => href.startsWith(prefix))
}

// 128 random bits per id, taken from a batch filled 256 ids at a time (as crypto.randomUUID does):
// one call into OpenSSL's generator per call cost a hand-off ~10–20 µs (its getpid(2) and locking).
const ID_BYTES = 16
const idBatch = Buffer.alloc(256 * ID_BYTES)
let idOffset = idBatch.length

export function newJobId () {
  if (idOffset === idBatch.length) {
    crypto.randomFillSync(idBatch)
    idOffset = 0
  }
  idOffset += ID_BYTES
  return idBatch.toString('base64url', idOffset - ID_BYTES, idOffset)
}

export function newJob (spec, now) {
  return {
    id: spec.id ?? newJobId(),
    direction: spec.direction,
    target: spec.target,
    local: spec.local,
    remote: spec.remote,
    overwrite: spec.overwrite,
    expectedSha256: spec.expectedSha256,
    digest: spec.digest,
    callback: spec.callback,
    callbackState: null,
    state: 'queued',
    attempts: 0,
    bytes: 0,
    size: null,
    sha256: null,
    rate: null,
    error: null,
    createdAt: now,
    updatedAt: now,
    startedAt: null,
    finishedAt: null,
    nextAttemptAt: null,
    // "publishing" while a verified file is being published (journaled: a restart finishes it);
    // undefined otherwise, so JSON leaves it out. Set, never deleted: a deleted property turns
    // the object into a dictionary (1.3 KiB more for every finished job kept).
    phase: undefined
  }
}

// Whether a job hashes its bytes with sha256: asked for by the job (`digest`), else its target's
// `digest`; always when an expected sha256 is given. A record journaled before `digest` existed
// has none, and hashes as its target says.
export function hashesSha256 (job, target) {
  return job.expectedSha256 !== null || (job.digest ?? target.digest ?? 'sha256') !== 'none'
}

// Same request twice (a client retrying with its own id) is not a conflict.
export function sameRequest (job, spec) {
  return job.direction === spec.direction && job.target === spec.target && job.local === spec.local &&
    job.remote === spec.remote && job.overwrite === spec.overwrite && job.expectedSha256 === spec.expectedSha256 &&
    (job.digest ?? null) === spec.digest &&
    (job.callback ?? null) === spec.callback
}
