// node:http, loaded with require() rather than `import`. An ES module import of a built-in builds
// its namespace from every property of the module, and node 24's http has lazy getters (its
// WebSocket, MessageEvent, CloseEvent: node's bundled undici) that this reads: `import http from
// 'node:http'` loads 113 internal modules, undici and http2 among them, against 38 for require().
// Measured on the daemon (five starts each): idle RSS 75.5–76.2 MiB against 78.2–78.5, the peak of
// one 256 MiB upload 100.2–101.2 against 102.8–104.3.
//
// node:https (and with it node's TLS) only in a daemon with an https target (loaded at its start)
// or callback (at the first one sent): most daemons talk plain HTTP on their network.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

export const http = require('node:http')

let https = null
export const lazyHttps = () => (https ??= require('node:https'))

// The module of a URL's scheme (a URL object's `protocol`).
export const clientFor = (protocol) => protocol === 'https:' ? lazyHttps() : http
