// The remote systems under test. Each target starts its server (test harness), knows how the
// curl CLI and the PHP scripts talk to it, how the daemon is configured for it, and how to check
// a remote size or remove a remote file. Remote names are relative to the target's base.
import fs from 'node:fs/promises'
import path from 'node:path'
import { startHttpd } from '../../test/harness/httpd.js'
import { startHdfs } from '../../test/harness/hdfs.js'
import { curl, hashedDownload, hashedUpload, expect2xx, sha256Of, shell, sumSteps } from './curl.js'

const HDFS_USER = 'bench'
const HDFS_BASE = '/bench'

// Apache httpd with mod_dav: plain PUT and GET.
async function startHttpTarget ({ timeFile }) {
  const srv = await startHttpd()
  const url = (name) => srv.uploadUrl + name
  return {
    name: 'http',
    sidecarName: 'files',
    // mod_dav_fs's PUT is atomic (test/httpd-put.test.js): small uploads take one PUT.
    sidecarConfig: { type: 'http', url: srv.uploadUrl, atomicPut: true },
    php: { type: 'http', url: srv.uploadUrl },
    server: `Apache httpd mod_dav at ${srv.url}`,
    uploadUrl: srv.uploadUrl,
    pid: srv.pid,
    // Where httpd keeps a remote file on this machine: uploads are checked there byte for byte.
    localPath: (name) => path.join(srv.davDir, name),

    async curlUpload (file, name, tf = timeFile) {
      const r = await curl(['-sS', '-T', file, '-o', '/dev/null', '-w', '%{http_code}', url(name)], { timeFile: tf })
      expect2xx(r.stdout, `curl PUT ${name}`)
      return r
    },

    async curlDownload (name, out, tf = timeFile) {
      const r = await curl(['-sS', '-o', out, '-w', '%{http_code}', url(name)], { timeFile: tf })
      expect2xx(r.stdout, `curl GET ${name}`)
      return r
    },

    // curl doing the sidecar's work too (issue #19; `hasher` a key of HASHERS): returns the sha256
    // it computed as `sha256`.
    async curlHashedUpload (hasher, file, name, tf = timeFile) {
      const r = await shell(hashedUpload(hasher), [file, url(name)], { timeFile: tf })
      return { ...r, sha256: sha256Of(r.stdout) }
    },

    async curlHashedDownload (hasher, name, out, tf = timeFile) {
      const r = await shell(hashedDownload(hasher), [url(name), out, ''], { timeFile: tf })
      return { ...r, sha256: sha256Of(r.stdout) }
    },

    async remoteSize (name) {
      const res = await fetch(url(name), { method: 'HEAD' })
      if (res.status !== 200) throw new Error(`HEAD ${name}: HTTP ${res.status}`)
      return Number(res.headers.get('content-length'))
    },

    // Files are removed on disk (as root): quicker than a DELETE each when there are thousands.
    remove: (name) => fs.rm(path.join(srv.davDir, name), { recursive: true, force: true }),

    stop: () => srv.stop()
  }
}

// MiniDFSCluster with WebHDFS: two-step CREATE (namenode → datanode), OPEN with a redirect.
async function startWebHdfsTarget ({ timeFile, hdfsChecksum = true }) {
  const hdfs = await startHdfs({ datanodes: 1 })
  try {
    await hdfs.command(`mkdir ${HDFS_BASE} ${HDFS_USER} 755`)
  } catch (err) {
    await hdfs.stop()
    throw err
  }
  const [nn] = hdfs.namenodes
  const url = (name, op, extra = '') => `${nn}/webhdfs/v1${HDFS_BASE}/${name}?op=${op}&user.name=${HDFS_USER}${extra}`
  // Step 1 of a CREATE asks the namenode where to write; noredirect=true answers JSON instead of a
  // 307. Returns the timed curl call and the datanode's URL.
  const locateCreate = async (name, tf) => {
    const locate = await curl(['-sS', '-X', 'PUT', url(name, 'CREATE', '&overwrite=true&noredirect=true')], { timeFile: tf })
    const { Location: location } = JSON.parse(locate.stdout)
    if (!location) throw new Error(`CREATE ${name}: no Location in ${locate.stdout}`)
    return { locate, location }
  }
  return {
    name: 'webhdfs',
    sidecarName: 'hdfs',
    sidecarConfig: { type: 'webhdfs', namenodes: [nn], user: HDFS_USER, base: HDFS_BASE, checksum: hdfsChecksum },
    php: { type: 'webhdfs', namenode: nn, user: HDFS_USER, base: HDFS_BASE },
    server: `MiniDFSCluster (1 datanode) at ${nn}`,
    pid: hdfs.pid,
    localPath: () => null,

    async curlUpload (file, name, tf = timeFile) {
      const { locate, location } = await locateCreate(name, tf)
      const put = await curl(['-sS', '-T', file, '-o', '/dev/null', '-w', '%{http_code}', location], { timeFile: tf })
      expect2xx(put.stdout, `curl PUT datanode ${name}`)
      return sumSteps([locate, put])
    },

    async curlDownload (name, out, tf = timeFile) {
      const r = await curl(['-sS', '-L', '-o', out, '-w', '%{http_code}', url(name, 'OPEN')], { timeFile: tf })
      expect2xx(r.stdout, `curl OPEN ${name}`)
      return r
    },

    async curlHashedUpload (hasher, file, name, tf = timeFile) {
      const { locate, location } = await locateCreate(name, tf)
      const put = await shell(hashedUpload(hasher), [file, location], { timeFile: tf })
      return { ...sumSteps([locate, put]), sha256: sha256Of(put.stdout) }
    },

    async curlHashedDownload (hasher, name, out, tf = timeFile) {
      const r = await shell(hashedDownload(hasher), [url(name, 'OPEN'), out, '-L'], { timeFile: tf })
      return { ...r, sha256: sha256Of(r.stdout) }
    },

    async remoteSize (name) {
      const res = await fetch(url(name, 'GETFILESTATUS'))
      if (res.status !== 200) throw new Error(`GETFILESTATUS ${name}: HTTP ${res.status} ${await res.text()}`)
      return (await res.json()).FileStatus.length
    },

    async remove (name) {
      const res = await fetch(url(name, 'DELETE', '&recursive=true'), { method: 'DELETE' })
      const body = await res.text()
      if (res.status !== 200) throw new Error(`DELETE ${name}: HTTP ${res.status} ${body}`)
    },

    stop: () => hdfs.stop()
  }
}

const STARTERS = { http: startHttpTarget, webhdfs: startWebHdfsTarget }

export function startTarget (name, { workDir, hdfsChecksum }) {
  return STARTERS[name]({ timeFile: path.join(workDir, `time-${name}.txt`), hdfsChecksum })
}
