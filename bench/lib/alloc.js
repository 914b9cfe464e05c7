// Section 1c (the optional part of issue #6): the published study's falling curve. There,
// php-curl RETURNTRANSFER downloads slowed down as files grew, on a platform where PHP's allocator
// cannot grow a large block in place (Windows), so the response string is copied whole each time it
// outgrows its block. Linux grows those blocks in place (mremap), and the curve is flat here
// (section 1). Preloading bench/shim/no-inplace-growth.c into php makes PHP's allocator grow
// blocks as on Windows (see the shim) and brings the curve back. The sidecar is then handed the
// same download by a php process under the same shim: PHP sends a small request and never holds
// the body, so the allocator does not matter to it.
import { spawnSync } from 'node:child_process'
import fs from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import { syncDisks } from './env.js'
import { check } from './verify.js'
import { distinct, maxOf, median, pairedRatio, spread } from './stats.js'
import { rotate, seedName, transfer } from './throughput.js'

export const ALLOC_VARIANTS = ['php-returntransfer', 'php-returntransfer-no-inplace', 'sidecar-no-inplace']
const SHIM_SOURCE = fileURLToPath(new URL('../shim/no-inplace-growth.c', import.meta.url))

// For the estimate: under the shim RETURNTRANSFER copies the whole body at every 2 MiB it grows,
// which took ~1.4 s for 100 MiB here and grows with the square of the size.
export function estimateAlloc (opts) {
  return opts.allocSizes.reduce((s, size) => s + size / 300 + opts.allocRuns * (3 * 0.6 + size / 150 + 1.4 * (size / 100) ** 2), 0)
}

export function requireCompiler () {
  if (spawnSync('cc', ['--version']).error) {
    throw new Error('the alloc section builds an LD_PRELOAD shim and needs a C compiler: apt-get install -y gcc   (or leave it out: --sections throughput,concurrency,reuse,handoff,web)')
  }
}

function buildShim (workDir) {
  const out = path.join(workDir, 'no-inplace-growth.so')
  const r = spawnSync('cc', ['-O2', '-shared', '-fPIC', '-o', out, SHIM_SOURCE, '-ldl'], { encoding: 'utf8' })
  check(r.status === 0, `cc could not build ${SHIM_SOURCE}: ${r.error?.message ?? r.stderr}`)
  return out
}

export async function runAlloc (env, opts, progress) {
  requireCompiler()
  progress.section('alloc', opts.allocSizes.length * opts.allocRuns * ALLOC_VARIANTS.length)
  await env.startDaemon('alloc')
  const shim = { LD_PRELOAD: buildShim(env.workDir) }
  const target = env.targets.http
  const records = []
  for (const sizeMiB of opts.allocSizes) {
    const source = await env.createSource(`alloc-${sizeMiB}.bin`, sizeMiB * 2 ** 20)
    try {
      await target.curlUpload(source.path, seedName(sizeMiB))
      check(await target.remoteSize(seedName(sizeMiB)) === source.bytes, `http:${seedName(sizeMiB)} size after seeding`)
      for (let run = 1; run <= opts.allocRuns; run++) {
        for (const variant of rotate(ALLOC_VARIANTS, run - 1)) {
          syncDisks()
          const competitor = variant.startsWith('sidecar') ? 'sidecar' : 'php-returntransfer'
          const phpEnv = variant.endsWith('-no-inplace') ? shim : undefined
          const r = await transfer(env, { target, direction: 'download', competitor, source, sizeMiB, phpEnv })
          const record = {
            run,
            target: target.name,
            direction: 'download',
            variant,
            sizeMiB,
            seconds: r.seconds,
            mibps: sizeMiB / r.seconds,
            cpuS: r.cpuS,
            rssMiB: r.rssMiB,
            verified: r.verified
          }
          records.push(record)
          progress.step(`${String(sizeMiB).padStart(4)} MiB run ${run}/${opts.allocRuns} ${variant.padEnd(30)} ${record.mibps.toFixed(1).padStart(6)} MiB/s  ` +
            `${r.seconds.toFixed(3)} s  cpu ${r.cpuS?.toFixed(2) ?? '—'} s  rss ${r.rssMiB?.toFixed(1) ?? '—'} MiB  ok (${r.verified})`)
        }
      }
    } finally {
      await target.remove(seedName(sizeMiB)).catch(() => {})
      await fs.rm(source.path, { force: true })
    }
  }
  return { records }
}

// Per variant and size: throughput, its ratio to the variant's own at the smallest size (the
// curve: flat is 1.0), and to php-curl RETURNTRANSFER with the normal allocator in the same run.
export function summarizeAlloc (records) {
  const out = []
  const smallest = Math.min(...records.map((r) => r.sizeMiB))
  for (const variant of distinct(records, 'variant')) {
    const first = median(records.filter((r) => r.variant === variant && r.sizeMiB === smallest).map((r) => r.mibps))
    for (const sizeMiB of distinct(records, 'sizeMiB')) {
      const mine = records.filter((r) => r.variant === variant && r.sizeMiB === sizeMiB)
      const plain = records.filter((r) => r.variant === 'php-returntransfer' && r.sizeMiB === sizeMiB)
      const mibps = spread(mine.map((r) => r.mibps))
      out.push({
        target: mine[0].target,
        direction: 'download',
        variant,
        sizeMiB,
        runs: mine.length,
        mibps,
        vsSmallest: mibps.median / first,
        vsReturnTransfer: variant === 'php-returntransfer' ? 1 : pairedRatio(mine, plain, 'mibps'),
        cpuSPerGiB: median(mine.map((r) => (r.cpuS ?? null) === null ? null : r.cpuS / (sizeMiB / 1024))),
        rssMiB: maxOf(mine.map((r) => r.rssMiB))
      })
    }
  }
  return out
}
