// The node flags production runs the daemon with: those of the bin's shebang, which npm start, the
// Dockerfile and the systemd unit spell again (test/docs.test.js holds them to it). The tests whose
// bounds depend on them (RSS) and the benchmarks start the daemon with these.
import { readFileSync } from 'node:fs'

const BIN = new URL('../../bin/transfer-sidecar.js', import.meta.url)
export const PRODUCTION_FLAGS = (/^#!.*\bnode\b(.*)$/.exec(readFileSync(BIN, 'utf8').split('\n')[0])?.[1] ?? '').trim().split(/\s+/).filter(Boolean)
