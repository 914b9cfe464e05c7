// parseArgs for the standalone bench tools: --help prints their usage, a bad command line the error and the usage.
import { parseArgs } from 'node:util'

export function toolArgs (config, usage) {
  let parsed
  try {
    parsed = parseArgs({ ...config, options: { ...config.options, help: { type: 'boolean', short: 'h' } } })
  } catch (err) {
    console.error(`error: ${err.message}\n${usage}`)
    process.exit(2)
  }
  if (parsed.values.help) {
    console.log(usage)
    process.exit(0)
  }
  return parsed
}
