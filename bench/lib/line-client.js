// A client of the daemon's line protocol for the benches: `count` jobs handed off over one
// connection, at most `window` unanswered at a time (as many PHP clients keep them in flight).
import net from 'node:net'

// Resolves with each hand-off's time from its line written to its answer read, in µs, once all
// are answered; rejects on the first answer that is not a 202. `job(i)` is the i-th job's body;
// `onAnswer(answer)` sees each answer.
export async function handOffLines (socketPath, { count, window, job, onAnswer }) {
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
  }
  socket.end()
  if (failure) throw failure
  return acks
}
