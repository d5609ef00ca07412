// The WebSocket client of one conversation (docs/protocol.md, "WebSocket"). It keeps the highest
// seq it has seen, reconnects with backoff after a drop and resumes with `after=<that seq>`, drops
// any event it has already seen, and hands events over in small batches so that a fast stream
// re-renders at most once per batch.

import type { Frame } from './chat'

export type ConnState = 'connecting' | 'open' | 'reconnecting' | 'closed'

export interface ConnOptions {
  sessionId?: string
  key: string
  onFrames: (frames: Frame[]) => void
  onState: (s: ConnState) => void
  onConnected: (status: { session_id?: string; active_run?: string; paused?: boolean }) => void
  onSession: (id: string) => void // the session a first message created
}

interface Pending {
  resolve: (d: any) => void
  reject: (e: Error) => void
  timer: ReturnType<typeof setTimeout>
}

export class Conn {
  private ws?: WebSocket
  private o: ConnOptions
  private closed = false
  private attempt = 0
  private nextId = 1
  private pending = new Map<string, Pending>()
  private batch: Frame[] = []
  private flushTimer?: ReturnType<typeof setTimeout>
  private retryTimer?: ReturnType<typeof setTimeout>
  // connected: the server has said so on this socket; waiters are requests made before it had.
  private connected = false
  private waiters: Array<() => void> = []
  lastSeq = 0
  sessionId?: string

  constructor(o: ConnOptions) {
    this.o = o
    this.sessionId = o.sessionId
    this.open()
  }

  private url(): string {
    const p = new URLSearchParams()
    if (this.sessionId) p.set('convId', this.sessionId)
    if (this.lastSeq > 0) p.set('after', String(this.lastSeq))
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:'
    const q = p.toString()
    return `${proto}//${location.host}/api/ws${q ? '?' + q : ''}`
  }

  private open() {
    if (this.closed) return
    this.o.onState(this.attempt === 0 ? 'connecting' : 'reconnecting')
    const protocols = ['parley.v1']
    if (this.o.key) protocols.push('parley.auth.' + this.o.key)
    let ws: WebSocket
    try {
      ws = new WebSocket(this.url(), protocols)
    } catch {
      this.scheduleReconnect()
      return
    }
    this.ws = ws
    ws.onmessage = (ev) => this.onMessage(ev.data)
    ws.onclose = () => {
      if (this.ws !== ws) return
      this.ws = undefined
      this.connected = false
      for (const [, p] of this.pending) {
        clearTimeout(p.timer)
        p.reject(new Error('connection lost'))
      }
      this.pending.clear()
      this.scheduleReconnect()
    }
  }

  private scheduleReconnect() {
    if (this.closed) return
    this.o.onState('reconnecting')
    const base = Math.min(5000, 300 * 2 ** Math.min(this.attempt, 5))
    this.attempt++
    this.retryTimer = setTimeout(() => this.open(), base / 2 + Math.random() * (base / 2))
  }

  private onMessage(raw: unknown) {
    if (typeof raw !== 'string') return
    let f: Frame
    try {
      f = JSON.parse(raw)
    } catch {
      return
    }
    if (f.seq === undefined && f.type === 'status' && f.data?.state === 'connected') {
      this.attempt = 0
      this.connected = true
      const waiting = this.waiters
      this.waiters = []
      for (const w of waiting) w()
      this.o.onState('open')
      if (f.data.session_id && !this.sessionId) this.sessionId = f.data.session_id
      this.o.onConnected(f.data)
      return
    }
    if (f.seq === undefined && f.id && this.pending.has(f.id)) {
      const p = this.pending.get(f.id)!
      this.pending.delete(f.id)
      clearTimeout(p.timer)
      if (f.type === 'error') p.reject(Object.assign(new Error(f.data?.message ?? 'error'), { code: f.data?.code }))
      else p.resolve(f.data)
      return
    }
    if (f.seq !== undefined) {
      if (f.seq <= this.lastSeq) return // seen before this reconnect
      this.lastSeq = f.seq
    }
    this.batch.push(f)
    if (!this.flushTimer) this.flushTimer = setTimeout(() => this.flush(), 32)
  }

  private flush() {
    this.flushTimer = undefined
    const b = this.batch
    this.batch = []
    if (b.length) this.o.onFrames(b)
  }

  // whenConnected resolves once the server has greeted this connection (at once if it has), or
  // fails after ms: a message sent while the socket (re)connects goes out when it is up.
  private whenConnected(ms: number): Promise<void> {
    if (this.connected && this.ws?.readyState === WebSocket.OPEN) return Promise.resolve()
    if (this.closed) return Promise.reject(new Error('connection closed'))
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer)
        resolve()
      }
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== done)
        reject(new Error('not connected; reconnecting'))
      }, ms)
      this.waiters.push(done)
    })
  }

  // request sends a client frame once the connection is up (waiting at most 10 s for it) and
  // waits (at most 15 s) for its reply.
  request(type: string, data?: unknown): Promise<any> {
    return this.whenConnected(10000).then(() => this.send(type, data))
  }

  private send(type: string, data?: unknown): Promise<any> {
    const ws = this.ws
    if (!ws || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error('not connected; reconnecting'))
    const id = 'c' + this.nextId++
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id)
        reject(new Error('no answer from the server'))
      }, 15000)
      this.pending.set(id, { resolve, reject, timer })
      ws.send(JSON.stringify({ type, id, data }))
    }).then((d: any) => {
      if (type === 'user_message' && d?.session_id && !this.sessionId) {
        this.sessionId = d.session_id
        this.o.onSession(d.session_id)
      }
      return d
    })
  }

  // drop closes the socket as a network failure would (used by the reconnect test hook).
  drop() {
    this.ws?.close()
  }

  close() {
    this.closed = true
    clearTimeout(this.retryTimer)
    clearTimeout(this.flushTimer)
    this.ws?.close()
    this.ws = undefined
    this.o.onState('closed')
  }
}
