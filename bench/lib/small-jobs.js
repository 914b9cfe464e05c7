// The scene of the small-job probes (bench/job-cpu.js, bench/alloc-profile.js): `count` small files
// under the daemon's only root and one target `t`, a real httpd with atomicPut (`target: "http"`)
// or a file store (`"file"`), and a daemon started for it as production runs it (`sidecar`: more of
// startSidecar's options, e.g. nodeFlags, extra; `handoff`: with a hand-off thread listening on a
// socket of its own). `socket` is where the jobs are handed off: that thread's socket, or the
// daemon's. stop() stops both servers and removes the files.
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { startSidecar } from './sidecar.js'
import { createSmallFiles } from './testfile.js'
import { startHttpd } from '../../test/harness/httpd.js'

export async function startSmallJobs ({ name, count, size, target, httpdDir, handoff = false, sidecar = {} }) {
  const work = await fs.mkdtemp(path.join(os.tmpdir(), `${name}-`))
  const files = path.join(work, 'files')
  await fs.mkdir(files)
  const paths = await createSmallFiles(files, count, size)
  const httpd = target === 'http' ? await startHttpd({ dir: httpdDir }) : null
  const targets = { t: httpd ? { type: 'http', url: httpd.uploadUrl, atomicPut: true } : { type: 'file', dir: path.join(work, 'store') } }
  const handoffSocket = handoff ? path.join(work, 'handoff.sock') : null
  const extra = { ...sidecar.extra, ...(handoffSocket && { handoff: { listen: [`unix:${handoffSocket}`] } }) }
  const daemon = await startSidecar({ workDir: work, roots: [files], targets, ...sidecar, extra })
  return {
    paths,
    daemon,
    socket: handoffSocket ?? daemon.socketPath,
    async stop () {
      await daemon.stop()
      await httpd?.stop()
      await fs.rm(work, { recursive: true, force: true })
    }
  }
}
