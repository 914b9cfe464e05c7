import pino from 'pino'

// JSON lines; the destination is injectable so tests can capture them. Secrets are redacted
// wherever they could appear (we never log the config token, but a header might slip in).
export function createLogger ({ level = 'info', destination } = {}) {
  return pino({
    level,
    base: { service: 'transfer-sidecar' },
    redact: { paths: ['token', '*.token', 'authorization', '*.authorization', 'headers.authorization', 'req.headers.authorization'], censor: '[redacted]' }
  }, destination ?? pino.destination({ dest: 1, sync: false }))
}
