// The job pipeline in one place: accept → persist → schedule → transfer → verify/publish → record.
// Per-target FIFO queues with a concurrency limit, retries with exponential backoff and jitter,
// cancel and shutdown through each job's AbortController, pruning of finished jobs.
import { upload, download, finishPublish, discardPartial } from './transfer.js'
import { parseJobRequest, newJob, sameRequest, hashesSha256, FINAL_STATES, STATES } from './jobs.js'
import { resolveSource, resolveDestination } from './paths.js'
import { MAX_TIMER_MS } from './config.js'
import { reserve, UNFINISHED } from './handoff.js'
import {
  toSidecarError, CancelledError, JobConflictError, JobFinishedError, JobNotFoundError, QueueFullError,
  ShuttingDownError, StoreUnavailableError, InterruptedError
} from './errors.js'

const TRANSFER = { upload, download }

// The name an upload without overwrite holds while it runs (see #pump), or null.
const exclusiveName = (job) => job.direction === 'upload' && !job.overwrite ? `${job.target}\n${job.remote}` : null
const ABORT_WAIT_MS = 5000 // see stop()
// A job handed off is queued this long after its answer (those of that time together): its
// client wakes to read the answer, and may send its next line, without the job's start (path
// checks, the read, the request that wakes the server) taking the CPU from it.
// Measured with the bench's hand-off section (three alternating pairs, 2026-11-28): a "fsync"
// hand-off back to back 921–1,547 µs against 1,833–2,116 when started at once, paced 564–749
// against 704–768; "write" paced 342–467 against 487–580. A job then ends that much later; what
// it costs does not change.
export const START_DELAY_MS = 2

// Of a job's `bytes`, those its current (or last) attempt moved: a resumed download started at
// `resumedFrom`.
const movedThisAttempt = (job, bytes) => Math.max(0, bytes - (job.direction === 'download' ? job.resumedFrom ?? 0 : 0))

// The jobs waiting for a slot of one target, oldest first: O(1) to add and to take the oldest
// (for queues of tens of thousands of jobs). A job cancelled while it waits is dropped from the
// count at once, and from memory once the dropped ones are half of what is held. Membership is by
// the job object, not only its id: a job cancelled, pruned and then submitted again under the same
// id is a new object, and the old one, still held, must not take its place.
class JobQueue {
  #items = []
  #head = 0
  #waiting = new Map() // id → the job waiting under it
  get length () { return this.#waiting.size }

  push (job) {
    if (this.#waiting.has(job.id)) return
    this.#waiting.set(job.id, job)
    this.#items.push(job)
  }

  // To the front: a job taken that must wait for another (see Scheduler.#pump).
  unshift (job) {
    if (this.#waiting.has(job.id)) return
    this.#waiting.set(job.id, job)
    if (this.#head > 0) this.#items[--this.#head] = job
    else this.#items.unshift(job)
  }

  shift () {
    while (this.#head < this.#items.length) {
      const job = this.#items[this.#head]
      this.#items[this.#head++] = undefined
      if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
        this.#items = this.#items.slice(this.#head)
        this.#head = 0
      }
      if (this.#waiting.get(job.id) === job) {
        this.#waiting.delete(job.id)
        return job
      }
    }
    return undefined
  }

  delete (id) {
    if (!this.#waiting.delete(id)) return
    const held = this.#items.length - this.#head
    if (held > 1024 && this.#waiting.size * 2 < held) {
      this.#items = this.#items.slice(this.#head).filter((job) => this.#waiting.get(job.id) === job)
      this.#head = 0
    }
  }
}

export class Scheduler {
  #accepted = [] // jobs accepted, to be queued together (#accept)
  #acceptTimer = null

  // `counter`: an Int32Array whose place UNFINISHED counts the unfinished jobs (shared with the
  // hand-off thread, which makes jobs too: handoff.js).
  constructor ({ config, store, backends, metrics, logger, clock = Date.now, random = Math.random, counter = new Int32Array(1) }) {
    this.callbacks = null // set by the wiring: createCallbackSender
    this.config = config
    this.store = store
    this.backends = backends
    this.metrics = metrics
    this.logger = logger
    this.clock = clock
    this.random = random
    this.nowMs = NaN // see now()
    this.nowIso = ''
    this.jobs = new Map()
    this.counter = counter
    this.finished = new Set() // ids of finished jobs, oldest end first (for queue.keepFinished)
    this.pruning = null
    this.running = new Map() // id → { controller, promise, startedAt, job }
    this.persisting = new Map() // id → promise of the first write (for idempotent resubmits)
    this.putSent = new Set() // ids of jobs whose direct PUT sent its last byte (see cancel)
    this.exclusive = new Map() // target and remote of an upload running without overwrite → the jobs waiting for it (#pump)
    this.recovered = new Set() // ids of jobs found unfinished in the journal, not started since
    this.timers = new Map() // id → retry timer
    this.waiters = new Map() // id → Set of callbacks run when the job ends
    this.stopping = false
    this.started = false // see start()
    this.queues = new Map()
    for (const [name, t] of Object.entries(config.targets)) {
      this.queues.set(name, { queue: new JobQueue(), running: 0, concurrency: t.concurrency })
    }
  }

  get unfinished () { return Atomics.load(this.counter, UNFINISHED) }
  #count (n) { Atomics.add(this.counter, UNFINISHED, n) }

  // The clock as an ISO string, made once per millisecond: a small job stamps several records
  // (created, started, updated, finished) within the same few, and toISOString showed at ~1 % of
  // the main thread in a profile of small uploads.
  now () {
    const ms = this.clock()
    if (ms !== this.nowMs) {
      this.nowMs = ms
      this.nowIso = new Date(ms).toISOString()
    }
    return this.nowIso
  }

  // Rebuilds state from the journal: jobs that were running are queued again, to start from the
  // beginning (or their offset) once start() lets the queues run.
  async recover () {
    // Sorted as strings: a record with a missing or odd field must not stop the start.
    const records = this.store.loaded().sort((a, b) => String(a.createdAt ?? '').localeCompare(String(b.createdAt ?? '')))
    let requeued = 0
    const interrupted = []
    for (const job of records) {
      // A state this version does not know (a journal from a newer one, an edit): the job was
      // accepted, so it runs, rather than count as unfinished for ever without running.
      if (!STATES.includes(job.state)) job.state = 'queued'
      if (!this.queues.has(job.target) && !FINAL_STATES.has(job.state)) {
        job.state = 'failed'
        job.error = { code: 'UNKNOWN_TARGET', message: `target ${job.target} is no longer configured` }
        job.finishedAt = this.now()
        job.nextAttemptAt = null
        // Ended like any job: its callback is sent (index.js delivers pendingCallbacks()).
        if (job.callback) job.callbackState = 'pending'
        // A download's temp file, kept for a resume that cannot come now (the upload's is on the
        // target's server, which the daemon no longer knows).
        if (job.direction === 'download') await discardPartial(job, { roots: this.config.roots }).catch(() => {})
        await this.store.put(job)
        this.metrics.jobFinished(job)
      }
      this.jobs.set(job.id, job)
      if (FINAL_STATES.has(job.state)) continue
      this.#count(1)
      // Its next start is journaled durably: a job that crashes the daemon at once must not look
      // as if it had never started, or its attempts would not count (see below).
      this.recovered.add(job.id)
      if (job.state === 'running') {
        job.state = 'queued'
        if (job.phase !== 'publishing') job.bytes = 0
        requeued++
        // Cut by a crash: that attempt counts, so a job that crashes the daemon cannot loop for
        // ever. One that had verified its bytes only has its publish to finish, and does.
        if (job.phase !== 'publishing' && job.attempts >= this.config.targets[job.target].retry.attempts) {
          interrupted.push(job)
          continue
        }
      }
      if (job.nextAttemptAt && Date.parse(job.nextAttemptAt) > this.clock()) this.#later(job)
      else this.#enqueue(job)
    }
    // Oldest end first, as #prune expects; the jobs failed below end now, after them.
    const ended = records.filter((j) => FINAL_STATES.has(j.state)).sort((a, b) => String(a.finishedAt ?? '').localeCompare(String(b.finishedAt ?? '')))
    for (const job of ended) this.finished.add(job.id)
    for (const job of interrupted) {
      const err = new InterruptedError(`the daemon stopped (a crash or kill) during the job's last attempt (${job.attempts} of ${this.config.targets[job.target].retry.attempts})`)
      // A job failed for good, counted like those that fail in #attempt (its last attempt's time is unknown).
      this.metrics.transferDone(job, this.config.targets[job.target].type, 'failed', 0, err.code)
      await this.#finish(job, 'failed', err)
    }
    this.logger.info({ jobs: records.length, unfinished: this.unfinished, requeued }, 'recovered jobs from the journal')
    await this.prune()
    this.pruneTimer = setInterval(() => this.prune().catch((err) => this.logger.error({ err }, 'prune failed')), 60000)
    this.pruneTimer.unref()
  }

  // `recorded` is called once the job's record is on its way to the journal (or never, when the
  // submission ends before): a caller with more submissions in hand may start the next one then,
  // and their records share one synced write (http/lines.js, a connection's pipelined lines).
  async submit (body, recorded) {
    if (this.stopping) throw new ShuttingDownError('the sidecar is shutting down; retry on another instance or later')
    const spec = parseJobRequest(body, this.config)
    // A known id first: its local file may be gone by now (an upload's copy removed once it
    // succeeded), and a resubmission (a retry, a spooled copy) is still the same job.
    if (spec.id && this.jobs.has(spec.id)) return this.#resubmitted(spec, body)
    if (spec.direction === 'upload') await resolveSource(spec.local, this.config.roots)
    else await resolveDestination(spec.local, this.config.roots)

    // A full queue may count jobs whose first record is still being written: a write that fails
    // gives its place back, so they are waited for (as a client that waited for their answers
    // would have) before this one is refused.
    while (this.unfinished >= this.config.queue.limit && this.persisting.size) {
      await Promise.allSettled(this.persisting.values())
    }
    // Again: the same id may have been submitted while the paths were being checked.
    if (spec.id && this.jobs.has(spec.id)) return this.#resubmitted(spec, body)
    // The place is taken at once: the hand-off thread takes places in the same count (handoff.js).
    if (!reserve(this.counter, this.config.queue.limit)) {
      // A job of this id the hand-off thread is making is this one again, not a new one.
      if (spec.id && await this.store.known?.(spec.id)) {
        this.store.drain()
        if (this.jobs.has(spec.id)) return this.#resubmitted(spec, body)
      }
      throw new QueueFullError(`the queue holds ${this.unfinished} unfinished jobs (limit ${this.config.queue.limit})`)
    }
    const job = newJob(spec, this.now())
    this.jobs.set(job.id, job)
    const persisted = this.store.put(job, { create: true })
    this.persisting.set(job.id, persisted)
    recorded?.()
    try {
      await persisted
    } catch (err) {
      if (this.jobs.get(job.id) === job) this.jobs.delete(job.id)
      this.#count(-1)
      if (this.persisting.get(job.id) === persisted) this.persisting.delete(job.id)
      // Made meanwhile by a hand-off (handoff.js), which is read before this answer: the same id again.
      if (err.known) return this.#resubmitted(spec, body)
      this.logger.error({ err }, 'cannot persist job')
      throw new StoreUnavailableError('the job could not be written to disk; it was not accepted')
    } finally {
      if (this.persisting.get(job.id) === persisted) this.persisting.delete(job.id)
    }
    // Counted, logged and started after the caller's answer is on its way: the hand-off does not
    // wait for them.
    this.#accept(job)
    return { job, created: true, state: 'queued' }
  }

  // The same id again. While the first submission's record is still being written, a job exists
  // only once that write succeeds: this one waits for it, and is answered as that one is (the same
  // request: refused with it; another one: JOB_CONFLICT only against a job that exists, else it
  // is a new job of its own).
  async #resubmitted (spec, body) {
    const pending = this.persisting.get(spec.id)
    const failed = pending && !await pending.then(() => true, () => false)
    if (failed && !this.jobs.has(spec.id)) return this.submit(body)
    const existing = this.jobs.get(spec.id)
    if (!existing) return this.submit(body) // pruned meanwhile
    if (!sameRequest(existing, spec)) throw new JobConflictError(`job ${spec.id} exists with a different request`)
    return { job: existing, created: false, state: existing.state }
  }

  // The job as the API shows it: the record plus the live rate of a running transfer.
  view (job) {
    const run = this.running.get(job.id)
    const rate = run ? Math.round(movedThisAttempt(job, job.bytes) / Math.max(0.001, (this.clock() - run.startedAt) / 1000)) : job.rate
    return { ...job, rate }
  }

  // Finished jobs whose completion callback was not delivered before the last stop.
  pendingCallbacks () {
    return [...this.jobs.values()].filter((j) => FINAL_STATES.has(j.state) && j.callbackState === 'pending')
  }

  save (job) {
    return this.#save(job)
  }

  // A job the hand-off thread made: it is run like one submitted here, its record already on disk
  // and its submission already counted (handoff.js).
  adopt (job) {
    this.jobs.set(job.id, job)
    // A submission of the same id here, still waiting to hear that the thread has it, must not
    // hide this job (see get): its place in `persisting` goes now, its answer follows.
    this.persisting.delete(job.id)
    this.#accept(job)
  }

  // Counted and logged once the caller's answer is on its way; queued START_DELAY_MS after the
  // first of those accepted meanwhile.
  #accept (job) {
    setImmediate(() => {
      this.metrics.jobAccepted(job)
      this.#log(job)
    })
    this.#accepted.push(job)
    this.#acceptTimer ??= setTimeout(() => {
      this.#acceptTimer = null
      const jobs = this.#accepted
      this.#accepted = []
      for (const j of jobs) this.#enqueue(j)
    }, START_DELAY_MS)
  }

  // A job whose first record is still being written is not one yet (its write may fail). One the
  // hand-off thread answered may not be read here yet: the store's drain() reads it.
  get (id) {
    let job = this.persisting.has(id) ? undefined : this.jobs.get(id)
    if (!job && this.store.drain?.({ settle: true })) job = this.persisting.has(id) ? undefined : this.jobs.get(id)
    if (!job) throw new JobNotFoundError(`no job ${JSON.stringify(String(id).slice(0, 64))}`)
    return job
  }

  list ({ state, limit = 1000 } = {}) {
    this.store.drain?.()
    const out = []
    for (const job of this.jobs.values()) {
      if (state && job.state !== state) continue
      if (this.persisting.has(job.id)) continue // not a job yet (see get)
      out.push(job)
      if (out.length >= limit) break
    }
    return out
  }

  // Resolves when the job has ended or `ms` have passed, whichever comes first.
  waitForEnd (id, ms, signal) {
    const job = this.get(id)
    if (FINAL_STATES.has(job.state) || ms <= 0) return Promise.resolve(job)
    return new Promise((resolve) => {
      const set = this.waiters.get(id) ?? new Set()
      this.waiters.set(id, set)
      const done = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', done)
        set.delete(done)
        if (set.size === 0 && this.waiters.get(id) === set) this.waiters.delete(id)
        resolve(this.jobs.get(id) ?? job) // pruned meanwhile: as it ended
      }
      const timer = setTimeout(done, ms)
      signal?.addEventListener('abort', done, { once: true })
      set.add(done)
    })
  }

  async cancel (id) {
    // A job whose first record is still being written is cancelled once it is accepted; one whose
    // write fails was never accepted (JOB_NOT_FOUND).
    await this.persisting.get(id)?.catch(() => {})
    const job = this.get(id)
    if (FINAL_STATES.has(job.state)) throw new JobFinishedError(`job ${id} already ${job.state}`)
    // Verified and being published (maybe already renamed into place by the server, its answer
    // lost), or a direct PUT whose last byte went out (stored by the server, maybe): too late to
    // cancel; the job ends as its publish does. (The second is known in memory only: after a
    // restart such a job can be cancelled while it waits to retry.)
    if (job.phase === 'publishing' || this.putSent.has(id)) throw new JobFinishedError(`job ${id} is publishing its verified file; too late to cancel`)
    const run = this.running.get(id)
    if (run) {
      run.controller.abort('cancel')
      await run.promise
      // Aborted for the shutdown before this cancel, it ended queued (to run after the restart).
      if (job.state === 'cancelled' || this.running.has(id)) return job
      // It had passed the point where a cancel stops it (its publish was under way) and ended so.
      if (FINAL_STATES.has(job.state)) throw new JobFinishedError(`job ${id} already ${job.state}`)
    }
    clearTimeout(this.timers.get(id))
    this.timers.delete(id)
    this.queues.get(job.target)?.queue.delete(id)
    const err = new CancelledError(job.attempts ? 'cancelled while waiting to retry' : 'cancelled before it started')
    // Waiting to retry, it ends after its last attempt: a transfer like one cancelled while running.
    if (job.attempts) this.metrics.transferDone(job, this.config.targets[job.target].type, 'cancelled', 0, err.code)
    await this.#finish(job, 'cancelled', err)
    return job
  }

  // `running` counts the jobs in state running, not every entry of this.running: a job ending is
  // still there while its final record is saved, after `unfinished` no longer counts it, and
  // waiting (unfinished − running) would read −1.
  stats () {
    let queued = 0
    for (const q of this.queues.values()) queued += q.queue.length
    for (const held of this.exclusive.values()) queued += held.length // behind an upload to their name (#pump)
    for (const job of this.#accepted) if (job.state === 'queued') queued++ // to be queued (#accept)
    let running = 0
    for (const run of this.running.values()) if (run.job.state === 'running') running++
    return { unfinished: this.unfinished, running, waiting: this.unfinished - running, queued }
  }

  // Stops scheduling; running transfers get `graceMs` to finish, then are aborted and left queued.
  async stop (graceMs) {
    this.stopping = true
    clearInterval(this.pruneTimer)
    for (const t of this.timers.values()) clearTimeout(t)
    const runs = [...this.running.values()]
    if (runs.length) {
      this.logger.info({ running: runs.length, graceMs }, 'waiting for running transfers')
      let timer
      await Promise.race([
        Promise.allSettled(runs.map((r) => r.promise)),
        new Promise((resolve) => { timer = setTimeout(resolve, graceMs) })
      ])
      clearTimeout(timer)
      for (const r of this.running.values()) r.controller.abort('shutdown')
      // Aborted, each ends at once, but for a publish already sent (bounded by the target's
      // idleMs) or cleanup on a server that does not answer: not waited for beyond ABORT_WAIT_MS,
      // so that a service manager's stop timeout does not end the daemon with SIGKILL. A job still
      // running then is found so in the journal at the next start, as after a crash.
      let waited
      const ended = await Promise.race([
        Promise.allSettled([...this.running.values()].map((r) => r.promise)).then(() => true),
        new Promise((resolve) => { waited = setTimeout(resolve, ABORT_WAIT_MS, false) })
      ])
      clearTimeout(waited)
      if (!ended) this.logger.warn({ running: [...this.running.keys()].slice(0, 20) }, `jobs still running ${ABORT_WAIT_MS} ms after they were aborted; stopping without them`)
    }
  }

  // Forgets finished jobs older than queue.retentionSeconds, and the oldest beyond
  // queue.keepFinished (so a burst of jobs cannot hold memory for a whole retention period);
  // a job whose callback is still being delivered is kept until it is.
  prune () {
    this.pruning ??= this.#prune().finally(() => { this.pruning = null })
    return this.pruning
  }

  async #prune () {
    const cutoff = this.clock() - this.config.queue.retentionSeconds * 1000
    // The excess is counted again at each step: jobs that end while a removal is written add to
    // it (their own prune() joins this one).
    for (const id of this.finished) {
      const job = this.jobs.get(id)
      if (this.finished.size <= this.config.queue.keepFinished && Date.parse(job.finishedAt) >= cutoff) break
      if (job.callbackState === 'pending') continue
      this.finished.delete(id)
      this.jobs.delete(id)
      await this.store.remove(id)
    }
  }

  #enqueue (job) {
    if (job.state !== 'queued') return // cancelled before its start came
    const q = this.queues.get(job.target)
    q.queue.push(job)
    this.#pump(q)
  }

  // Lets the queues run: called once the listeners are up (index.js); until then jobs only queue.
  start () {
    this.started = true
    for (const q of this.queues.values()) this.#pump(q)
  }

  #pump (q) {
    while (this.started && !this.stopping && q.running < q.concurrency && q.queue.length) {
      const job = q.queue.shift()
      if (job.state !== 'queued' || this.running.has(job.id)) continue // cancelled meanwhile
      // Two uploads to one name that must not replace a file run one after the other, so that the
      // second finds the first's file (REMOTE_EXISTS). mod_dav checks a PUT's If-None-Match and a
      // MOVE's Overwrite: F before it renames its file into place, not with it: side by side, both
      // passed the check and both succeeded, the second replacing the first.
      const name = exclusiveName(job)
      if (name !== null) {
        const waiting = this.exclusive.get(name)
        if (waiting) {
          waiting.push(job)
          continue
        }
        this.exclusive.set(name, [])
      }
      q.running++
      const controller = new AbortController()
      const run = { controller, startedAt: this.clock(), job }
      this.running.set(job.id, run)
      run.promise = this.#attempt(job, run).finally(() => {
        this.running.delete(job.id)
        q.running--
        if (name !== null) {
          // The next of them to the front of the queue (a job put back with its place).
          const waiting = this.exclusive.get(name)
          this.exclusive.delete(name)
          for (const next of waiting.reverse()) q.queue.unshift(next)
        }
        this.#pump(q)
      })
    }
  }

  async #attempt (job, run) {
    const { signal } = run.controller
    Object.assign(job, { state: 'running', attempts: job.attempts + 1, error: null, nextAttemptAt: null })
    if (job.phase !== 'publishing') job.bytes = 0
    job.startedAt ??= this.now()
    // Not synced: after a crash the job is found queued and started again, which is the same;
    // except after a restart, where the start must count (recover()).
    const recovered = this.recovered.delete(job.id)
    await this.#save(job, { durable: recovered })
    const target = this.config.targets[job.target]
    try {
      const deps = {
        backend: this.backends[job.target],
        roots: this.config.roots,
        signal,
        sha256: hashesSha256(job, target),
        // Found unfinished in the journal after a restart: its first start, journaled lazily, may
        // have run without a trace there (see store.put's `durable`).
        recovered,
        // A download journals the version of what it reads, so that after a restart its temp
        // file is continued only if the remote file is still the same.
        onStart: ({ size, version, resumedFrom }) => {
          job.size = size
          if (version === undefined) return
          job.resumedFrom = resumedFrom
          if ((job.remoteVersion ?? null) === version) return
          job.remoteVersion = version
          return this.#save(job)
        },
        onProgress: (bytes) => { job.bytes = bytes },
        // Journaled before publishing, so a crash here is finished, not redone (see finishPublish).
        onVerified: ({ bytes, sha256 }) => {
          Object.assign(job, { phase: 'publishing', bytes, sha256 })
          return this.#save(job)
        },
        // A direct PUT (transfer.js) has sent its last byte: the server may have published it,
        // so until the job ends a cancel is refused as in the publishing phase (nothing to
        // journal: a crash here repeats the PUT, which recognises its own file).
        onPublishing: () => { this.putSent.add(job.id) }
      }
      const resumed = job.phase === 'publishing' ? await finishPublish(job, deps) : null
      job.phase = undefined
      const result = resumed ?? await TRANSFER[job.direction](job, deps)
      Object.assign(job, result)
      // What this attempt moved: a resumed download only the rest, a finished publish nothing.
      const moved = resumed ? 0 : movedThisAttempt(job, result.bytes)
      const seconds = (this.clock() - run.startedAt) / 1000
      if (moved > 0 || result.bytes === 0) job.rate = Math.round(moved / Math.max(0.001, seconds))
      this.metrics.transferDone(job, target.type, 'succeeded', seconds, undefined, moved)
      await this.#finish(job, 'succeeded', null)
    } catch (thrown) {
      if (signal.aborted && signal.reason === 'shutdown') {
        job.state = 'queued'
        if (job.phase !== 'publishing') job.bytes = 0 // finishPublish checks the verified size
        // Stopped by us, not by the job: the attempt is given back (a crash, or a second signal,
        // counts it; see recover()).
        job.attempts--
        await this.#save(job)
        return
      }
      const err = signal.aborted ? new CancelledError('cancelled while running') : toSidecarError(thrown)
      if (err.code === 'INTERNAL') this.logger.error({ err: thrown, job: job.id }, 'unexpected error in transfer')
      const outcome = err instanceof CancelledError ? 'cancelled' : 'failed'
      // While stopping too: the job is then left queued, with its retry time, for the next start.
      if (err.retryable && job.attempts < target.retry.attempts) {
        this.metrics.retry(job, target.type, err.code)
        return this.#retryLater(job, err, target.retry)
      }
      this.metrics.transferDone(job, target.type, outcome, (this.clock() - run.startedAt) / 1000, err.code)
      await this.#finish(job, outcome, err)
    }
  }

  async #retryLater (job, err, retry) {
    const exp = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** (job.attempts - 1))
    const delay = Math.round(exp / 2 + this.random() * exp / 2) // "equal jitter"
    Object.assign(job, { state: 'queued', error: err.toJSON(), nextAttemptAt: new Date(this.clock() + delay).toISOString() })
    await this.#save(job, { durable: false })
    if (!this.stopping) this.#later(job)
  }

  // A wait longer than node's longest timer (2^31 - 1 ms, ~24.8 days; only a journal from
  // elsewhere holds one) is waited in steps: node would fire it after 1 ms.
  #later (job) {
    const delay = Math.max(0, Date.parse(job.nextAttemptAt) - this.clock())
    const timer = setTimeout(() => {
      this.timers.delete(job.id)
      if (job.state !== 'queued') return
      if (delay > MAX_TIMER_MS) this.#later(job)
      else this.#enqueue(job)
    }, Math.min(delay, MAX_TIMER_MS))
    this.timers.set(job.id, timer)
  }

  async #finish (job, state, err) {
    job.phase = undefined
    this.recovered.delete(job.id)
    this.putSent.delete(job.id)
    // Ended before anything is awaited: a second cancel meanwhile answers JOB_FINISHED, and a slot
    // freed meanwhile (#pump) does not start a queued job that is being cancelled.
    Object.assign(job, { state, error: err ? err.toJSON() : null, finishedAt: this.now(), nextAttemptAt: null })
    if (job.callback) job.callbackState = 'pending'
    this.#count(-1)
    // A failed or cancelled download may have kept its temp file for a resume that will not come;
    // a failed or cancelled upload may see its temp name come back from a request it cut.
    if (state !== 'succeeded') await discardPartial(job, { roots: this.config.roots, backend: this.backends[job.target] }).catch(() => {})
    await this.#save(job)
    this.finished.add(job.id)
    if (this.finished.size > this.config.queue.keepFinished) this.prune().catch((err) => this.logger.error({ err }, 'prune failed'))
    this.metrics.jobFinished(job)
    const set = this.waiters.get(job.id)
    if (set) for (const fn of [...set]) fn()
    if (job.callback) this.callbacks?.deliver(job)
  }

  async #save (job, { durable = true } = {}) {
    job.updatedAt = this.now()
    this.#log(job)
    try {
      await this.store.put(job, { durable })
    } catch (err) {
      // The previous record stays on disk, so the job is recovered (and re-run) after a restart.
      this.logger.error({ err, job: job.id }, 'cannot persist job state')
    }
  }

  // A job's end and its retries at info (a failure at warn); its other states at debug, so that a
  // small job costs one log line.
  #log (job) {
    const level = job.state === 'failed' ? 'warn' : FINAL_STATES.has(job.state) || job.error ? 'info' : 'debug'
    this.logger[level]?.({
      job: job.id,
      state: job.state,
      direction: job.direction,
      target: job.target,
      attempts: job.attempts,
      bytes: job.bytes,
      ...(job.error && { error: job.error })
    }, 'job state')
  }
}
