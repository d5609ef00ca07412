// Unit tests of branch navigation (src/branches.ts) and of how the conversation follows a branch
// (src/chat.ts: an edit or a regeneration, seen live, cuts the old branch away; a switch replaces it).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { addNodes, editBody, endsAnswer, indexTree, mergeNodes, siblings } from '../src/branches'
import { answerStart, applyFrame, cutFrom, initialChat, showBranch, withHistory, withTree, type ChatState, type Frame } from '../src/chat'
import type { Message, TreeNode } from '../src/api'

const S = 'sess'
let seq = 0
const msg = (id: string, role: Message['role'], text: string, parent?: string, extra: Partial<Message> = {}): Message => ({
  role,
  content: text,
  id,
  session_id: S,
  seq: ++seq,
  created_at: '',
  ...(parent ? { parent_id: parent } : {}),
  ...extra,
})
const node = (id: string, role: string, parent?: string): TreeNode => ({ id, role, ...(parent ? { parent_id: parent } : {}) })
const ev = (type: string, data: any): Frame => ({ type, seq: ++seq, data: { run_id: 'r', session_id: S, ...data } })
const record = (m: Message) => ev(m.role === 'user' ? 'user_message' : m.role === 'tool' ? 'tool_result' : 'llm_complete', { type: m.role === 'tool' ? 'tool_result' : 'record', message: m })
const texts = (s: ChatState) => s.entries.map((e) => (e.kind === 'error' ? 'error:' + e.message : e.kind + ':' + (e as any).text))
const fold = (s: ChatState, frames: Frame[]) => frames.reduce((x, f) => applyFrame(x, f, 0), s)

// u1 → a1 → u2 → {a2, a2b, a2c}; u1 also has an edited sibling u1b → a1b; and a root sibling r2.
const tree: TreeNode[] = [
  node('u1', 'user'),
  node('a1', 'assistant', 'u1'),
  node('u2', 'user', 'a1'),
  node('a2', 'assistant', 'u2'),
  node('u1b', 'user'),
  node('a1b', 'assistant', 'u1b'),
  node('a2b', 'assistant', 'u2'),
  node('a2c', 'assistant', 'u2'),
]

test('siblings: "2 / 3" from messages of the same role with the same parent, in storage order', () => {
  const ix = indexTree(tree)
  assert.deepEqual(siblings(ix, 'a2'), { index: 0, count: 3, prev: undefined, next: 'a2b' })
  assert.deepEqual(siblings(ix, 'a2b'), { index: 1, count: 3, prev: 'a2', next: 'a2c' })
  assert.deepEqual(siblings(ix, 'a2c'), { index: 2, count: 3, prev: 'a2b', next: undefined })
  // Roots (no parent) are siblings of each other: an edit of the first message.
  assert.deepEqual(siblings(ix, 'u1b'), { index: 1, count: 2, prev: 'u1', next: undefined })
  assert.equal(siblings(ix, 'u2'), null, 'a message alone has no navigation')
  assert.equal(siblings(ix, 'nope'), null)
})

test('siblings: a parent\'s children of another role do not count (tool results, a retried failure)', () => {
  const ix = indexTree([node('u1', 'user'), node('a1', 'assistant', 'u1'), node('t1', 'tool', 'a1'), node('x', 'user', 'a1'), node('y', 'user', 'a1')])
  assert.equal(siblings(ix, 't1'), null)
  assert.equal(siblings(ix, 'x')?.count, 2)
})

test('addNodes and mergeNodes keep each message once, the tree read first', () => {
  let n = addNodes([node('u1', 'user')], [msg('u1', 'user', 'x'), msg('a1', 'assistant', 'y', 'u1')])
  assert.deepEqual(n.map((x) => x.id), ['u1', 'a1'])
  assert.equal(n[1].parent_id, 'u1')
  n = mergeNodes(n, [node('u1', 'user'), node('z', 'user')])
  assert.deepEqual(n.map((x) => x.id), ['u1', 'z', 'a1'], 'a node an event added after the read stays')
  assert.deepEqual(mergeNodes(null, [node('q', 'user')]).map((x) => x.id), ['q'])
})

test('an edit seen live: the new user message, a sibling, replaces the old one and what followed', () => {
  let s = withHistory(initialChat(), [msg('u1', 'user', 'first'), msg('a1', 'assistant', 'one', 'u1'), msg('u2', 'user', 'second', 'a1'), msg('a2', 'assistant', 'two', 'u2')])
  s = withTree(s, [node('u1', 'user'), node('a1', 'assistant', 'u1'), node('u2', 'user', 'a1'), node('a2', 'assistant', 'u2')])
  s = fold(s, [ev('status', { type: 'start' }), record(msg('u2b', 'user', 'second, edited', 'a1')), ev('llm_chunk', { content: 'tw' })])
  assert.deepEqual(texts(s), ['user:first', 'assistant:one', 'user:second, edited'])
  assert.equal(s.draft.text, 'tw')
  s = fold(s, [record(msg('a2b', 'assistant', 'two again', 'u2b')), ev('status', { type: 'done' })])
  assert.deepEqual(texts(s), ['user:first', 'assistant:one', 'user:second, edited', 'assistant:two again'])
  assert.deepEqual(s.path, ['u1', 'a1', 'u2b', 'a2b'])
  assert.equal(siblings(indexTree(s.nodes!), 'u2b')?.count, 2, 'the tree grew with the records: "2 / 2"')
  // A replay of the old branch's records (already cut away) is not shown again: known is cut too.
  assert.ok(!s.known.has('u2') && !s.known.has('a2'))
})

test('an edit of the first message: a user record with no parent starts the conversation over', () => {
  let s = withHistory(initialChat(), [msg('u1', 'user', 'first'), msg('a1', 'assistant', 'one', 'u1')])
  s = withTree(s, [node('u1', 'user'), node('a1', 'assistant', 'u1')])
  s = fold(s, [record(msg('u1b', 'user', 'first, edited')), record(msg('a1b', 'assistant', 'one again', 'u1b'))])
  assert.deepEqual(texts(s), ['user:first, edited', 'assistant:one again'])
})

test('without a tree (a server without branches) a message with no parent is appended as before', () => {
  let s = withHistory(initialChat(), [msg('u1', 'user', 'first'), msg('a1', 'assistant', 'one')])
  s = fold(s, [record(msg('u2', 'user', 'second')), record(msg('a2', 'assistant', 'two'))])
  assert.deepEqual(texts(s), ['user:first', 'assistant:one', 'user:second', 'assistant:two'])
})

test('a regeneration after tool rounds: the new answer cuts back to its parent, errors of the cut turn go too', () => {
  const call = { id: 'c1', type: 'function', function: { name: 'echo', arguments: '{}' } }
  let s = withHistory(initialChat(), [
    msg('u1', 'user', 'q'),
    msg('a1', 'assistant', '', 'u1', { tool_calls: [call] }),
    msg('t1', 'tool', 'echoed', 'a1', { tool_call_id: 'c1', success: true }),
    msg('a2', 'assistant', 'final', 't1'),
  ])
  s = fold(s, [ev('error', { error: { code: 'upstream', message: 'later failure' } })])
  assert.deepEqual(texts(s), ['user:q', 'assistant:', 'assistant:final', 'error:later failure'])
  s = fold(s, [record(msg('a2b', 'assistant', 'final again', 't1'))])
  assert.deepEqual(texts(s), ['user:q', 'assistant:', 'assistant:final again'])
  assert.equal(s.results.c1.content, 'echoed', 'the tool round stays with its result')
  s = fold(s, [record(msg('a1b', 'assistant', 'whole new answer', 'u1'))])
  assert.deepEqual(texts(s), ['user:q', 'assistant:whole new answer'])
})

test('cutFrom: the page cuts at once as a person edits; the new branch\'s record then follows the parent', () => {
  let s = withHistory(initialChat(), [msg('u1', 'user', 'first'), msg('a1', 'assistant', 'one', 'u1'), msg('u2', 'user', 'second', 'a1'), msg('a2', 'assistant', 'two', 'u2')])
  s = cutFrom(s, 'u2')
  assert.deepEqual(texts(s), ['user:first', 'assistant:one'])
  assert.equal(cutFrom(s, 'u2'), s, 'a message no longer shown: nothing to cut')
  s = fold(s, [record(msg('u2b', 'user', 'second, edited', 'a1'))])
  assert.deepEqual(texts(s), ['user:first', 'assistant:one', 'user:second, edited'])
  // The record came first and the cut after (the HTTP answer was slower than the event): no harm.
  assert.equal(cutFrom(s, 'u2'), s)
})

test('showBranch replaces what is shown with another branch, keeping pending approvals only', () => {
  let s = withHistory(initialChat(), [msg('u1', 'user', 'first'), msg('a1', 'assistant', 'one', 'u1')])
  s = fold(s, [
    ev('approval_required', { approval: { call_id: 'p1', tool: 'rm', arguments: '{}' } }),
    ev('approval_required', { approval: { call_id: 'd1', tool: 'rm', arguments: '{}' } }),
    ev('approval_resolved', { approval: { call_id: 'd1', tool: 'rm', arguments: '{}', decision: 'denied' } }),
  ])
  s = showBranch(s, [msg('u1b', 'user', 'other'), msg('a1b', 'assistant', 'other answer', 'u1b')], tree)
  assert.deepEqual(texts(s), ['user:other', 'assistant:other answer'])
  assert.deepEqual(Object.keys(s.approvals), ['p1'])
  assert.equal(s.nodes, tree)
})

test('a replayed tool result already shown updates nothing twice', () => {
  let s = withHistory(initialChat(), [msg('u1', 'user', 'q'), msg('a1', 'assistant', '', 'u1', { tool_calls: [{ id: 'c1', type: 'function', function: { name: 'e', arguments: '{}' } }] })])
  const t = msg('t1', 'tool', 'r', 'a1', { tool_call_id: 'c1' })
  s = fold(s, [record(t), record(t)])
  assert.deepEqual(s.path, ['u1', 'a1', 't1'])
  assert.equal(s.results.c1.content, 'r')
})

test('answerStart: a regeneration takes away the whole answer, its tool rounds included', () => {
  const call = { id: 'c1', type: 'function', function: { name: 'echo', arguments: '{}' } }
  const s = withHistory(initialChat(), [
    msg('u1', 'user', 'q'),
    msg('a1', 'assistant', '', 'u1', { tool_calls: [call] }),
    msg('t1', 'tool', 'echoed', 'a1', { tool_call_id: 'c1' }),
    msg('a2', 'assistant', 'final', 't1'),
    msg('u2', 'user', 'next', 'a2'),
    msg('a3', 'assistant', 'done', 'u2'),
  ])
  assert.equal(answerStart(s, 'a2'), 'a1')
  assert.equal(answerStart(s, 'a1'), 'a1')
  assert.equal(answerStart(s, 'a3'), 'a3')
  assert.deepEqual(texts(cutFrom(s, answerStart(s, 'a2'))), ['user:q'])
  assert.equal(answerStart(s, 'unknown'), 'unknown')
})

test('endsAnswer: Regenerate and Fork sit on the last message of each answer only', () => {
  const call = [{}]
  const rows = [
    { kind: 'user' },
    { kind: 'assistant', toolCalls: call }, // asks for a tool: the answer goes on
    { kind: 'assistant', toolCalls: [] }, // the answer's end
    { kind: 'error' },
    { kind: 'user' },
    { kind: 'assistant', toolCalls: [], partial: true }, // not stored: nothing to regenerate
    { kind: 'user' },
    { kind: 'assistant', toolCalls: call }, // the last row, still asking for tools
  ]
  assert.deepEqual(rows.map((_, i) => endsAnswer(rows, i)), [false, false, true, false, false, false, false, false])
  const streaming = [{ kind: 'user' }, { kind: 'assistant', toolCalls: [] }, { kind: 'draft' }]
  assert.equal(endsAnswer(streaming, 1), false, 'a draft after it: the answer is still going')
  assert.equal(endsAnswer([{ kind: 'assistant', toolCalls: [] }], 0), true)
})

test('editBody: the edit keeps the attachments of the message it replaces, and the composer\'s model and tools', () => {
  assert.deepEqual(editBody('again', { fileIds: [], images: [] }, '', null), { message: 'again' })
  assert.deepEqual(editBody('again', { fileIds: ['f1', 'f2'], images: ['data:image/png;base64,AAAA', 'https://example.com/a.png'] }, 'oa/gpt-4o', ['calculator']), {
    message: 'again',
    model: 'oa/gpt-4o',
    selected_tools: ['calculator'],
    file_ids: ['f1', 'f2'],
    binary_content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }],
  })
  assert.deepEqual(editBody('x', { fileIds: [], images: [] }, '', []).selected_tools, [], 'no tools stays no tools')
})
