// Wires the daemon together: config → logger, store, backends, scheduler, metrics, HTTP listeners.
import path from 'node:path'
import { createLogger } from './logger.js'
import { openJobStore } from './store.js'
import { createBackend } from './backends/index.js'
import { Scheduler } from './scheduler.js'
import { createMetrics } from './metrics.js'
import { createApp } from './http/app.js'
import { lineProtocol } from './http/lines.js'
import { listenAll, closeAll } from './listeners.js'
import { createSpool } from './spool.js'
import { createCallbackSender } from './callbacks.js'
import { lockStateDir } from './lock.js'
import { sweepNow } from './transfer.js'
import { startHandoffThread } from './handoff.js'

const SWEEP_AT_STOP_MS = 1000 // failed uploads' temp names still to be removed: at most this long at a stop

export { loadConfig, validateConfig, ConfigError } from './config.js'
export { StateDirLockedError } from './lock.js'

// `lineTimeouts` ({ idleMs, lineMs }, http/lines.js) are shorter in tests, and `handoffPostDelayMs`
// delays the hand-off thread's post of each job it answered (handoff.js). `holdJobs()`, asked once the daemon listens: true leaves every job queued (a stop was asked for
// during the start, bin/transfer-sidecar.js), so that no recovered job spends an attempt on it,
// and ends the spool's first scan early.
export async function startSidecar (config, { logger = createLogger({ level: config.logLevel }), clock, holdJobs = () => false, lineTimeouts, handoffPostDelayMs } = {}) {
  let scheduler = null
  const metrics = createMetrics({ scheduler: () => scheduler, backends: Object.values(config.targets).map((t) => t.type) })
  const backends = Object.fromEntries(Object.values(config.targets).map((t) => [t.name, createBackend(t, { logger, metrics })]))
  const lock = await lockStateDir(config.stateDir) // before the journal is touched (see lock.js)
  let store, callbacks, spool, servers, handoff
  let handoffAddresses = []
  try {
    // With handoff.listen, the journal is the hand-off thread's (handoff.js).
    handoff = config.handoff.listen.length ? await startHandoffThread({ config, logger, lineTimeouts, postDelayMs: handoffPostDelayMs }) : null
    store = handoff?.store ?? await openJobStore({ dir: path.join(config.stateDir, 'jobs'), logger, ...config.journal })
    scheduler = new Scheduler({ config, store, backends, metrics, logger, clock, counter: handoff?.counter })
    await scheduler.recover()
    callbacks = createCallbackSender({ config, logger, metrics, save: (job) => scheduler.save(job), view: (job) => scheduler.view(job), clock })
    scheduler.callbacks = callbacks
    for (const job of scheduler.pendingCallbacks()) callbacks.deliver(job)
    spool = createSpool({ config, scheduler, logger, metrics, halted: holdJobs })
    const app = createApp({ config, scheduler, backends, metrics, logger })
    // Listening first: a daemon whose socket or port is another one's stops here, before its first
    // spool scan could take that daemon's spooled jobs into a journal nobody runs.
    servers = await listenAll({ app, lines: lineProtocol({ config, scheduler, logger, timeouts: lineTimeouts }) }, config)
    if (handoff) handoffAddresses = await handoff.listen(scheduler)
    await spool.start()
  } catch (err) {
    // A start that fails half-way (a port in use, say) leaves every unfinished job queued on disk.
    if (servers) await closeAll(servers, 0).catch(() => {})
    await handoff?.stop(0).catch(() => {})
    await spool?.stop().catch(() => {})
    await scheduler?.stop(0).catch(() => {})
    callbacks?.stop()
    await store?.close().catch(() => {})
    await lock.release()
    throw err
  }
  logger.info({ listen: servers.map((s) => s.address), ...(handoff && { handoff: handoffAddresses }), targets: Object.keys(config.targets), roots: config.roots }, 'transfer-sidecar listening')
  // Jobs run from now on.
  if (holdJobs()) logger.info('a stop was asked for during the start: jobs stay queued')
  else scheduler.start()

  let stopping = null
  async function stop ({ graceMs = config.shutdownGraceMs } = {}) {
    stopping ??= (async () => {
      logger.info({ graceMs }, 'shutting down')
      // From now on nothing is accepted (a spool scan under way ends at its next file) and no
      // queued job starts.
      scheduler.stopping = true
      const closing = Promise.all([closeAll(servers, Math.min(graceMs, 1000)), handoff?.stop(Math.min(graceMs, 1000))])
      await spool.stop()
      await scheduler.stop(graceMs)
      await sweepNow(SWEEP_AT_STOP_MS)
      callbacks.stop()
      await closing
      await store.close()
      await lock.release()
      await Promise.all(Object.values(backends).map((b) => b.close()))
      logger.info('stopped')
      logger.flush?.()
    })()
    return stopping
  }

  return { config, scheduler, metrics, servers, spool, stop, logger }
}
