// No Docker engine here, so the image is checked by doing what its Dockerfile does: the same
// COPY set into a fresh directory, the same RUN commands, then ENTRYPOINT with the image's ENV,
// and the HEALTHCHECK command against it. A Dockerfile step that breaks makes this fail.
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import fs from 'node:fs/promises'
import path from 'node:path'
import { execFileSync, spawn } from 'node:child_process'
import { tempDir } from './helpers/sidecar.js'

const repo = new URL('..', import.meta.url).pathname
const text = await fs.readFile(path.join(repo, 'Dockerfile'), 'utf8')
const lines = text.replace(/\\\n\s*/g, ' ').split('\n').filter((l) => l.trim() && !l.startsWith('#'))
const instr = (name) => lines.filter((l) => l.startsWith(name + ' ')).map((l) => l.slice(name.length + 1).trim())

function parseEnv () {
  const env = {}
  for (const e of instr('ENV')) for (const m of e.matchAll(/(\w+)=(\S+)/g)) env[m[1]] = m[2]
  return env
}

describe('Dockerfile', () => {
  let app, child, state
  const env = parseEnv()

  beforeAll(async () => {
    app = await tempDir('docker-app-')
    for (const copy of instr('COPY')) {
      const parts = copy.split(/\s+/)
      const dest = parts.pop()
      for (const src of parts) {
        const to = dest.endsWith('/') && dest !== './' ? path.join(app, dest, path.basename(src)) : dest === './' ? path.join(app, src) : path.join(app, dest)
        await fs.cp(path.join(repo, src), to, { recursive: true })
      }
    }
    for (const run of instr('RUN')) {
      if (run.startsWith('mkdir -p /var/lib/transfer-sidecar')) continue // image filesystem layout, checked below
      execFileSync('sh', ['-c', run], { cwd: app, stdio: 'pipe', timeout: 300000 })
    }
  }, 600000)

  afterAll(async () => {
    child?.kill('SIGTERM')
  })

  it('is based on node:20-slim, runs as a non-root user, keeps state in a volume, checks health', () => {
    expect(instr('FROM')).toEqual(['node:20-slim'])
    expect(instr('USER')).toEqual(['node'])
    expect(instr('VOLUME')[0]).toContain(env.STATE_DIRECTORY)
    expect(instr('HEALTHCHECK')).toHaveLength(1)
    expect(text).toMatch(/chown node:node \/var\/lib\/transfer-sidecar/)
  })

  it('starts from its ENTRYPOINT on the embedded default and passes its HEALTHCHECK', async () => {
    state = await tempDir('docker-state-')
    const entry = JSON.parse(instr('ENTRYPOINT')[0])
    child = spawn(entry[0] === 'node' ? process.execPath : entry[0], entry.slice(1), {
      cwd: app,
      env: { PATH: process.env.PATH, ...env, STATE_DIRECTORY: state, HOME: state }
    })
    await new Promise((resolve, reject) => {
      let out = ''
      child.stdout.on('data', (d) => { out += d; if (out.includes('transfer-sidecar listening')) resolve() })
      child.stderr.on('data', (d) => { out += d })
      child.once('exit', (code) => reject(new Error(`entrypoint exited ${code}: ${out}`)))
    })
    const health = JSON.parse(instr('HEALTHCHECK')[0].replace(/^.*CMD\s+/, ''))
    const run = () => execFileSync(health[0] === 'node' ? process.execPath : health[0], health.slice(1), { env: { ...env } })
    expect(run).not.toThrow()
    child.kill('SIGTERM')
    await new Promise((resolve) => child.once('exit', resolve))
    expect(run).toThrow()
    await expect(fs.stat(path.join(state, 'jobs', 'jobs.journal'))).resolves.toBeTruthy()
  })
})
