// A minimal Chrome DevTools Protocol client for a daemon spawned with --inspect=127.0.0.1:0:
// lets a leak test collect garbage in the daemon before it measures, so that what it compares is
// what is still reachable, not where V8's collector happened to be. Node's own WebSocket (node 22+).

export const INSPECTOR_LINE = /^(Debugger listening on ws:\/\/|For help, see: https:\/\/nodejs\.org|Debugger attached\.|Debugger ending on ws:|Waiting for the debugger to disconnect)/

// `output`: the daemon's output so far, as an array of strings, or a function that returns it.
export async function connectInspector (output, { timeoutMs = 10000 } = {}) {
  const end = Date.now() + timeoutMs
  const text = typeof output === 'function' ? output : () => output.join('')
  let url
  while (!(url = /Debugger listening on (ws:\/\/\S+)/.exec(text())?.[1])) {
    if (Date.now() > end) throw new Error(`no inspector URL in the daemon's output:\n${text().slice(0, 2000)}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  const ws = new WebSocket(url)
  await new Promise((resolve, reject) => {
    ws.addEventListener('open', resolve, { once: true })
    ws.addEventListener('error', (e) => reject(new Error(`inspector ${url}: ${e.message ?? e.type}`)), { once: true })
  })
  let id = 0
  const pending = new Map()
  const listeners = new Set()
  ws.addEventListener('message', (e) => {
    const msg = JSON.parse(e.data)
    if (msg.id === undefined) { for (const fn of listeners) fn(msg); return } // an event
    const p = pending.get(msg.id)
    pending.delete(msg.id)
    if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}`))
    else p.resolve(msg.result)
  })
  const call = (method, params = {}) => new Promise((resolve, reject) => {
    pending.set(++id, { resolve, reject, method })
    ws.send(JSON.stringify({ id, method, params }))
  })
  return {
    call,
    onEvent: (fn) => { listeners.add(fn); return () => listeners.delete(fn) },
    // A heap snapshot (the .heapsnapshot JSON text), for a leak hunt.
    async heapSnapshot () {
      const chunks = []
      const off = this.onEvent((m) => { if (m.method === 'HeapProfiler.addHeapSnapshotChunk') chunks.push(m.params.chunk) })
      try { await call('HeapProfiler.takeHeapSnapshot', { reportProgress: false }) } finally { off() }
      return chunks.join('')
    },
    // Full collections (two: the first may leave what finalizers freed), then the process's figures.
    async collectedMemory () {
      await call('HeapProfiler.collectGarbage')
      await call('HeapProfiler.collectGarbage')
      const r = await call('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true })
      return JSON.parse(r.result.value)
    },
    close: () => ws.close()
  }
}
