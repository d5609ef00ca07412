// Tool approval as the page shows it (issue 23, docs/protocol.md "Tool approval"): a card for each
// call that waits for the session owner, which turns into a one-line note once decided. The state
// is keyed by call id and folds the approval_required and approval_resolved events, and the
// pending list a page reads when it opens a session (GET …/approvals), in any order: a decision,
// once known, is never undone by a late or replayed "required".

import type { Approval } from './api'

export interface ApprovalItem {
  call_id: string
  tool: string
  server?: string
  arguments: string // as the model sent them
  why?: string // why the call needs approval
  expires_at?: string
  resolved?: {
    decision: 'approved' | 'denied' | 'expired'
    arguments: string // what runs (edited or not)
    edited: boolean
    reason?: string // the user's reason for a denial, or why it expired
    always: boolean
  }
}

export type Approvals = Record<string, ApprovalItem>

// required folds an approval_required event (or one pending approval from GET …/approvals).
export function required(m: Approvals, a: Approval): Approvals {
  if (!a?.call_id || m[a.call_id]) return m
  return { ...m, [a.call_id]: { call_id: a.call_id, tool: a.tool, server: a.server, arguments: a.arguments ?? '', why: a.reason, expires_at: a.expires_at } }
}

// resolved folds an approval_resolved event (or the answer to the page's own decision).
export function resolved(m: Approvals, a: Approval): Approvals {
  if (!a?.call_id) return m
  const old = m[a.call_id]
  const decision = a.decision === 'approved' || a.decision === 'expired' ? a.decision : 'denied'
  const item: ApprovalItem = {
    ...(old ?? { call_id: a.call_id, tool: a.tool, server: a.server, arguments: a.arguments ?? '' }),
    resolved: { decision, arguments: a.arguments ?? old?.arguments ?? '', edited: !!a.edited, reason: a.reason || undefined, always: !!a.always },
  }
  return { ...m, [a.call_id]: item }
}

// withPending adds the pending approvals a page read (GET …/approvals); those it already knows
// (from events, maybe decided since the list was read) stay as they are.
export function withPending(m: Approvals, list: Approval[]): Approvals {
  for (const a of list) m = required(m, a)
  return m
}

// pendingOnly keeps the approvals still waiting (what survives a reload of the branch shown).
export function pendingOnly(m: Approvals): Approvals {
  const out: Approvals = {}
  for (const [k, v] of Object.entries(m)) if (!v.resolved) out[k] = v
  return out
}

// note is the one line a decided approval shows.
export function note(it: ApprovalItem): string {
  const r = it.resolved
  if (!r) return ''
  let s: string
  switch (r.decision) {
    case 'approved':
      s = r.always ? `Always allowed ${it.tool} in this session` : `Approved ${it.tool}`
      if (r.edited) s += ' with edited arguments'
      return s
    case 'expired':
      return `${it.tool} was not approved in time: denied` + (r.reason ? ` (${r.reason})` : '')
    default:
      return `Denied ${it.tool}` + (r.reason ? `: ${r.reason}` : '')
  }
}

// prettyJSON shows a JSON string indented (as it is when it does not parse).
export function prettyJSON(s: string): string {
  try {
    return JSON.stringify(JSON.parse(s), null, 2)
  } catch {
    return s
  }
}

// canonical is a JSON value written with its object keys sorted, to compare two values.
function canonical(v: unknown): string {
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']'
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>
    return '{' + Object.keys(o).sort().map((k) => JSON.stringify(k) + ':' + canonical(o[k])).join(',') + '}'
  }
  return JSON.stringify(v)
}

export type Edit = { ok: true; args?: Record<string, unknown> } | { ok: false; error: string }

// readEdit checks the arguments as the person left them in the card: a JSON object, sent as the
// edited arguments only when it differs from what the model sent (spacing and key order aside).
export function readEdit(text: string, original: string): Edit {
  let v: unknown
  try {
    v = JSON.parse(text)
  } catch (e) {
    return { ok: false, error: 'The arguments are not valid JSON: ' + (e as Error).message }
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return { ok: false, error: 'The arguments must be a JSON object.' }
  let orig: unknown
  try {
    orig = JSON.parse(original)
  } catch {
    orig = undefined
  }
  if (orig !== undefined && canonical(orig) === canonical(v)) return { ok: true }
  return { ok: true, args: v as Record<string, unknown> }
}
