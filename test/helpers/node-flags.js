// The node flags production runs the daemon with: those of the bin's shebang, which npm start, the
// Dockerfile and the systemd unit spell again (test/docs.test.js holds them to it), and the environment
// variables the shebang sets. The tests whose bounds depend on them (RSS) and the benchmarks start
// the daemon with these.
import { readFileSync } from 'node:fs'

const BIN = new URL('../../bin/transfer-sidecar.js', import.meta.url)
const SHEBANG = readFileSync(BIN, 'utf8').split('\n')[0]
export const PRODUCTION_FLAGS = (/^#!.*\bnode\b(.*)$/.exec(SHEBANG)?.[1] ?? '').trim().split(/\s+/).filter(Boolean)
// …and the environment it sets before node (`env -S NAME=value … node`): glibc's MALLOC_ARENA_MAX.
export const PRODUCTION_ENV = Object.fromEntries([...(/^#!\S*env -S (.*?)\bnode\b/.exec(SHEBANG)?.[1] ?? '').matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1], m[2]]))
