// A self-signed certificate for 127.0.0.1 and localhost, made by the openssl CLI (Debian's
// `openssl`): node can parse X.509 certificates but not issue them.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)

// Writes cert.pem and key.pem into `dir`; returns their paths.
export async function selfSignedCert (dir) {
  const cert = path.join(dir, 'cert.pem')
  const key = path.join(dir, 'key.pem')
  await run('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'
  ]).catch((err) => {
    throw new Error(`cannot make a test certificate with the openssl CLI (apt-get install -y openssl): ${err.message}`)
  })
  return { cert, key }
}
