import { useEffect, useRef, useState, type ReactNode } from 'react'
import { deleteSession, getKey, listSessions, renameSession, type Me, type Session } from './api'

interface Props {
  current?: string
  version: number
  who: Me
  onOpen: (id?: string) => void
  onDeleted: (id: string) => void
  onSignOut: () => void
  onClose: () => void
  children?: ReactNode // shown above the conversations (the projects)
}

// Sidebar: the caller's sessions, 30 a page, searchable by title; rename, delete, new chat.
export function Sidebar(p: Props) {
  const [q, setQ] = useState('')
  const [query, setQuery] = useState('')
  const [items, setItems] = useState<Session[]>([])
  const [next, setNext] = useState('')
  const [err, setErr] = useState('')
  const [editing, setEditing] = useState<string | null>(null)
  const [title, setTitle] = useState('')

  useEffect(() => {
    const t = setTimeout(() => setQuery(q.trim()), 250)
    return () => clearTimeout(t)
  }, [q])

  // The query of the list shown.
  const shown = useRef('')
  useEffect(() => {
    let live = true
    listSessions(query, '')
      .then((r) => {
        if (!live) return
        shown.current = query
        setItems(r.sessions)
        setNext(r.next_cursor ?? '')
        setErr('')
      })
      .catch((e) => live && setErr(e.message))
    return () => {
      live = false
    }
  }, [query, p.version])

  const more = async () => {
    // The next page of the list shown (its cursor belongs to that query); dropped if the list
    // changed to another query meanwhile.
    const asked = shown.current
    try {
      const r = await listSessions(asked, next)
      if (shown.current !== asked) return
      setItems((old) => [...old, ...r.sessions.filter((s) => !old.some((o) => o.id === s.id))])
      setNext(r.next_cursor ?? '')
    } catch (e) {
      setErr((e as Error).message)
    }
  }

  const rename = async (id: string) => {
    const t = title.trim()
    setEditing(null)
    if (!t) return
    try {
      const s = await renameSession(id, t)
      setItems((old) => old.map((o) => (o.id === id ? { ...o, title: s.title } : o)))
    } catch (e) {
      setErr((e as Error).message)
    }
  }

  const remove = async (s: Session) => {
    if (!confirm(`Delete “${s.title || 'Untitled'}” and all its messages?`)) return
    try {
      await deleteSession(s.id)
      setItems((old) => old.filter((o) => o.id !== s.id))
      p.onDeleted(s.id)
    } catch (e) {
      setErr((e as Error).message)
    }
  }

  return (
    <nav className="sidebar" aria-label="Conversations">
      <div className="sidebar-head">
        <button type="button" className="new-chat" onClick={() => p.onOpen(undefined)}>
          + New chat
        </button>
        <button type="button" className="icon only-narrow" aria-label="Close the list" onClick={p.onClose}>
          ×
        </button>
      </div>
      {p.children}
      <input
        type="search"
        className="search"
        aria-label="Search conversations by title"
        placeholder="Search titles"
        value={q}
        onChange={(e) => setQ(e.target.value)}
      />
      {err && (
        <p role="alert" className="form-error">
          {err}
        </p>
      )}
      <ul className="sessions">
        {items.map((s) => (
          <li key={s.id} className={s.id === p.current ? 'active' : ''}>
            {editing === s.id ? (
              <form
                className="rename"
                onSubmit={(e) => {
                  e.preventDefault()
                  rename(s.id)
                }}
              >
                <input
                  aria-label="New title"
                  autoFocus
                  value={title}
                  maxLength={200}
                  onChange={(e) => setTitle(e.target.value)}
                  onKeyDown={(e) => {
                    if (e.key === 'Escape') {
                      e.stopPropagation() // cancels the rename; does not stop the answer
                      setEditing(null)
                    }
                  }}
                  onBlur={() => rename(s.id)}
                />
              </form>
            ) : (
              <>
                <a
                  href={'/s/' + s.id}
                  className="session-link"
                  aria-current={s.id === p.current ? 'page' : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    p.onOpen(s.id)
                  }}
                >
                  {s.title || 'Untitled'}
                </a>
                <button
                  type="button"
                  className="icon"
                  aria-label={`Rename ${s.title || 'Untitled'}`}
                  onClick={() => {
                    setTitle(s.title)
                    setEditing(s.id)
                  }}
                >
                  ✎
                </button>
                <button type="button" className="icon" aria-label={`Delete ${s.title || 'Untitled'}`} onClick={() => remove(s)}>
                  <svg width="14" height="14" viewBox="0 0 16 16" aria-hidden="true" fill="none" stroke="currentColor" strokeWidth="1.5">
                    <path d="M2.5 4h11M6 4V2.5h4V4M4 4l.7 9.5h6.6L12 4" />
                  </svg>
                </button>
              </>
            )}
          </li>
        ))}
      </ul>
      {items.length === 0 && !err && <p className="muted small">{query ? 'No conversation matches.' : 'No conversations yet.'}</p>}
      {next && (
        <button type="button" className="secondary more" onClick={more}>
          Load more
        </button>
      )}
      <div className="sidebar-foot">
        <span className="muted small">{p.who.auth ? `Signed in as ${p.who.user}` : 'Single-user mode'}</span>
        {getKey() && (
          <button type="button" className="secondary" onClick={p.onSignOut}>
            Sign out
          </button>
        )}
      </div>
    </nav>
  )
}
