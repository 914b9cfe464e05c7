// The bin run as a script, as `./bin/transfer-sidecar.js` or a package manager's bin link runs it:
// its shebang (`env -S NAME=value … node FLAGS`) must give the daemon's node process the production
// flags and environment, which the other launchers spell again (test/docs.test.js).
import { describe, it, expect } from 'vitest'
import { spawn } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { tempDir, printed } from './helpers/sidecar.js'
import { PRODUCTION_FLAGS, PRODUCTION_ENV } from './helpers/node-flags.js'

const BIN = new URL('../bin/transfer-sidecar.js', import.meta.url).pathname

describe('bin/transfer-sidecar.js run as a script', () => {
  it('starts node with the flags and environment of its shebang', async () => {
    const dir = await tempDir('shebang-')
    const config = path.join(dir, 'config.json')
    await fs.mkdir(path.join(dir, 'root'))
    await fs.writeFile(config, JSON.stringify({
      listen: [`unix:${path.join(dir, 's.sock')}`],
      stateDir: path.join(dir, 'state'),
      roots: [path.join(dir, 'root')],
      targets: { local: { type: 'file', dir: path.join(dir, 'store') } }
    }))
    const env = { ...process.env, SIDECAR_CONFIG: config }
    for (const name of Object.keys(PRODUCTION_ENV)) delete env[name] // from the shebang, not inherited
    const child = spawn(BIN, [], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    const exited = new Promise((resolve) => child.once('exit', resolve))
    try {
      await printed(child, 'transfer-sidecar listening', 'the bin')
      // `env` execs node in place: the child's pid is the daemon's.
      const cmdline = (await fs.readFile(`/proc/${child.pid}/cmdline`, 'utf8')).split('\0')
      const environ = (await fs.readFile(`/proc/${child.pid}/environ`, 'utf8')).split('\0')
      expect(path.basename(cmdline[0])).toBe('node')
      expect(cmdline.slice(1, 1 + PRODUCTION_FLAGS.length)).toEqual(PRODUCTION_FLAGS)
      expect(Object.keys(PRODUCTION_ENV).length).toBeGreaterThan(0)
      for (const [name, value] of Object.entries(PRODUCTION_ENV)) expect(environ).toContain(`${name}=${value}`)
    } finally {
      child.kill('SIGTERM')
      await exited
    }
  })
})
