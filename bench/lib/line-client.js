// A client of the daemon's line protocol for the benches: `count` jobs handed off over one
// connection, at most `window` unanswered at a time (as many PHP clients keep them in flight).
import net from 'node:net'

// Resolves with each hand-off's time from its line written to its answer read, in µs, once all
// are answered; rejects on the first answer that is not a 202. `job(i)` is the i-th job's body;
// `onAnswer(answer)` sees each answer. `pauseMs`: a pause after each answer before the next line
// (with a window of 1: one hand-off every so often, the daemon idle in between).
export async function handOffLines (socketPath, { count, window, job, onAnswer, pauseMs = 0 }) {
  const socket = net.connect(socketPath)
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject))
  const acks = []
  const sentAt = []
  let sent = 0
  let buffered = ''
  let wake = null
  let failure = null
  socket.setEncoding('utf8').on('data', (chunk) => {
    buffered += chunk
    for (let k; (k = buffered.indexOf('\n')) >= 0;) {
      const answer = JSON.parse(buffered.slice(0, k))
      buffered = buffered.slice(k + 1)
      if (answer.status !== 202) failure ??= new Error(`hand-off answered ${JSON.stringify(answer)}`)
      onAnswer?.(answer)
      acks.push(Number(process.hrtime.bigint() - sentAt[acks.length]) / 1000)
    }
    wake?.()
  })
  while (acks.length < count) {
    if (failure) break
    for (; sent < count && sent - acks.length < window; sent++) {
      sentAt[sent] = process.hrtime.bigint()
      socket.write(JSON.stringify(job(sent)) + '\n')
    }
    await new Promise((resolve) => { wake = resolve })
    if (pauseMs) await new Promise((resolve) => setTimeout(resolve, pauseMs))
  }
  socket.end()
  if (failure) throw failure
  return acks
}

// As handOffLines, but each job on a connection of its own (opened, one line, its answer, closed),
// as a PHP page without the client's `persistent` option hands off; `window` connections at once.
export async function handOffEach (socketPath, { count, window, job, onAnswer }) {
  const acks = []
  let next = 0
  const one = (i) => new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint()
    const socket = net.connect(socketPath)
    let buffered = ''
    socket.once('close', () => reject(new Error('the daemon closed the connection before its answer')))
    socket.setEncoding('utf8').on('error', reject).on('data', (chunk) => {
      buffered += chunk
      const k = buffered.indexOf('\n')
      if (k < 0) return
      const answer = JSON.parse(buffered.slice(0, k))
      socket.end()
      if (answer.status !== 202) return reject(new Error(`hand-off answered ${JSON.stringify(answer)}`))
      onAnswer?.(answer)
      acks.push(Number(process.hrtime.bigint() - t0) / 1000)
      resolve()
    })
    socket.write(JSON.stringify(job(i)) + '\n')
  })
  const lane = async () => { while (next < count) await one(next++) }
  await Promise.all(Array.from({ length: Math.min(window, count) }, lane))
  return acks
}

// Hands `count` jobs off (handOffLines, or handOffEach with `each`), then waits until the daemon is
// done with them: the last one answered long-polled to its end, then nothing left unfinished
// (asking /healthz every few ms all along would cost the daemon ~10 % of the CPU a bench measures:
// express, per poll). Resolves with each hand-off's time (µs) and the last job as it ended.
export async function handOffAndWait (daemon, socketPath, { each = false, ...options }) {
  let lastId = null
  const acks = await (each ? handOffEach : handOffLines)(socketPath, { ...options, onAnswer: (answer) => { lastId = answer.id } })
  const last = await daemon.waitEnd(lastId)
  await daemon.drained({ intervalMs: 5 })
  return { acks, last }
}
