// The job request's optional fields: null means absent for each of them (id, sha256, callback).
import { describe, it, expect } from 'vitest'
import { parseJobRequest } from '../src/jobs.js'

const ctx = { targets: { local: { type: 'file' } }, callbacks: { allow: [] } }
const base = { direction: 'upload', target: 'local', local: '/srv/a.bin', remote: '/a.bin' }

describe('parseJobRequest', () => {
  it('takes null as absent for id, sha256 and callback', () => {
    const spec = parseJobRequest({ ...base, id: null, sha256: null, callback: null }, ctx)
    expect(spec).toMatchObject({ id: null, expectedSha256: null, callback: null })
    expect(parseJobRequest(base, ctx)).toEqual(spec)
  })

  it('takes digest "sha256", "none" or null, and refuses anything else', () => {
    expect(parseJobRequest({ ...base, digest: 'none' }, ctx).digest).toBe('none')
    expect(parseJobRequest({ ...base, digest: null }, ctx).digest).toBe(null)
    for (const digest of ['md5', 'SHA256', 1, true]) {
      expect(() => parseJobRequest({ ...base, digest }, ctx)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
    }
  })

  it.each([['short'], [''], [12345678], [[]], ['has space id']])('refuses the id %j', (id) => {
    expect(() => parseJobRequest({ ...base, id }, ctx)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
  })
})
