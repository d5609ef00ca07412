// The conversation as the page shows it, built from stored messages and run events.
//
// Display rule for streamed text (shared with the server): `chunk` and `reasoning` events are a
// DRAFT of the assistant message in progress. A `record` of an assistant message replaces the
// draft with the stored message; a `status` `recovered` discards the draft (the new instance
// regenerates that text); a run that ends in error or abort stores what was streamed as a record.
// Following it, every piece of text shows exactly once, also when events are replayed.

import type { Message, ToolCall, Usage } from './api'

export interface ToolResult {
  content: string
  success?: boolean
  latency_ms?: number
  server?: string
}

export type Entry =
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

export interface Draft {
  text: string
  reasoning: string
  reasoningStart?: number
  reasoningEnd?: number
}

export type RunState = 'idle' | 'running' | 'paused'

export interface ChatState {
  entries: Entry[]
  known: Set<string> // message ids already shown
  results: Record<string, ToolResult> // tool_call_id → result
  started: Record<string, number> // tool_call_id → when it started executing (client clock)
  draft: Draft
  runId?: string
  run: RunState
}

export interface Frame {
  type: string
  seq?: number
  id?: string
  data?: any
}

export const emptyDraft: Draft = { text: '', reasoning: '' }

export function initialChat(): ChatState {
  return { entries: [], known: new Set(), results: {}, started: {}, draft: emptyDraft, run: 'idle' }
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

// addMessage folds one stored message into the state (a tool message becomes its call's result).
function addMessage(s: ChatState, m: Message, now: number): ChatState {
  if (m.role === 'tool') {
    if (!m.tool_call_id) return s
    const results = {
      ...s.results,
      [m.tool_call_id]: { content: contentText(m.content), success: m.success, latency_ms: m.latency_ms, server: m.server },
    }
    return { ...s, results }
  }
  if (s.known.has(m.id)) {
    // Already shown (a replayed record): an assistant record still ends the draft.
    return m.role === 'assistant' ? { ...s, draft: emptyDraft } : s
  }
  const known = new Set(s.known)
  known.add(m.id)
  if (m.role === 'assistant' && m.error && !contentText(m.content) && !m.tool_calls?.length) {
    // A failed turn that produced nothing: the error itself is what the page shows.
    return { ...s, known, draft: emptyDraft }
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
    }
    draft = emptyDraft
  } else if (m.role === 'user') {
    e = { kind: 'user', id: m.id, text: contentText(m.content), images: contentImages(m.content), files: contentFiles(m.content) }
  } else {
    return { ...s, known }
  }
  return { ...s, known, draft, entries: [...s.entries, e] }
}

export function withHistory(s: ChatState, msgs: Message[], now = Date.now()): ChatState {
  for (const m of msgs) s = addMessage(s, m, now)
  return s
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
            }
            next = { ...next, draft: emptyDraft, entries: [...s.entries, e] }
          }
          return next
        }
      }
      return s
    case 'user_message':
    case 'llm_complete':
      return d.message ? addMessage(s, d.message as Message, now) : s
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
    case 'tool_result':
      return d.message ? addMessage(s, d.message as Message, now) : s
    case 'error':
      return {
        ...s,
        entries: [
          ...s.entries,
          { kind: 'error', id: 'error-' + (f.seq ?? now), code: d.error?.code ?? 'internal', message: d.error?.message ?? 'error' },
        ],
      }
  }
  return s
}
