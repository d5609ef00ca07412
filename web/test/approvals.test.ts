// Unit tests of tool approval as the page shows it (src/approvals.ts and its events in src/chat.ts).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { note, readEdit, resolved, required, withPending, type Approvals } from '../src/approvals'
import { applyFrame, initialChat, withApprovals, withDecision, type ChatState, type Frame } from '../src/chat'

let seq = 0
const ev = (type: string, data: any): Frame => ({ type, seq: ++seq, data: { run_id: 'r', session_id: 's', ...data } })
const req = { call_id: 'call_1', tool: 'delete_file', server: 'fs', arguments: '{"path":"/x"}', reason: 'delete_file may change files', expires_at: '2026-11-24T09:00:00Z' }
const fold = (s: ChatState, frames: Frame[]) => frames.reduce((x, f) => applyFrame(x, f, 0), s)

test('approval_required makes a pending card; status awaiting_approval is a run state of its own', () => {
  const s = fold(initialChat(), [ev('status', { type: 'start' }), ev('approval_required', { type: 'approval_required', approval: req }), ev('status', { type: 'status', state: 'awaiting_approval' })])
  assert.equal(s.run, 'awaiting')
  const it = s.approvals.call_1
  assert.deepEqual(
    { tool: it.tool, server: it.server, arguments: it.arguments, why: it.why, expires_at: it.expires_at, resolved: it.resolved },
    { tool: 'delete_file', server: 'fs', arguments: '{"path":"/x"}', why: 'delete_file may change files', expires_at: '2026-11-24T09:00:00Z', resolved: undefined },
  )
  const t = fold(s, [ev('status', { type: 'status', state: 'running' })])
  assert.equal(t.run, 'running', 'the wait ended')
})

test('approval_resolved turns the card into a note; the requested arguments are kept next to what ran', () => {
  let s = fold(initialChat(), [ev('approval_required', { approval: req })])
  s = fold(s, [ev('approval_resolved', { approval: { call_id: 'call_1', tool: 'delete_file', decision: 'approved', arguments: '{"path":"/y"}', edited: true } })])
  const it = s.approvals.call_1
  assert.equal(it.arguments, '{"path":"/x"}')
  assert.deepEqual(it.resolved, { decision: 'approved', arguments: '{"path":"/y"}', edited: true, reason: undefined, always: false })
  assert.equal(note(it), 'Approved delete_file with edited arguments')
})

test('a resumed stream replays required then resolved; a late or repeated "required" never reopens a decided card', () => {
  let s = fold(initialChat(), [ev('approval_required', { approval: req }), ev('approval_resolved', { approval: { ...req, decision: 'denied', reason: 'not that file' } })])
  s = fold(s, [ev('approval_required', { approval: req })])
  assert.equal(s.approvals.call_1.resolved?.decision, 'denied')
  // The pending list read when the session opened answers after the decision event came.
  s = withApprovals(s, [req, { ...req, call_id: 'call_2' }])
  assert.equal(s.approvals.call_1.resolved?.decision, 'denied', 'the decision wins over a stale pending list')
  assert.equal(s.approvals.call_2.resolved, undefined, 'another pending call from the list shows')
  assert.equal(note(s.approvals.call_1), 'Denied delete_file: not that file')
})

test('a session opened late shows the pending approvals it reads, and later events fold into them', () => {
  let s = withApprovals(initialChat(), [req])
  assert.equal(s.approvals.call_1.why, 'delete_file may change files')
  s = fold(s, [ev('approval_resolved', { approval: { call_id: 'call_1', tool: 'delete_file', decision: 'approved', arguments: req.arguments, always: true } })])
  assert.equal(note(s.approvals.call_1), 'Always allowed delete_file in this session')
  assert.equal(s.approvals.call_1.server, 'fs', 'what the card showed stays')
})

test('the page\'s own decision shows at once, and the event that follows changes nothing', () => {
  let s = withApprovals(initialChat(), [req])
  const answer = { call_id: 'call_1', tool: 'delete_file', decision: 'denied' as const, arguments: req.arguments, reason: 'no' }
  s = withDecision(s, answer)
  const once = s.approvals
  s = fold(s, [ev('approval_resolved', { approval: answer })])
  assert.deepEqual(s.approvals, once)
})

test('expired: the note says nobody answered, with the reason', () => {
  let m: Approvals = required({}, req)
  m = resolved(m, { call_id: 'call_1', tool: 'delete_file', arguments: req.arguments, decision: 'expired', reason: 'no answer within 10m0s' })
  assert.equal(note(m.call_1), 'delete_file was not approved in time: denied (no answer within 10m0s)')
  assert.equal(withPending(m, [req]), m)
})

test('readEdit: unchanged arguments are not sent as an edit; a changed object is; bad JSON is refused here', () => {
  assert.deepEqual(readEdit('{\n  "path": "/x"\n}', '{"path":"/x"}'), { ok: true })
  assert.deepEqual(readEdit('{"b":1,"a":{"y":2,"x":1}}', '{"a":{"x":1,"y":2},"b":1}'), { ok: true }, 'key order does not matter')
  assert.deepEqual(readEdit('{"path":"/y"}', '{"path":"/x"}'), { ok: true, args: { path: '/y' } })
  const bad = readEdit('{"path":', '{"path":"/x"}')
  assert.equal(bad.ok, false)
  assert.match((bad as any).error, /not valid JSON/)
  assert.deepEqual(readEdit('[1]', '{}'), { ok: false, error: 'The arguments must be a JSON object.' })
  assert.deepEqual(readEdit('{"a":1}', 'not json'), { ok: true, args: { a: 1 } }, 'an original that does not parse: what the person wrote is sent')
})
