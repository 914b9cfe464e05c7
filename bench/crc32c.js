#!/usr/bin/env node
// CPU of HDFS's file checksum (src/hdfs-checksum.js: a CRC32C per 512-byte chunk, then MD5s) per
// GiB, beside the CRC calls alone, one CRC32C over whole 1 MiB buffers (what the hardware does
// when a call is not per chunk) and sha256 (the other digest of every byte), in one run.
//   node bench/crc32c.js [--mib 512]
import { createHash } from 'node:crypto'
import { crc32c } from '@node-rs/crc32'
import { createHdfsChecksum } from '../src/hdfs-checksum.js'
import { toolArgs } from './lib/tool-args.js'

const USAGE = 'usage: node bench/crc32c.js [--mib 512]'
const { values } = toolArgs({ options: { mib: { type: 'string', default: '512' } } }, USAGE)
const MIB = Number(values.mib)
const buf = Buffer.alloc(1 << 20)
for (let i = 0; i < buf.length; i++) buf[i] = (i * 7) & 255

function secondsPerGiB (fn) {
  fn()
  const t0 = process.hrtime.bigint()
  for (let k = 0; k < MIB; k++) fn()
  return Number(process.hrtime.bigint() - t0) / 1e9 / MIB * 1024
}

const crcs = new Uint32Array(buf.length / 512)
const checksum = createHdfsChecksum({ blockSize: 128 << 20 })
const rows = [
  ['HDFS file checksum (hdfs-checksum.js: CRC32C per 512 B + MD5)', () => checksum.update(buf)],
  ['CRC32C calls alone, one per 512 B (@node-rs/crc32)', () => { for (let i = 0, j = 0; i < buf.length; i += 512, j++) crcs[j] = crc32c(buf.subarray(i, i + 512)) }],
  ['CRC32C of whole 1 MiB buffers (@node-rs/crc32)', () => crc32c(buf)],
  ['sha256 (OpenSSL)', () => createHash('sha256').update(buf).digest()]
]
console.log(`# CPU seconds per GiB (node ${process.version}, ${MIB} MiB each, best of 3)\n\n| work | s/GiB |\n|---|---|`)
for (const [name, fn] of rows) console.log(`| ${name} | ${Math.min(...[0, 1, 2].map(() => secondsPerGiB(fn))).toFixed(3)} |`)
