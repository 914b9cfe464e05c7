// One base error with a stable `code` and an HTTP `statusCode`; one subclass per failure.
// Job failures carry `retryable`, which the scheduler uses to decide whether to back off and retry.

export class SidecarError extends Error {
  #retryable
  // `retryable`: this one's, where it differs from its code's (a failure known to be transient).
  constructor (message, { cause, details, retryable } = {}) {
    super(message, cause ? { cause } : undefined)
    this.name = this.constructor.name
    if (details) this.details = details
    this.#retryable = retryable
  }

  get code () { return this.constructor.code }
  get statusCode () { return this.constructor.statusCode }
  get retryable () { return this.#retryable ?? this.constructor.retryable }

  toJSON () {
    return { code: this.code, message: this.message, ...this.details }
  }
}

function define (code, statusCode, retryable = false) {
  const cls = class extends SidecarError {}
  Object.defineProperty(cls, 'name', { value: code.toLowerCase().replace(/(^|_)(\w)/g, (m, s, c) => c.toUpperCase()) + 'Error' })
  cls.code = code
  cls.statusCode = statusCode
  cls.retryable = retryable
  return cls
}

// Errors of the control API: answered to the caller, the job (if any) is not created.
export const InvalidJsonError = define('INVALID_JSON', 400)
export const InvalidRequestError = define('INVALID_REQUEST', 400)
export const PayloadTooLargeError = define('PAYLOAD_TOO_LARGE', 413)
export const UnauthorizedError = define('UNAUTHORIZED', 401)
export const BrowserRefusedError = define('BROWSER_REFUSED', 403)
export const RouteNotFoundError = define('NOT_FOUND', 404)
export const MethodNotAllowedError = define('METHOD_NOT_ALLOWED', 405)
export const JobNotFoundError = define('JOB_NOT_FOUND', 404)
export const JobConflictError = define('JOB_CONFLICT', 409)
export const JobFinishedError = define('JOB_FINISHED', 409)
export const UnknownTargetError = define('UNKNOWN_TARGET', 400)
export const CallbackNotAllowedError = define('CALLBACK_NOT_ALLOWED', 400)
export const RangeNotSatisfiableError = define('RANGE_NOT_SATISFIABLE', 416)
export const PathNotAllowedError = define('PATH_NOT_ALLOWED', 403)
export const InvalidPathError = define('INVALID_PATH', 400)
export const LocalNotFoundError = define('LOCAL_NOT_FOUND', 422)
export const QueueFullError = define('QUEUE_FULL', 429)
export const ShuttingDownError = define('SHUTTING_DOWN', 503)
export const StoreUnavailableError = define('STORE_UNAVAILABLE', 503)
export const InternalError = define('INTERNAL', 500)

// Errors a job can end with (in `error.code` of the job record). PATH_NOT_ALLOWED, LOCAL_NOT_FOUND
// and INVALID_PATH above can also end a job whose local path changed after it was accepted.
export const LocalExistsError = define('LOCAL_EXISTS', 409)
export const LocalIoError = define('LOCAL_IO', 500)
export const RemoteNotFoundError = define('REMOTE_NOT_FOUND', 404)
export const RemoteExistsError = define('REMOTE_EXISTS', 409)
export const PermissionDeniedError = define('PERMISSION_DENIED', 403)
export const RemoteRejectedError = define('REMOTE_REJECTED', 502)
export const RemoteQuotaExceededError = define('REMOTE_QUOTA_EXCEEDED', 507)
export const RemoteUnavailableError = define('REMOTE_UNAVAILABLE', 503, true)
export const NetworkError = define('NETWORK_ERROR', 503, true)
export const TimeoutError = define('TIMEOUT', 504, true)
export const SizeMismatchError = define('SIZE_MISMATCH', 502, true)
export const Sha256MismatchError = define('SHA256_MISMATCH', 422)
// The target's own checksum of what it stored (HDFS GETFILECHECKSUM) differs from the bytes sent
// or received: corrupted on the way, so the transfer is redone.
export const ChecksumMismatchError = define('CHECKSUM_MISMATCH', 502, true)
// The thread that hashes large transfers (digest.js) stopped under the attempt (its heap limit, a
// crash): the next attempt starts a new one.
export const HashingFailedError = define('HASHING_FAILED', 500, true)
export const CancelledError = define('CANCELLED', 409)
// The job's last attempt (its retry.attempts-th; the earlier ones were cut too, or failed) was cut
// by the daemon stopping without a shutdown (a crash, kill -9, the machine): the job may be what
// crashes it, so it is not run again.
export const InterruptedError = define('INTERRUPTED', 500)

export const API_ERROR_CODES = [
  InvalidJsonError, InvalidRequestError, PayloadTooLargeError, UnauthorizedError, BrowserRefusedError, RouteNotFoundError,
  MethodNotAllowedError, JobNotFoundError, JobConflictError, JobFinishedError, UnknownTargetError,
  CallbackNotAllowedError, RangeNotSatisfiableError, PathNotAllowedError, InvalidPathError, LocalNotFoundError,
  QueueFullError, ShuttingDownError, StoreUnavailableError, InternalError
].map((e) => e.code)

export const JOB_ERROR_CODES = [
  PathNotAllowedError, InvalidPathError, LocalNotFoundError, LocalExistsError, LocalIoError,
  RemoteNotFoundError, RemoteExistsError, PermissionDeniedError, RemoteRejectedError, RemoteQuotaExceededError,
  RemoteUnavailableError, NetworkError, TimeoutError, SizeMismatchError, Sha256MismatchError, ChecksumMismatchError,
  HashingFailedError, CancelledError, InterruptedError
].map((e) => e.code)

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH',
  'EAI_AGAIN', 'ENOTFOUND', 'ECONNABORTED', 'ERR_STREAM_PREMATURE_CLOSE', 'ERR_BAD_HTTP_RESPONSE'])
const TIMEOUT_CODES = new Set(['ETIMEDOUT'])
const LOCAL_NOT_FOUND_CODES = new Set(['ENOENT', 'ENOTDIR'])
// A server's certificate that does not verify, or a TLS handshake that fails (EPROTO: no TLS there):
// the server is refused, with the reason (not INTERNAL, nor LOCAL_IO as an E-code would be).
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_)|CERT|^UNABLE_TO_|^EPROTO$/

// Turns whatever a transfer threw (node:http, fs, our own) into a SidecarError.
export function toSidecarError (err) {
  if (err instanceof SidecarError) return err
  const code = err?.code ?? err?.cause?.code
  const message = err?.message ?? String(err)
  if (TIMEOUT_CODES.has(code)) return new TimeoutError(`${message} (${code})`, { cause: err })
  // HPE_*: node's HTTP parser refused what the server sent (a broken or cut answer).
  if (NETWORK_CODES.has(code) || /^HPE_/.test(code ?? '')) return new NetworkError(`${message} (${code})`, { cause: err })
  if (TLS_CODE.test(code ?? '')) return new RemoteRejectedError(`TLS: ${message} (${code})`, { cause: err })
  if (LOCAL_NOT_FOUND_CODES.has(code)) return new LocalNotFoundError(message, { cause: err })
  if (code === 'ELOOP') return new PathNotAllowedError(`symbolic link refused: ${message}`, { cause: err })
  if (code === 'EEXIST') return new LocalExistsError(message, { cause: err })
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return new LocalIoError(`${message} (${code})`, { cause: err })
  return new InternalError(message, { cause: err })
}
