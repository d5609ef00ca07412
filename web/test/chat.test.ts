// Unit tests of the display rule for streamed text (src/chat.ts), run by scripts/unit.mjs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { applyFrame, initialChat, withHistory, type ChatState, type Frame } from '../src/chat'
import type { Message } from '../src/api'

const S = 'sess'
const R = 'run1'
let seq = 0
const user = (id: string, text: string): Message => ({ role: 'user', content: text, id, session_id: S, seq: 1, created_at: '' })
const asst = (id: string, text: string, extra: Partial<Message> = {}): Message => ({ role: 'assistant', content: text, id, session_id: S, seq: 2, created_at: '', ...extra })

const ev = (type: string, data: any): Frame => ({ type, seq: ++seq, data: { run_id: R, session_id: S, ...data } })
const start = () => ev('status', { type: 'start' })
const chunk = (c: string) => ev('llm_chunk', { type: 'chunk', content: c })
const reasoning = (c: string) => ev('llm_reasoning', { type: 'reasoning', content: c })
const record = (m: Message) => ev(m.role === 'user' ? 'user_message' : 'llm_complete', { type: 'record', message: m })
const recovered = () => ev('status', { type: 'status', state: 'recovered' })
const done = (r = 'stop') => ev('status', { type: 'done', finish_reason: r })

function fold(s: ChatState, frames: Frame[], now = 1000): ChatState {
  for (const f of frames) s = applyFrame(s, f, now)
  return s
}
const texts = (s: ChatState) => s.entries.map((e) => (e.kind === 'error' ? 'error:' + e.message : e.kind + ':' + (e as any).text))

test('chunks are a draft that the assistant record replaces', () => {
  let s = fold(initialChat(), [start(), record(user('u1', 'hi')), reasoning('think'), chunk('Hel'), chunk('lo')])
  assert.equal(s.draft.text, 'Hello')
  assert.equal(s.draft.reasoning, 'think')
  assert.equal(s.run, 'running')
  s = fold(s, [record(asst('a1', 'Hello!', { reasoning_content: 'think' })), done()])
  assert.deepEqual(texts(s), ['user:hi', 'assistant:Hello!'])
  assert.equal(s.draft.text, '')
  assert.equal(s.run, 'idle')
})

test('a replay of records already shown adds nothing, and still ends the draft', () => {
  let s = withHistory(initialChat(), [user('u1', 'hi'), asst('a1', 'Hello')])
  s = fold(s, [start(), record(user('u1', 'hi')), chunk('Hel'), chunk('lo'), record(asst('a1', 'Hello')), done()])
  assert.deepEqual(texts(s), ['user:hi', 'assistant:Hello'])
  assert.equal(s.draft.text, '')
})

test('recovered discards the draft: the text shows once', () => {
  let s = fold(initialChat(), [start(), record(user('u1', 'q')), chunk('Par'), chunk('tial')])
  s = fold(s, [recovered()])
  assert.equal(s.draft.text, '', 'the draft of the dead instance is gone')
  s = fold(s, [chunk('Partial'), chunk(' and more')])
  assert.equal(s.draft.text, 'Partial and more')
  s = fold(s, [record(asst('a1', 'Partial and more')), done()])
  assert.deepEqual(texts(s), ['user:q', 'assistant:Partial and more'])
})

test('a run that ends with no record keeps what streamed, marked as not stored', () => {
  const s = fold(initialChat(), [start(), record(user('u1', 'q')), chunk('half'), done('aborted')])
  assert.deepEqual(texts(s), ['user:q', 'assistant:half'])
  assert.equal((s.entries[1] as any).partial, true)
  assert.equal(s.draft.text, '')
})

test('tool calls: started, then their results joined by id', () => {
  const call = { id: 'c1', type: 'function', function: { name: 'calculator', arguments: '{"expression":"1+1"}' } }
  let s = fold(initialChat(), [start(), record(asst('a1', '', { tool_calls: [call] })), ev('tool_call', { type: 'tool_call', tool_call: call })], 500)
  assert.equal(s.started.c1, 500)
  s = fold(s, [
    ev('tool_result', { type: 'tool_result', message: { role: 'tool', content: '2', tool_call_id: 'c1', success: true, latency_ms: 3, server: 'm', id: 't1', session_id: S, seq: 3, created_at: '' } }),
  ])
  assert.deepEqual(s.results.c1, { content: '2', success: true, latency_ms: 3, server: 'm' })
})

test('reasoning time runs from the first reasoning piece to the first answer piece', () => {
  let s = initialChat()
  s = applyFrame(s, start(), 0)
  s = applyFrame(s, reasoning('a'), 1000)
  s = applyFrame(s, reasoning('b'), 2000)
  s = applyFrame(s, chunk('x'), 5000)
  s = applyFrame(s, record(asst('a1', 'x', { reasoning_content: 'ab' })), 9000)
  assert.equal((s.entries[0] as any).thoughtMs, 4000)
})

test('a failed turn: its streamed text is kept as recorded, an empty one shows only the error', () => {
  let s = fold(initialChat(), [start(), record(user('u1', 'first')), chunk('par'), record(asst('a1', 'par', { error: 'upstream' })), ev('error', { type: 'error', error: { code: 'upstream', message: 'boom' } }), done('error')])
  assert.deepEqual(texts(s), ['user:first', 'assistant:par', 'error:boom'])
  assert.equal(s.draft.text, '')
  s = fold(s, [start(), record(asst('a2', '', { error: 'upstream' })), ev('error', { type: 'error', error: { code: 'upstream', message: 'again' } }), done('error')])
  assert.deepEqual(texts(s), ['user:first', 'assistant:par', 'error:boom', 'error:again'])
})

test('a user message with image parts shows its text and its images', () => {
  const m: Message = {
    role: 'user',
    content: [
      { type: 'text', text: 'What is this?' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
      { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
    ],
    id: 'u1',
    session_id: S,
    seq: 1,
    created_at: '',
  }
  const s = withHistory(initialChat(), [m])
  const e = s.entries[0] as any
  assert.equal(e.text, 'What is this?')
  assert.deepEqual(e.images, ['data:image/png;base64,AAAA', 'https://example.com/a.png'])
})

test('a user message with file parts lists the files it names', () => {
  const m: Message = {
    role: 'user',
    content: [
      { type: 'text', text: 'Compare' },
      { type: 'file', file: { file_id: 'f1', filename: 'report.pdf' } },
      { type: 'file', file: { file_id: 'f2' } },
    ],
    id: 'u1',
    session_id: S,
    seq: 1,
    created_at: '',
  }
  const e = withHistory(initialChat(), [m]).entries[0] as any
  assert.equal(e.text, 'Compare')
  assert.deepEqual(e.files, [
    { id: 'f1', name: 'report.pdf' },
    { id: 'f2', name: 'file' },
  ])
})
