import { createContext, useContext, useState } from 'react'
import type { Decision } from './api'
import { note, prettyJSON, readEdit, type ApprovalItem } from './approvals'

// answer sends the owner's decision on a call; it resolves to an error message to show in the
// card (the call stays pending), or '' when the decision was taken.
export type Answer = (callId: string, decision: Decision, args?: Record<string, unknown>, reason?: string) => Promise<string>

export const ApprovalAnswer = createContext<Answer | null>(null)

// ApprovalView is a call's approval: a card while it waits, a one-line note once decided.
export function ApprovalView(props: { item: ApprovalItem }) {
  const it = props.item
  if (it.resolved)
    return (
      <p className={'approval-note approval-' + it.resolved.decision} data-testid="approval-note">
        <span aria-hidden="true">{it.resolved.decision === 'approved' ? '✓' : '✕'}</span> {note(it)}
      </p>
    )
  return <ApprovalCard item={it} />
}

function ApprovalCard(props: { item: ApprovalItem }) {
  const it = props.item
  const answer = useContext(ApprovalAnswer)
  const [text, setText] = useState(() => prettyJSON(it.arguments))
  const [reason, setReason] = useState('')
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState('')
  const key = 'approval-' + it.call_id.replace(/[^A-Za-z0-9_-]/g, '_')
  const decide = async (d: Decision) => {
    if (!answer) return
    let args: Record<string, unknown> | undefined
    if (d !== 'deny') {
      const e = readEdit(text, it.arguments)
      if (!e.ok) {
        setError(e.error)
        return
      }
      args = e.args
    }
    setBusy(true)
    setError('')
    const err = await answer(it.call_id, d, args, d === 'deny' ? reason.trim() || undefined : undefined)
    setBusy(false)
    setError(err)
  }
  const expires = it.expires_at ? new Date(it.expires_at) : null
  return (
    <section className="approval-card" data-testid="approval-card" aria-label={`Approval needed: ${it.tool}`}>
      <div className="approval-head">
        <strong>Run {it.tool}?</strong>
        {it.server && <span className="badge">{it.server}</span>}
      </div>
      {it.why && <p className="approval-why small">{it.why}</p>}
      <label htmlFor={key + '-args'} className="tool-label">
        Arguments (JSON; edit them to run the call with others)
      </label>
      <textarea
        id={key + '-args'}
        className="approval-args"
        rows={Math.min(12, text.split('\n').length + 1)}
        spellCheck={false}
        value={text}
        disabled={busy}
        onChange={(e) => setText(e.target.value)}
      />
      <label htmlFor={key + '-reason'} className="tool-label">
        Reason, if you deny it (optional; the model reads it)
      </label>
      <input id={key + '-reason'} className="approval-reason" value={reason} disabled={busy} onChange={(e) => setReason(e.target.value)} />
      {error && (
        <p role="alert" className="form-error small">
          {error}
        </p>
      )}
      <div className="approval-actions">
        <button type="button" disabled={busy} onClick={() => decide('approve')}>
          Approve
        </button>
        <button type="button" className="secondary" disabled={busy} onClick={() => decide('always')} title={`Approve, and run ${it.tool} without asking for the rest of this session`}>
          Always allow
        </button>
        <button type="button" className="secondary danger" disabled={busy} onClick={() => decide('deny')}>
          Deny
        </button>
        {expires && !isNaN(expires.getTime()) && <span className="muted small">Denied if not answered by {expires.toLocaleTimeString()}</span>}
      </div>
    </section>
  )
}
