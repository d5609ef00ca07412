import { useState } from 'react'
import type { Siblings } from './branches'

// BranchNav is "‹ 2 / 3 ›" on a message with siblings: the arrows show the sibling before or after.
export function BranchNav(props: { sib: Siblings; disabled: boolean; onGo: (id: string) => void }) {
  const { sib } = props
  return (
    <span className="branch-nav" data-testid="branch-nav">
      <button type="button" className="icon" aria-label="Previous version" disabled={props.disabled || !sib.prev} onClick={() => sib.prev && props.onGo(sib.prev)}>
        ‹
      </button>
      <span className="branch-pos">
        <span aria-hidden="true">
          {sib.index + 1} / {sib.count}
        </span>
        <span className="visually-hidden">
          version {sib.index + 1} of {sib.count}
        </span>
      </span>
      <button type="button" className="icon" aria-label="Next version" disabled={props.disabled || !sib.next} onClick={() => sib.next && props.onGo(sib.next)}>
        ›
      </button>
    </span>
  )
}

// UserEditor edits a user message in place: sending it stores a sibling and answers that.
export function UserEditor(props: { text: string; onSend: (text: string) => Promise<boolean>; onCancel: () => void }) {
  const [text, setText] = useState(props.text)
  const [busy, setBusy] = useState(false)
  const send = async () => {
    if (!text.trim() || busy) return
    setBusy(true)
    const ok = await props.onSend(text)
    if (!ok) setBusy(false)
  }
  return (
    <form
      className="user-editor"
      data-testid="user-editor"
      onSubmit={(e) => {
        e.preventDefault()
        send()
      }}
    >
      <label htmlFor="edit-message" className="visually-hidden">
        Edit message
      </label>
      <textarea
        id="edit-message"
        rows={Math.min(10, text.split('\n').length + 1)}
        value={text}
        autoFocus
        onChange={(e) => setText(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === 'Escape') {
            e.preventDefault()
            e.stopPropagation()
            props.onCancel()
          } else if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
            e.preventDefault()
            send()
          }
        }}
      />
      <div className="user-editor-bar">
        <button type="button" className="secondary" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="submit" disabled={!text.trim() || busy}>
          Send edit
        </button>
      </div>
    </form>
  )
}
