import { useCallback, useEffect, useState } from 'react'
import { ApiError, getKey, guest, me, setKey, type Me } from './api'
import { Sidebar } from './Sidebar'
import { ChatView } from './ChatView'
import { Projects } from './Projects'

// Client routes: "/" is a new chat, "/s/<session id>" a conversation.
function sessionFromPath(): string | undefined {
  const m = /^\/s\/([0-9a-fA-F-]{8,64})\/?$/.exec(location.pathname)
  return m ? m[1] : undefined
}

export function App() {
  const [who, setWho] = useState<Me | null>(null)
  const [phase, setPhase] = useState<'loading' | 'signin' | 'ready' | 'down'>('loading')
  const [authError, setAuthError] = useState('')

  const check = useCallback(async () => {
    try {
      setWho(await me())
      setPhase('ready')
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        setPhase('signin')
        if (getKey()) setAuthError('That key was not accepted.')
      } else {
        setPhase('down')
      }
    }
  }, [])
  useEffect(() => {
    check()
  }, [check])

  if (phase === 'loading') return <div className="center">Loading…</div>
  if (phase === 'down')
    return (
      <main className="center">
        <p>Parley is not answering.</p>
        <button type="button" onClick={check}>
          Try again
        </button>
      </main>
    )
  if (phase === 'signin')
    return (
      <SignIn
        error={authError}
        onKey={async (k) => {
          setKey(k)
          setAuthError('')
          await check()
        }}
        onGuest={async () => {
          try {
            const g = await guest()
            setKey(g.token)
            setAuthError('')
            await check()
          } catch (e) {
            setAuthError(e instanceof ApiError && e.status === 404 ? 'Guest access is not enabled on this server.' : String((e as Error).message))
          }
        }}
      />
    )
  return (
    <Shell
      who={who!}
      onSignOut={() => {
        setKey('')
        setWho(null)
        setPhase('signin')
      }}
    />
  )
}

function SignIn(props: { error: string; onKey: (k: string) => void; onGuest: () => void }) {
  const [k, setK] = useState('')
  return (
    <main className="center">
      <form
        className="signin"
        onSubmit={(e) => {
          e.preventDefault()
          if (k.trim()) props.onKey(k.trim())
        }}
      >
        <h1>Sign in to Parley</h1>
        <label htmlFor="apikey">API key</label>
        <input id="apikey" type="password" autoComplete="off" value={k} onChange={(e) => setK(e.target.value)} placeholder="pk_…" />
        <button type="submit">Sign in</button>
        <button type="button" className="secondary" onClick={props.onGuest}>
          Continue as guest
        </button>
        {props.error && (
          <p role="alert" className="form-error">
            {props.error}
          </p>
        )}
      </form>
    </main>
  )
}

function Shell(props: { who: Me; onSignOut: () => void }) {
  // view changes when the person picks another conversation; a new chat that gets its id keeps
  // its view (and its connection).
  const [view, setView] = useState<{ id?: string; n: number; project?: { id: string; name: string } }>(() => ({ id: sessionFromPath(), n: 0 }))
  const [current, setCurrent] = useState<string | undefined>(view.id)
  const [listVersion, setListVersion] = useState(0)
  const [sidebarOpen, setSidebarOpen] = useState(false)

  const open = useCallback((id?: string, project?: { id: string; name: string }) => {
    history.pushState(null, '', id ? '/s/' + id : '/')
    setView((v) => ({ id, n: v.n + 1, project }))
    setCurrent(id)
    setSidebarOpen(false)
  }, [])

  useEffect(() => {
    const onPop = () => {
      const id = sessionFromPath()
      setView((v) => ({ id, n: v.n + 1 }))
      setCurrent(id)
    }
    addEventListener('popstate', onPop)
    return () => removeEventListener('popstate', onPop)
  }, [])

  return (
    <div className={'shell' + (sidebarOpen ? ' sidebar-open' : '')}>
      <Sidebar
        current={current}
        version={listVersion}
        who={props.who}
        onOpen={open}
        onDeleted={(id) => {
          if (id === current) open(undefined)
        }}
        onSignOut={props.onSignOut}
        onClose={() => setSidebarOpen(false)}
      >
        <Projects
          current={current}
          version={listVersion}
          onOpen={open}
          onNewChat={(pr) => open(undefined, { id: pr.id, name: pr.name })}
          onChanged={() => setListVersion((v) => v + 1)}
        />
      </Sidebar>
      <ChatView
        key={view.n}
        sessionId={view.id}
        project={view.project}
        onMenu={() => setSidebarOpen((o) => !o)}
        onSession={(id) => {
          history.replaceState(null, '', '/s/' + id)
          setCurrent(id)
          setListVersion((v) => v + 1)
        }}
        onRunEnded={() => setListVersion((v) => v + 1)}
        onOpen={(id) => {
          open(id)
          setListVersion((v) => v + 1)
        }}
      />
    </div>
  )
}
