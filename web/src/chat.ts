// The conversation as the page shows it, built from stored messages and run events.
//
// Display rule for streamed text (shared with the server): `chunk` and `reasoning` events are a
// DRAFT of the assistant message in progress. A `record` of an assistant message replaces the
// draft with the stored message; a `status` `recovered` discards the draft (the new instance
// regenerates that text); a run that ends in error or abort stores what was streamed as a record.
// Following it, every piece of text shows exactly once, also when events are replayed.
//
// Branches (issue 23): the page shows one branch of the session's message tree. A stored message
// whose parent is not the last message shown starts another branch (an edit, a regeneration, seen
// live or from another tab): what followed its parent is cut away before it is shown.

import type { Approval, Message, ToolCall, TreeNode, Usage } from './api'
import { addNodes, mergeNodes } from './branches'
import { pendingOnly, required, resolved, withPending, type Approvals } from './approvals'

export interface ToolResult {
  content: string
  success?: boolean
  latency_ms?: number
  server?: string
}

// Every entry has `at`: its message's position in ChatState.path (an entry that is not a message,
// an error or an unstored answer, the length of the path when it came), to cut a branch away.
export type Entry = (
  | { kind: 'user'; id: string; text: string; images: string[]; files: { id: string; name: string }[] }
  | {
      kind: 'assistant'
      id: string
      text: string
      reasoning: string
      thoughtMs?: number
      toolCalls: ToolCall[]
      model?: string
      usage?: Usage
      latency_ms?: number
      partial?: boolean
    }
  | { kind: 'error'; id: string; code: string; message: string }
) & { at?: number }

export interface Draft {
  text: string
  reasoning: string
  reasoningStart?: number
  reasoningEnd?: number
}

// awaiting: the run waits for the owner's decision on a tool call (status awaiting_approval).
export type RunState = 'idle' | 'running' | 'paused' | 'awaiting'

export interface ChatState {
  entries: Entry[]
  known: Set<string> // message ids already shown
  path: string[] // the ids of the messages shown (tool messages too), root first
  results: Record<string, ToolResult> // tool_call_id → result
  started: Record<string, number> // tool_call_id → when it started executing (client clock)
  draft: Draft
  runId?: string
  run: RunState
  nodes: TreeNode[] | null // the session's message tree (every branch); null: not read (or no branches on this server)
  approvals: Approvals // tool calls that wait for, or got, the owner's decision
}

export interface Frame {
  type: string
  seq?: number
  id?: string
  data?: any
}

export const emptyDraft: Draft = { text: '', reasoning: '' }

export function initialChat(): ChatState {
  return { entries: [], known: new Set(), path: [], results: {}, started: {}, draft: emptyDraft, run: 'idle', nodes: null, approvals: {} }
}

export function contentText(c: Message['content']): string {
  if (c == null) return ''
  if (typeof c === 'string') return c
  return c
    .filter((p) => p.type === 'text')
    .map((p) => p.text ?? '')
    .join('\n')
}

// contentImages lists the URLs of a message's image parts.
export function contentImages(c: Message['content']): string[] {
  if (c == null || typeof c === 'string') return []
  return c.filter((p) => p.type === 'image_url' && p.image_url?.url).map((p) => p.image_url!.url)
}

// contentFiles lists the uploaded files a message names (its file parts).
export function contentFiles(c: Message['content']): { id: string; name: string }[] {
  if (c == null || typeof c === 'string') return []
  return c.filter((p) => p.type === 'file' && p.file?.file_id).map((p) => ({ id: p.file!.file_id!, name: p.file!.filename ?? 'file' }))
}

// cutAt keeps the first k messages of the branch shown and what came with them; the rest goes.
function cutAt(s: ChatState, k: number): ChatState {
  if (k >= s.path.length) return s
  const gone = s.path.slice(k)
  const known = new Set(s.known)
  for (const id of gone) known.delete(id)
  return { ...s, path: s.path.slice(0, k), known, entries: s.entries.filter((e) => (e.at ?? 0) < k) }
}

// cutFrom removes a message from the branch shown, with everything after it (at once, as a person
// edits or regenerates, before the new branch's messages arrive). It does nothing when the message
// is not shown (a new branch already replaced it).
export function cutFrom(s: ChatState, id: string): ChatState {
  const i = s.path.indexOf(id)
  return i < 0 ? s : cutAt(s, i)
}

// answerStart is the first message of the answer that message id belongs to: the one after the
// user message before it (a regeneration answers that user message again, so all of the answer,
// its tool rounds included, goes). It is id itself when no user message comes before it.
export function answerStart(s: ChatState, id: string): string {
  const i = s.path.indexOf(id)
  if (i < 0) return id
  const users = new Set(s.entries.filter((e) => e.kind === 'user').map((e) => e.id))
  for (let j = i; j >= 0; j--) if (users.has(s.path[j])) return s.path[j + 1] ?? id
  return id
}

// follow cuts the branch shown back to m's parent when m starts another branch.
function follow(s: ChatState, m: Message): ChatState {
  if (s.path.length === 0) return s
  const p = m.parent_id
  if (p) {
    if (p === s.path[s.path.length - 1]) return s
    const i = s.path.lastIndexOf(p)
    return i < 0 ? s : cutAt(s, i + 1)
  }
  // A user message with no parent on a server with branches is a new first message (an edit of
  // the first one).
  return m.role === 'user' && s.nodes ? cutAt(s, 0) : s
}

// addMessage folds one stored message into the state (a tool message becomes its call's result).
// owned: s.entries, s.known and s.path are the caller's private copies, to be extended in place.
function addMessage(s: ChatState, m: Message, now: number, owned = false): ChatState {
  if (s.known.has(m.id)) {
    // Already shown (a replayed record): an assistant record still ends the draft.
    if (m.role === 'tool' && m.tool_call_id) return withResult(s, m)
    return m.role === 'assistant' ? { ...s, draft: emptyDraft } : s
  }
  const before = s
  s = follow(s, m)
  if (s !== before) owned = false
  const known = owned ? s.known : new Set(s.known)
  const path = owned ? s.path : [...s.path]
  const at = path.length
  known.add(m.id)
  path.push(m.id)
  s = { ...s, known, path }
  if (m.role === 'tool') return m.tool_call_id ? withResult(s, m) : s
  if (m.role === 'assistant' && m.error && !contentText(m.content) && !m.tool_calls?.length) {
    // A failed turn that produced nothing: the error itself is what the page shows.
    return { ...s, draft: emptyDraft }
  }
  let e: Entry
  let draft = s.draft
  if (m.role === 'assistant') {
    let thoughtMs: number | undefined
    if (draft.reasoningStart !== undefined) thoughtMs = (draft.reasoningEnd ?? now) - draft.reasoningStart
    e = {
      kind: 'assistant',
      id: m.id,
      text: contentText(m.content),
      reasoning: m.reasoning_content ?? '',
      thoughtMs,
      toolCalls: m.tool_calls ?? [],
      model: m.model,
      usage: m.usage,
      latency_ms: m.latency_ms,
      at,
    }
    draft = emptyDraft
  } else if (m.role === 'user') {
    e = { kind: 'user', id: m.id, text: contentText(m.content), images: contentImages(m.content), files: contentFiles(m.content), at }
  } else {
    return s
  }
  let entries: Entry[]
  if (owned) {
    entries = s.entries
    entries.push(e)
  } else entries = [...s.entries, e]
  return { ...s, draft, entries }
}

function withResult(s: ChatState, m: Message): ChatState {
  const results = {
    ...s.results,
    [m.tool_call_id!]: { content: contentText(m.content), success: m.success, latency_ms: m.latency_ms, server: m.server },
  }
  return { ...s, results }
}

// withNodes adds stored messages to the session's tree, when the page has read it.
function withNodes(s: ChatState, msgs: Message[]): ChatState {
  return s.nodes ? { ...s, nodes: addNodes(s.nodes, msgs) } : s
}

export function withHistory(s: ChatState, msgs: Message[], now = Date.now()): ChatState {
  s = { ...s, entries: [...s.entries], known: new Set(s.known), path: [...s.path] }
  for (const m of msgs) {
    const before = s
    s = addMessage(s, m, now, true)
    // A cut made fresh copies: own them for the messages that follow.
    if (s.entries !== before.entries || s.path !== before.path) s = { ...s, entries: [...s.entries], known: new Set(s.known), path: [...s.path] }
  }
  return withNodes(s, msgs)
}

// showBranch replaces the branch shown (after a switch to another one): its stored messages and
// the tree as just read. Pending approvals stay; decided ones belonged to the branch shown before.
export function showBranch(s: ChatState, msgs: Message[], nodes: TreeNode[] | null, now = Date.now()): ChatState {
  const fresh: ChatState = { ...initialChat(), run: s.run, runId: s.runId, nodes, approvals: pendingOnly(s.approvals) }
  return withHistory(fresh, msgs, now)
}

// withTree sets the session's tree as read (GET …/tree), keeping what events added since.
export function withTree(s: ChatState, nodes: TreeNode[]): ChatState {
  return { ...s, nodes: mergeNodes(s.nodes, nodes) }
}

// withApprovals adds the pending approvals the page read when it opened the session.
export function withApprovals(s: ChatState, list: Approval[]): ChatState {
  return { ...s, approvals: withPending(s.approvals, list) }
}

// withDecision shows a decision the page itself took (the answer of POST …/approvals/{call}),
// in case it comes before the approval_resolved event.
export function withDecision(s: ChatState, a: Approval): ChatState {
  return { ...s, approvals: resolved(s.approvals, a) }
}

// applyFrame folds one WebSocket run-event frame into the state. Frames arrive each once, in
// order (the connection drops any seq it has already seen).
export function applyFrame(s: ChatState, f: Frame, now = Date.now()): ChatState {
  const d = f.data ?? {}
  switch (f.type) {
    case 'status':
      switch (d.type) {
        case 'start':
          return { ...s, run: 'running', runId: d.run_id, draft: emptyDraft }
        case 'status':
          if (d.state === 'paused') return { ...s, run: 'paused', runId: d.run_id }
          if (d.state === 'awaiting_approval') return { ...s, run: 'awaiting', runId: d.run_id }
          if (d.state === 'recovered') return { ...s, run: 'running', runId: d.run_id, draft: emptyDraft }
          return { ...s, run: 'running', runId: d.run_id }
        case 'done': {
          let next: ChatState = { ...s, run: 'idle', started: {} }
          if (s.draft.text || s.draft.reasoning) {
            // No record came for it: keep what streamed, marked as not stored.
            const e: Entry = {
              kind: 'assistant',
              id: 'partial-' + (d.run_id ?? f.seq),
              text: s.draft.text,
              reasoning: s.draft.reasoning,
              toolCalls: [],
              partial: true,
              at: s.path.length,
            }
            next = { ...next, draft: emptyDraft, entries: [...s.entries, e] }
          }
          return next
        }
      }
      return s
    case 'user_message':
    case 'llm_complete':
    case 'tool_result':
      return d.message ? withNodes(addMessage(s, d.message as Message, now), [d.message]) : s
    case 'llm_chunk': {
      const draft = { ...s.draft, text: s.draft.text + (d.content ?? '') }
      if (draft.reasoningStart !== undefined && draft.reasoningEnd === undefined) draft.reasoningEnd = now
      return { ...s, draft }
    }
    case 'llm_reasoning': {
      const draft = { ...s.draft, reasoning: s.draft.reasoning + (d.content ?? '') }
      if (draft.reasoningStart === undefined) draft.reasoningStart = now
      return { ...s, draft }
    }
    case 'tool_call':
      return d.tool_call?.id ? { ...s, started: { ...s.started, [d.tool_call.id]: now } } : s
    case 'approval_required':
      return d.approval ? { ...s, approvals: required(s.approvals, d.approval) } : s
    case 'approval_resolved':
      return d.approval ? { ...s, approvals: resolved(s.approvals, d.approval) } : s
    case 'error':
      return {
        ...s,
        entries: [
          ...s.entries,
          { kind: 'error', id: 'error-' + (f.seq ?? now), code: d.error?.code ?? 'internal', message: d.error?.message ?? 'error', at: s.path.length },
        ],
      }
  }
  return s
}
