// A raw line-protocol connection for tests: write bytes, take answer lines one by one (parsed),
// know when the daemon closed it, and see every byte it sent (all(): an HTTP answer, say).
import net from 'node:net'

export function connectLines (address) {
  const socket = net.connect(address)
  let buffered = ''
  let all = ''
  const lines = []
  const waiting = []
  const closed = new Promise((resolve) => socket.once('close', resolve))
  socket.on('error', () => {})
  socket.on('data', (d) => {
    all += d
    buffered += d
    let nl
    while ((nl = buffered.indexOf('\n')) !== -1) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      if (waiting.length) waiting.shift()(line)
      else lines.push(line)
    }
  })
  const next = async () => JSON.parse(lines.length ? lines.shift() : await new Promise((resolve) => waiting.push(resolve)))
  return {
    socket,
    closed,
    write: (text) => socket.write(text),
    next,
    async ask (job) {
      socket.write((typeof job === 'string' ? job : JSON.stringify(job)) + '\n')
      return next()
    },
    rest: async () => { await closed; return { lines: lines.map((l) => JSON.parse(l)), buffered } },
    all: () => all,
    end: () => socket.end()
  }
}
