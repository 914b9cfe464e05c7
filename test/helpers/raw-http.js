// One HTTP request written as is on a fresh connection to 127.0.0.1:`port` (for what HTTP clients
// will not send, like an absolute-form target); resolves once the server closes the connection
// with the answer's status, header fields (lower-case names) and body text.
import net from 'node:net'

export function rawRequest (port, text) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text))
    let out = ''
    socket.on('data', (d) => { out += d })
    socket.once('close', () => {
      const end = out.indexOf('\r\n\r\n')
      const lines = out.slice(0, end).split('\r\n')
      const headers = Object.fromEntries(lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]))
      resolve({ status: Number(lines[0].split(' ')[1]), headers, body: out.slice(end + 4) })
    })
    socket.once('error', reject)
  })
}
