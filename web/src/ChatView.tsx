import { useCallback, useEffect, useLayoutEffect, useMemo, useReducer, useRef, useState } from 'react'
import { useVirtualizer } from '@tanstack/react-virtual'
import {
  allMessages,
  answerApproval,
  ApiError,
  editMessage,
  forkSession,
  getKey,
  getSession,
  getTree,
  listApprovals,
  listModels,
  listTools,
  regenerate,
  setLeaf,
  type Approval,
  type Decision,
  type Message,
  type ModelInfo,
  type Session,
  type ToolInfo,
  type TreeNode,
  type Usage,
} from './api'
import { answerStart, applyFrame, cutFrom, initialChat, showBranch, withApprovals, withDecision, withHistory, withTree, type ChatState, type Entry, type Frame } from './chat'
import { editBody, endsAnswer, indexTree, siblings, type TreeIndex } from './branches'
import { ApprovalAnswer, ApprovalView, type Answer } from './ApprovalCard'
import { BranchNav, UserEditor } from './Branches'
import { Conn, type ConnState } from './ws'
import { AssistantBody, Markdown, formatUsage } from './Message'
import { AttachmentList, FileRefView, maxFiles, uploadFiles, type Attachment } from './Files'
import { TodoList } from './Todos'
import { ProjectPicker } from './Projects'
import { getTodos, type Todo } from './workspace'
import { ArtifactPanel } from './ArtifactPanel'

type Action =
  | { t: 'history'; msgs: Message[] }
  | { t: 'frames'; frames: Frame[] }
  | { t: 'error'; code: string; message: string }
  | { t: 'branch'; msgs: Message[]; nodes: TreeNode[] | null } // another branch is shown
  | { t: 'tree'; nodes: TreeNode[] }
  | { t: 'approvals'; list: Approval[] } // the pending ones, read as the session opens
  | { t: 'decision'; approval: Approval } // the page's own decision, as the server took it
  | { t: 'cut'; id: string } // a message and what follows go (an edit or a regeneration begins)

function reduce(s: ChatState, a: Action): ChatState {
  switch (a.t) {
    case 'history':
      return withHistory(s, a.msgs)
    case 'frames':
      for (const f of a.frames) s = applyFrame(s, f)
      return s
    case 'error':
      return { ...s, entries: [...s.entries, { kind: 'error', id: 'local-' + Date.now(), code: a.code, message: a.message, at: s.path.length }] }
    case 'branch':
      return showBranch(s, a.msgs, a.nodes)
    case 'tree':
      return withTree(s, a.nodes)
    case 'approvals':
      return withApprovals(s, a.list)
    case 'decision':
      return withDecision(s, a.approval)
    case 'cut':
      return cutFrom(s, a.id)
  }
}

interface Props {
  sessionId?: string
  // project: the project a new chat's first message puts its session into.
  project?: { id: string; name: string }
  onSession: (id: string) => void
  onRunEnded: () => void
  onMenu: () => void
  onOpen: (id: string) => void // open another session (a fork)
}

export function ChatView(p: Props) {
  const [state, dispatch] = useReducer(reduce, undefined, initialChat)
  const stateRef = useRef(state)
  stateRef.current = state
  const [conn, setConn] = useState<ConnState>('connecting')
  const [loading, setLoading] = useState(!!p.sessionId)
  const [session, setSession] = useState<Session | null>(null)
  const [notice, setNotice] = useState('')
  const [models, setModels] = useState<ModelInfo[]>([])
  const [tools, setTools] = useState<ToolInfo[]>([])
  const [model, setModel] = useState(() => localStorage.getItem('parley.model') ?? '')
  const [selected, setSelected] = useState<string[] | null>(null)
  const [todos, setTodos] = useState<Todo[]>([])
  const [artifactTick, setArtifactTick] = useState(0)
  const [editing, setEditing] = useState<string | null>(null) // the user message being edited
  const connRef = useRef<Conn | null>(null)
  // lastMsgSeq: the highest seq of the stored messages shown; on a reconnect the page reads the
  // active branch's messages after it.
  const lastMsgSeq = useRef(0)
  const sessionRef = useRef(p.sessionId)
  const propsRef = useRef(p)
  propsRef.current = p

  const refreshSession = useCallback(() => {
    const id = sessionRef.current
    if (id) getSession(id).then(setSession, () => {})
  }, [])

  // One connection per view; history first, then the live events.
  useEffect(() => {
    let alive = true
    const id = p.sessionId
    lastMsgSeq.current = 0
    // The session's tree (for "‹ 2 / 3 ›"): a server without branches answers 404 and the page
    // shows no navigation.
    const readTree = () => {
      const sid = sessionRef.current
      if (sid) getTree(sid).then((r) => alive && r?.nodes && dispatch({ t: 'tree', nodes: r.nodes }), () => {})
    }
    const start = () => {
      connRef.current = new Conn({
        sessionId: id,
        key: getKey(),
        onState: (s) => alive && setConn(s),
        onFrames: (frames) => {
          if (!alive) return
          dispatch({ t: 'frames', frames })
          if (frames.some((f) => f.type === 'artifact')) setArtifactTick((n) => n + 1)
          for (const f of frames) {
            if (f.type === 'todo_update') setTodos(f.data?.todos ?? [])
            if (f.type === 'memory_update') propsRef.current.onRunEnded() // the sidebar reads the project's memory again
            if (f.data?.message?.seq) lastMsgSeq.current = Math.max(lastMsgSeq.current, f.data.message.seq)
            if (f.type === 'status' && f.data?.type === 'done') {
              refreshSession()
              readTree()
              propsRef.current.onRunEnded()
            }
          }
        },
        onConnected: (st) => {
          // With no run in progress, anything that finished while we were away is in the store.
          if (!st.active_run && sessionRef.current) {
            allMessages(sessionRef.current, lastMsgSeq.current).then((msgs) => {
              if (!alive) return
              for (const m of msgs) lastMsgSeq.current = Math.max(lastMsgSeq.current, m.seq)
              dispatch({ t: 'history', msgs })
            }, () => {})
          }
        },
        onSession: (sid) => {
          sessionRef.current = sid
          propsRef.current.onSession(sid)
          refreshSession()
        },
      })
      ;(window as any).__parleyConn = connRef.current
    }
    if (id) {
      allMessages(id)
        .then((msgs) => {
          if (!alive) return
          for (const m of msgs) lastMsgSeq.current = Math.max(lastMsgSeq.current, m.seq)
          dispatch({ t: 'history', msgs })
          setLoading(false)
          start()
          readTree()
          // Calls that wait for the owner's decision, also those of a run this page did not see start.
          listApprovals(id).then((r) => alive && r?.approvals && dispatch({ t: 'approvals', list: r.approvals }), () => {})
        })
        .catch((e) => {
          if (!alive) return
          setLoading(false)
          dispatch({ t: 'error', code: e.code ?? 'internal', message: e.message })
        })
      getTodos(id).then((r) => alive && setTodos(r.todos), () => {})
      refreshSession()
    } else {
      start()
    }
    return () => {
      alive = false
      connRef.current?.close()
      connRef.current = null
    }
  }, [p.sessionId, refreshSession])

  useEffect(() => {
    listModels().then((r) => setModels(r.models), () => {})
    listTools().then((r) => setTools(r.tools), () => {})
  }, [])

  const send = useCallback(
    async (text: string, fileIds: string[] = []) => {
      const c = connRef.current
      if (!c || (!text.trim() && fileIds.length === 0)) return false
      const data: Record<string, unknown> = { text }
      if (fileIds.length) data.fileIds = fileIds
      if (model) data.model = model
      if (selected) data.selected_tools = selected
      if (p.project && !sessionRef.current) data.project_id = p.project.id
      try {
        await c.request('user_message', data)
        setNotice('')
        return true
      } catch (e: any) {
        if (e.code === 'conflict') setNotice('A run is still going: wait for it to end, or stop it first.')
        else dispatch({ t: 'error', code: e.code ?? 'unavailable', message: e.message })
        return false
      }
    },
    [model, selected, p.project],
  )

  // retry asks the server to answer the failed turn again (the WebSocket control action retry):
  // no new user message is stored, and the model is not sent the failure.
  const retry = useCallback(() => {
    const data: Record<string, unknown> = { action: 'retry' }
    if (model) data.model = model
    if (selected) data.selected_tools = selected
    connRef.current
      ?.request('control', data)
      .then(() => setNotice(''))
      .catch((e) => setNotice(e.message))
  }, [model, selected])

  const control = useCallback((action: 'abort' | 'pause' | 'resume') => {
    connRef.current?.request('control', { action }).catch((e) => setNotice(e.message))
  }, [])

  const running = state.run !== 'idle'

  // ---- branches (issue 23) ----
  const failed = useCallback((e: any) => {
    if (e instanceof ApiError && e.status === 409) setNotice('A run is still going: wait for it to end, or stop it first.')
    else setNotice(e?.message ?? String(e))
  }, [])

  // showLeaf makes the branch through message id the active one and shows it.
  const showLeaf = useCallback(
    async (id: string) => {
      const sid = sessionRef.current
      if (!sid) return
      try {
        await setLeaf(sid, id)
        const [msgs, tree] = await Promise.all([allMessages(sid), getTree(sid).catch(() => null)])
        lastMsgSeq.current = msgs.reduce((n, m) => Math.max(n, m.seq), 0)
        setEditing(null)
        setNotice('')
        dispatch({ t: 'branch', msgs, nodes: tree?.nodes ?? null })
      } catch (e) {
        failed(e)
      }
    },
    [failed],
  )

  const sendEdit = useCallback(
    async (id: string, text: string, fileIds: string[], images: string[]) => {
      const sid = sessionRef.current
      if (!sid) return false
      const body = editBody(text, { fileIds, images }, model, selected)
      try {
        await editMessage(sid, id, body)
        setNotice('')
        setEditing(null)
        dispatch({ t: 'cut', id })
        return true
      } catch (e) {
        failed(e)
        return false
      }
    },
    [model, selected, failed],
  )

  // regen answers again: the new answer is a sibling of the one it replaces, which goes at once.
  const regen = useCallback(
    async (id: string) => {
      const sid = sessionRef.current
      if (!sid) return
      try {
        const from = answerStart(stateRef.current, id)
        const body: Parameters<typeof regenerate>[2] = {}
        if (model) body.model = model
        if (selected) body.selected_tools = selected
        await regenerate(sid, id, body)
        setNotice('')
        dispatch({ t: 'cut', id: from })
      } catch (e) {
        failed(e)
      }
    },
    [model, selected, failed],
  )

  const fork = useCallback(
    async (id: string) => {
      const sid = sessionRef.current
      if (!sid) return
      try {
        const r = await forkSession(sid, id)
        propsRef.current.onOpen(r.session.id)
      } catch (e) {
        failed(e)
      }
    },
    [failed],
  )

  const answer: Answer = useCallback(async (callId: string, decision: Decision, args?: Record<string, unknown>, reason?: string) => {
    const sid = sessionRef.current
    if (!sid) return 'no session'
    const body: { decision: Decision; arguments?: object; reason?: string } = { decision }
    if (args) body.arguments = args
    if (reason) body.reason = reason
    try {
      const r = await answerApproval(sid, callId, body)
      if (r?.approval) dispatch({ t: 'decision', approval: r.approval })
      return ''
    } catch (e: any) {
      // Decided elsewhere (another tab, the timeout): its approval_resolved event is on its way.
      if (e instanceof ApiError && e.status === 409) return ''
      return e?.message ?? String(e)
    }
  }, [])

  const tree = useMemo(() => (state.nodes ? indexTree(state.nodes) : null), [state.nodes])
  const branch: BranchProps = useMemo(
    () => ({ tree, busy: running || !sessionRef.current, editing, onEdit: setEditing, onSendEdit: sendEdit, onGo: showLeaf, onRegenerate: regen, onFork: fork }),
    [tree, running, editing, sendEdit, showLeaf, regen, fork],
  )
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape' && running) {
        e.preventDefault()
        control('abort')
      }
    }
    addEventListener('keydown', onKey)
    return () => removeEventListener('keydown', onKey)
  }, [running, control])

  const toolServers = useMemo(() => Object.fromEntries(tools.filter((t) => t.server).map((t) => [t.name, t.server!])), [tools])
  const sessionUsage: Usage | undefined = session?.usage

  return (
    <main className="chat">
      <header className="chat-head">
        <button type="button" className="icon only-narrow" aria-label="Conversations" onClick={p.onMenu}>
          ☰
        </button>
        <h1 className="title">{session?.title || (p.sessionId ? '' : p.project ? `New chat in ${p.project.name}` : 'New chat')}</h1>
        {session && (
          <ProjectPicker
            sessionId={session.id}
            projectId={session.project_id}
            onMoved={(pid) => {
              setSession((s) => (s ? { ...s, project_id: pid || undefined } : s))
              p.onRunEnded()
            }}
          />
        )}
        {sessionUsage && sessionUsage.total_tokens > 0 && (
          <span className="muted small session-usage" data-testid="session-usage">
            {formatUsage(sessionUsage)}
          </span>
        )}
        <span className={'conn conn-' + conn} role="status" aria-live="polite">
          {conn === 'reconnecting'
            ? 'Reconnecting…'
            : conn === 'connecting'
              ? 'Connecting…'
              : state.run === 'paused'
                ? 'Paused'
                : state.run === 'awaiting'
                  ? 'Waiting for approval'
                  : ''}
        </span>
      </header>
      <TodoList todos={todos} />
      <div className="chat-main">
        <ApprovalAnswer.Provider value={answer}>
          <Messages state={state} loading={loading} running={running} toolServers={toolServers} onRetry={retry} branch={branch} />
        </ApprovalAnswer.Provider>
        <ArtifactPanel sessionId={session?.id ?? p.sessionId} tick={artifactTick} />
      </div>
      {notice && (
        <p className="notice" role="alert">
          {notice}
        </p>
      )}
      <Composer
        running={running}
        paused={state.run === 'paused'}
        onSend={send}
        onStop={() => control('abort')}
        onPause={() => control('pause')}
        onResume={() => control('resume')}
        models={models}
        model={model}
        onModel={(m) => {
          setModel(m)
          localStorage.setItem('parley.model', m)
        }}
        tools={tools}
        selected={selected}
        onSelected={setSelected}
      />
    </main>
  )
}

type Row = Entry | { kind: 'draft'; id: string } | { kind: 'approval'; id: string; callId: string }

// What a message's branch controls need: the session's tree and the actions.
interface BranchProps {
  tree: TreeIndex | null
  busy: boolean // a run is going (or there is no session yet): no branch actions
  editing: string | null
  onEdit: (id: string | null) => void
  onSendEdit: (id: string, text: string, fileIds: string[], images: string[]) => Promise<boolean>
  onGo: (id: string) => void
  onRegenerate: (id: string) => void
  onFork: (id: string) => void
}

// No layout jumps while text streams: the list follows the end, so content that grows moves what
// is above it up, as intended, but content that shrinks (a row first drawn at an estimate larger
// than it turns out, a size cached for another row) moves it down, a jump. So estimates of the
// rows that appear at the end err low, each draft is a row of its own (a key of its own, never a
// size cached from the previous answer's draft), the stored answer that replaces a draft is first
// estimated at the draft's size, and the "answering" row goes once the final answer is stored.
const estimate = { draft: 32, user: 56, error: 56, assistant: 120, approval: 200 }

function Messages(props: { state: ChatState; loading: boolean; running: boolean; toolServers: Record<string, string>; onRetry: () => void; branch: BranchProps }) {
  const { state } = props
  const rows: Row[] = useMemo(() => {
    const r: Row[] = [...state.entries]
    // An approval shows under its tool call; one whose call is not shown (yet) gets a row.
    const calls = new Set<string>()
    for (const e of state.entries) if (e.kind === 'assistant') for (const c of e.toolCalls) calls.add(c.id)
    for (const id of Object.keys(state.approvals)) if (!calls.has(id)) r.push({ kind: 'approval', id: 'approval-' + id, callId: id })
    const last = state.entries[state.entries.length - 1]
    // A final answer (an assistant message without tool calls) ends the run: no "answering" row
    // after it while the run's `done` is on its way.
    const answered = last?.kind === 'assistant' && last.toolCalls.length === 0 && !last.partial
    // While a call waits for approval nothing is being answered: its card is the last thing.
    if ((props.running && !answered && state.run !== 'awaiting') || state.draft.text || state.draft.reasoning) r.push({ kind: 'draft', id: 'draft-' + state.entries.length })
    return r
  }, [state.entries, state.draft, state.approvals, state.run, props.running])
  const lastError = useMemo(() => {
    for (let i = state.entries.length - 1; i >= 0; i--) if (state.entries[i].kind === 'error') return state.entries[i].id
    return ''
  }, [state.entries])

  const scroller = useRef<HTMLDivElement>(null)
  const atBottom = useRef(true)
  const draftSize = useRef(0) // the height of the latest draft row, as measured
  const v = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scroller.current,
    estimateSize: (i) => {
      const row = rows[i]
      if (row.kind === 'assistant' && i === state.entries.length - 1 && draftSize.current) return draftSize.current
      return estimate[row.kind]
    },
    overscan: 6,
    getItemKey: (i) => rows[i].id,
  })

  // Follow the end while the reader is there (also as rows are measured and grow); leave them
  // alone when they scrolled up.
  const total = v.getTotalSize()
  useLayoutEffect(() => {
    const el = scroller.current
    if (el && atBottom.current) el.scrollTop = el.scrollHeight
  }, [rows, state.draft, total])

  const items = v.getVirtualItems()
  return (
    <div
      className="messages"
      ref={scroller}
      role="log"
      aria-label="Messages"
      aria-busy={props.running}
      tabIndex={0}
      onScroll={(e) => {
        const el = e.currentTarget
        atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80
      }}
    >
      {props.loading && <p className="muted center-text">Loading messages…</p>}
      {!props.loading && rows.length === 0 && (
        <div className="empty">
          <h2>What can I help with?</h2>
          <p className="muted">Enter sends, Shift+Enter adds a line, Esc stops an answer.</p>
        </div>
      )}
      <div style={{ height: v.getTotalSize(), position: 'relative', width: '100%' }}>
        <div style={{ position: 'absolute', top: 0, left: 0, width: '100%', transform: `translateY(${items[0]?.start ?? 0}px)` }}>
          {items.map((it) => {
            const row = rows[it.index]
            return (
              <div
                key={it.key}
                data-index={it.index}
                ref={(el) => {
                  v.measureElement(el)
                  if (el && row.kind === 'draft') draftSize.current = el.getBoundingClientRect().height
                }}
                className="row"
              >
                <RowView
                  row={row}
                  state={state}
                  toolServers={props.toolServers}
                  canRetry={row.id === lastError}
                  onRetry={props.onRetry}
                  branch={props.branch}
                  final={endsAnswer(rows, it.index)}
                />
              </div>
            )
          })}
        </div>
      </div>
    </div>
  )
}

function RowView(props: {
  row: Row
  state: ChatState
  toolServers: Record<string, string>
  canRetry: boolean
  onRetry: () => void
  branch: BranchProps
  final: boolean
}) {
  const { row, state, branch } = props
  const sib = (row.kind === 'user' || row.kind === 'assistant') && branch.tree ? siblings(branch.tree, row.id) : null
  const nav = sib && <BranchNav sib={sib} disabled={branch.busy} onGo={branch.onGo} />
  switch (row.kind) {
    case 'user':
      if (branch.editing === row.id)
        return (
          <div className="msg user editing" data-testid="user-message">
            <UserEditor
              text={row.text}
              onSend={(t) => branch.onSendEdit(row.id, t, row.files.map((f) => f.id), row.images)}
              onCancel={() => branch.onEdit(null)}
            />
          </div>
        )
      return (
        <div className="msg user" data-testid="user-message">
          <div className="bubble">
            {row.images.length > 0 && (
              <div className="images">
                {row.images.map((u, i) =>
                  u.startsWith('data:image/') ? (
                    <img key={i} src={u} alt={`Attached image ${i + 1}`} className="inline-image" />
                  ) : (
                    <a key={i} href={u} target="_blank" rel="noopener noreferrer nofollow">
                      Image {i + 1}
                    </a>
                  ),
                )}
              </div>
            )}
            {row.files.length > 0 && (
              <div className="images">
                {row.files.map((f) => (
                  <FileRefView key={f.id} id={f.id} name={f.name} />
                ))}
              </div>
            )}
            {row.text && <Markdown text={row.text} />}
          </div>
          {/* After the text in the page (its text comes first), before it on screen. */}
          <div className="msg-actions before">
            {nav}
            <button type="button" className="act" disabled={branch.busy} aria-label="Edit message" onClick={() => branch.onEdit(row.id)}>
              Edit
            </button>
          </div>
        </div>
      )
    case 'assistant':
      return (
        <div className="msg assistant" data-testid="assistant-message">
          <AssistantBody entry={row} state={state} toolServers={props.toolServers} streaming={false} />
          {(nav || props.final) && (
            <div className="msg-actions">
              {nav}
              {props.final && (
                <>
                  <button type="button" className="act" disabled={branch.busy} aria-label="Regenerate answer" onClick={() => branch.onRegenerate(row.id)}>
                    Regenerate
                  </button>
                  <button type="button" className="act" disabled={branch.busy} aria-label="Fork from here" title="A new conversation with the messages up to here" onClick={() => branch.onFork(row.id)}>
                    Fork
                  </button>
                </>
              )}
            </div>
          )}
        </div>
      )
    case 'error':
      return (
        <div className="msg error" role="alert" data-testid="error-message">
          <p>
            <strong>{row.code === 'upstream' ? 'The model failed' : 'Error'}</strong>: {row.message}
          </p>
          {props.canRetry && (
            <button type="button" onClick={props.onRetry}>
              Retry
            </button>
          )}
        </div>
      )
    case 'approval': {
      const it = state.approvals[row.callId]
      return it ? (
        <div className="msg assistant">
          <ApprovalView item={it} />
        </div>
      ) : null
    }
    case 'draft':
      return (
        <div className="msg assistant draft" data-testid="draft-message">
          <AssistantBody
            entry={{ kind: 'assistant', id: 'draft', text: state.draft.text, reasoning: state.draft.reasoning, toolCalls: [] }}
            draft={state.draft}
            state={state}
            toolServers={props.toolServers}
            streaming={true}
          />
        </div>
      )
  }
}

function Composer(props: {
  running: boolean
  paused: boolean
  onSend: (t: string, fileIds: string[]) => Promise<boolean>
  onStop: () => void
  onPause: () => void
  onResume: () => void
  models: ModelInfo[]
  model: string
  onModel: (m: string) => void
  tools: ToolInfo[]
  selected: string[] | null
  onSelected: (s: string[] | null) => void
}) {
  const [text, setText] = useState('')
  const [toolsOpen, setToolsOpen] = useState(false)
  const [files, setFiles] = useState<Attachment[]>([])
  const [attachError, setAttachError] = useState('')
  const [dragging, setDragging] = useState(false)
  const fileInput = useRef<HTMLInputElement>(null)
  const nextKey = useRef(0)
  const uploading = files.some((f) => !f.id)
  // attach uploads the files from the button, a paste or a drop at once (POST /api/v1/files);
  // the message names them by id when it is sent.
  const attach = async (picked: File[]) => {
    setAttachError('')
    const room = maxFiles - files.length
    if (picked.length > room) setAttachError(`at most ${maxFiles} files a message`)
    const added: Attachment[] = picked.slice(0, Math.max(room, 0)).map((f) => ({
      key: nextKey.current++,
      name: f.name || 'pasted file',
      preview: f.type.startsWith('image/') ? URL.createObjectURL(f) : '',
    }))
    if (added.length === 0) return
    setFiles((old) => [...old, ...added])
    try {
      const up = await uploadFiles(picked.slice(0, added.length))
      setFiles((old) => old.map((a) => ({ ...a, id: a.id ?? up[added.findIndex((x) => x.key === a.key)]?.id })))
    } catch (e: any) {
      setAttachError(e.message ?? 'the upload failed')
      setFiles((old) => old.filter((a) => !added.some((x) => x.key === a.key)))
      added.forEach((a) => a.preview && URL.revokeObjectURL(a.preview))
    }
  }
  const remove = (key: number) =>
    setFiles((old) => {
      old.filter((a) => a.key === key && a.preview).forEach((a) => URL.revokeObjectURL(a.preview))
      return old.filter((a) => a.key !== key)
    })
  const submit = async () => {
    if ((!text.trim() && files.length === 0) || props.running || uploading) return
    const t = text
    const fs = files
    setText('')
    setFiles([])
    if (!(await props.onSend(t, fs.map((f) => f.id!)))) {
      setText(t)
      setFiles(fs)
    }
  }
  const named = props.models.filter((m) => !m.id.endsWith('/*'))
  const sel = props.selected
  const toolLabel = sel === null ? 'All tools' : sel.length === 0 ? 'No tools' : `${sel.length} tool${sel.length === 1 ? '' : 's'}`
  return (
    <form
      className={'composer' + (dragging ? ' dragging' : '')}
      onSubmit={(e) => {
        e.preventDefault()
        submit()
      }}
      onDragOver={(e) => {
        if (e.dataTransfer?.types.includes('Files')) {
          e.preventDefault()
          setDragging(true)
        }
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => {
        setDragging(false)
        const files = [...(e.dataTransfer?.files ?? [])]
        if (files.length) {
          e.preventDefault()
          attach(files)
        }
      }}
    >
      <AttachmentList items={files} onRemove={remove} />
      {attachError && (
        <p role="alert" className="form-error small">
          {attachError}
        </p>
      )}
      <label htmlFor="prompt" className="visually-hidden">
        Message
      </label>
      <textarea
        id="prompt"
        rows={2}
        value={text}
        placeholder="Send a message"
        onChange={(e) => setText(e.target.value)}
        onPaste={(e) => {
          const files = [...e.clipboardData.files]
          if (files.length) {
            e.preventDefault()
            attach(files)
          }
        }}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
            e.preventDefault()
            submit()
          }
        }}
      />
      <div className="composer-bar">
        <input
          ref={fileInput}
          type="file"
          multiple
          hidden
          onChange={(e) => {
            attach([...(e.target.files ?? [])])
            e.target.value = ''
          }}
        />
        <button type="button" className="secondary" aria-label="Attach files" title="Attach files (or paste, or drop them here)" onClick={() => fileInput.current?.click()}>
          <svg width="16" height="16" viewBox="0 0 16 16" aria-hidden="true" fill="none" stroke="currentColor" strokeWidth="1.5">
            <path d="M10.5 4.5 5.6 9.4a1.4 1.4 0 0 0 2 2l5-5a2.8 2.8 0 0 0-4-4l-5 5a4.2 4.2 0 0 0 6 6l4.4-4.4" />
          </svg>
        </button>
        <label className="picker">
          <span className="visually-hidden">Model</span>
          <select aria-label="Model" value={props.model} onChange={(e) => props.onModel(e.target.value)}>
            <option value="">Default</option>
            {named.map((m) => (
              <option key={m.id} value={m.id}>
                {m.id}
                {m.breaker !== 'closed' ? ` (breaker ${m.breaker.replace('_', '-')})` : ''}
              </option>
            ))}
          </select>
        </label>
        <div className="tools-picker">
          <button type="button" className="secondary" aria-expanded={toolsOpen} aria-controls="tool-list" onClick={() => setToolsOpen((o) => !o)}>
            {toolLabel}
          </button>
          {toolsOpen && (
            <fieldset id="tool-list" className="tool-list">
              <legend>Tools offered to the model</legend>
              <label>
                <input type="checkbox" checked={sel === null} onChange={(e) => props.onSelected(e.target.checked ? null : [])} /> All tools
              </label>
              {props.tools.map((t) => (
                <label key={t.name} title={t.description}>
                  <input
                    type="checkbox"
                    checked={sel === null || sel.includes(t.name)}
                    onChange={(e) => {
                      const base = sel ?? props.tools.map((x) => x.name)
                      const next = e.target.checked ? [...base, t.name] : base.filter((n) => n !== t.name)
                      props.onSelected(next.length === props.tools.length ? null : next)
                    }}
                  />{' '}
                  {t.name}
                  {t.server && <span className="badge">{t.server}</span>}
                  {t.breaker !== 'closed' && <span className="badge warn">breaker {t.breaker}</span>}
                </label>
              ))}
            </fieldset>
          )}
        </div>
        <span className="spacer" />
        {props.running && (
          <>
            {props.paused ? (
              <button type="button" className="secondary" onClick={props.onResume}>
                Resume
              </button>
            ) : (
              <button type="button" className="secondary" onClick={props.onPause}>
                Pause
              </button>
            )}
            <button type="button" className="stop" onClick={props.onStop} aria-keyshortcuts="Escape">
              Stop
            </button>
          </>
        )}
        {!props.running && (
          <button type="submit" disabled={(!text.trim() && files.length === 0) || uploading}>
            Send
          </button>
        )}
      </div>
    </form>
  )
}
