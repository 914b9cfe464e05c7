// What every answer to bad input must look like, from the README's own list: a 4xx status, a
// JSON body {"error":{"code","message"}}, and a code documented for exactly that status.
import fs from 'node:fs'

const readme = fs.readFileSync(new URL('../../README.md', import.meta.url), 'utf8')

// code → status, from the table "Answers of the API" under "### Error codes".
export const README_API_CODES = (() => {
  const start = readme.indexOf('Answers of the API')
  const table = readme.slice(start, readme.indexOf('\n\n', readme.indexOf('|', start)))
  const codes = new Map()
  for (const m of table.matchAll(/^\| `([A-Z0-9_]+)` \| (\d{3}) \|/gm)) codes.set(m[1], Number(m[2]))
  if (codes.size < 10) throw new Error('fuzz-oracle: cannot read the API error table from README.md')
  return codes
})()

// Problems with one answer to a request that had something wrong with it ([] when it is right).
// `expect`: the codes this request must get ('accept' also allows 200/202); null = any documented code.
// `head`: the answer to a HEAD request, which has no body; only status and content type are judged.
export function judge ({ status, text, headers = {} }, expect = null, { head = false } = {}) {
  const problems = []
  if (status >= 500) problems.push(`answered ${status}`)
  if (status >= 200 && status < 300) {
    if (expect && !expect.includes('accept')) problems.push(`accepted (${status}) but expected ${expect.join('|')}`)
    return problems
  }
  if (status < 400) return [...problems, `unexpected status ${status}`]
  if (head) {
    if (!String(headers['content-type'] ?? '').startsWith('application/json')) problems.push(`HEAD: ${status} with content-type ${headers['content-type']}`)
    return problems
  }
  let body = null
  try { body = JSON.parse(text) } catch {}
  const error = body?.error
  if (!error || typeof error.code !== 'string' || typeof error.message !== 'string' || Object.keys(body).length !== 1) {
    return [...problems, `${status} without a JSON error body: ${JSON.stringify(String(text).slice(0, 200))}`]
  }
  if (!String(headers['content-type'] ?? '').startsWith('application/json')) problems.push(`${status} ${error.code} with content-type ${headers['content-type']}`)
  if (!README_API_CODES.has(error.code)) problems.push(`code ${error.code} is not in the README's API list`)
  else if (README_API_CODES.get(error.code) !== status) problems.push(`code ${error.code} with status ${status}, README says ${README_API_CODES.get(error.code)}`)
  if (expect && !expect.includes(error.code)) problems.push(`got ${status} ${error.code} (${error.message.slice(0, 160)}), expected ${expect.join('|')}`)
  return problems
}
