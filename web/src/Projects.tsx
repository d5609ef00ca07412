import { useCallback, useEffect, useState } from 'react'
import type { Session } from './api'
import {
  addMemory,
  createProject,
  deleteMemory,
  deleteProject,
  listMemory,
  listProjects,
  moveSession,
  projectSessions,
  updateProject,
  type MemoryEntry,
  type Project,
} from './workspace'
import './workspace.css'

interface Props {
  current?: string
  version: number
  onOpen: (id: string) => void
  onNewChat: (project: Project) => void
  onChanged: () => void
}

// Projects is the sidebar's list of the caller's projects: make one, open its conversations,
// start a chat in it, read and edit its instructions and memory, delete it.
export function Projects(p: Props) {
  const [projects, setProjects] = useState<Project[]>([])
  const [adding, setAdding] = useState(false)
  const [name, setName] = useState('')
  const [err, setErr] = useState('')

  const load = useCallback(() => {
    listProjects().then(
      (r) => {
        setProjects(r.projects)
        setErr('')
      },
      (e) => setErr(e.message),
    )
  }, [])
  useEffect(load, [load, p.version])

  const create = async () => {
    const n = name.trim()
    if (!n) return
    try {
      const pr = await createProject(n)
      setProjects((old) => [pr, ...old])
      setName('')
      setAdding(false)
      setErr('')
      p.onChanged()
    } catch (e) {
      setErr((e as Error).message)
    }
  }

  return (
    <section className="projects" aria-label="Projects">
      <div className="projects-head">
        <h2 className="small">Projects</h2>
        <button type="button" className="secondary" onClick={() => setAdding((a) => !a)} aria-expanded={adding}>
          + New project
        </button>
      </div>
      {adding && (
        <form
          className="project-new"
          onSubmit={(e) => {
            e.preventDefault()
            create()
          }}
        >
          <input aria-label="Project name" autoFocus maxLength={200} value={name} placeholder="Name" onChange={(e) => setName(e.target.value)} />
          <button type="submit">Create</button>
        </form>
      )}
      {err && (
        <p role="alert" className="form-error">
          {err}
        </p>
      )}
      <ul className="project-list">
        {projects.map((pr) => (
          <ProjectItem
            key={pr.id}
            project={pr}
            current={p.current}
            version={p.version}
            onOpen={p.onOpen}
            onNewChat={() => p.onNewChat(pr)}
            onUpdated={(np) => setProjects((old) => old.map((o) => (o.id === np.id ? np : o)))}
            onDeleted={() => {
              setProjects((old) => old.filter((o) => o.id !== pr.id))
              p.onChanged()
            }}
            onError={setErr}
          />
        ))}
      </ul>
    </section>
  )
}

function ProjectItem(props: {
  project: Project
  current?: string
  version: number
  onOpen: (id: string) => void
  onNewChat: () => void
  onUpdated: (p: Project) => void
  onDeleted: () => void
  onError: (m: string) => void
}) {
  const pr = props.project
  const [open, setOpen] = useState(false)
  const [sessions, setSessions] = useState<Session[]>([])
  const [memory, setMemory] = useState<MemoryEntry[]>([])
  const [fact, setFact] = useState('')
  const [instructions, setInstructions] = useState(pr.instructions)
  const { onError } = props

  const load = useCallback(() => {
    projectSessions(pr.id).then((r) => setSessions(r.sessions), (e) => onError(e.message))
    listMemory(pr.id).then((r) => setMemory(r.memory), (e) => onError(e.message))
  }, [pr.id, onError])
  useEffect(() => {
    if (open) load()
  }, [open, load, props.version])

  const save = async () => {
    const f = fact.trim()
    if (!f) return
    try {
      const e = await addMemory(pr.id, f)
      setMemory((old) => [e, ...old])
      setFact('')
    } catch (e) {
      onError((e as Error).message)
    }
  }

  return (
    <li className="project" data-testid="project">
      <details open={open} onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}>
        <summary>{pr.name}</summary>
        <div className="project-body">
          <button type="button" className="secondary" onClick={props.onNewChat}>
            New chat in {pr.name}
          </button>
          <ul className="project-sessions">
            {sessions.map((s) => (
              <li key={s.id} className={s.id === props.current ? 'active' : ''}>
                <a
                  href={'/s/' + s.id}
                  className="session-link"
                  onClick={(e) => {
                    e.preventDefault()
                    props.onOpen(s.id)
                  }}
                >
                  {s.title || 'Untitled'}
                </a>
              </li>
            ))}
          </ul>
          <label className="small" htmlFor={'instr-' + pr.id}>
            Instructions
          </label>
          <textarea
            id={'instr-' + pr.id}
            rows={3}
            value={instructions}
            onChange={(e) => setInstructions(e.target.value)}
            onBlur={async () => {
              if (instructions === pr.instructions) return
              try {
                props.onUpdated(await updateProject(pr.id, { instructions }))
              } catch (e) {
                onError((e as Error).message)
              }
            }}
          />
          <h3 className="small">{`Memory (${memory.length})`}</h3>
          <ul className="memory" aria-label={`Memory of ${pr.name}`}>
            {memory.map((m) => (
              <li key={m.id} data-testid="memory-entry">
                <span>{m.content}</span>
                <button
                  type="button"
                  className="icon"
                  aria-label={`Forget ${m.content}`}
                  onClick={async () => {
                    try {
                      await deleteMemory(pr.id, m.id)
                      setMemory((old) => old.filter((o) => o.id !== m.id))
                    } catch (e) {
                      onError((e as Error).message)
                    }
                  }}
                >
                  ×
                </button>
              </li>
            ))}
          </ul>
          <form
            className="project-new"
            onSubmit={(e) => {
              e.preventDefault()
              save()
            }}
          >
            <input aria-label={`A fact for ${pr.name}`} maxLength={2000} value={fact} placeholder="Remember…" onChange={(e) => setFact(e.target.value)} />
            <button type="submit">Save</button>
          </form>
          <button
            type="button"
            className="secondary danger"
            onClick={async () => {
              if (!confirm(`Delete the project “${pr.name}” and its memory? Its conversations stay, outside any project.`)) return
              try {
                await deleteProject(pr.id)
                props.onDeleted()
              } catch (e) {
                onError((e as Error).message)
              }
            }}
          >
            Delete project
          </button>
        </div>
      </details>
    </li>
  )
}

// ProjectPicker moves the open conversation into a project, or out of any.
export function ProjectPicker(props: { sessionId: string; projectId?: string; onMoved: (projectId: string) => void }) {
  const [projects, setProjects] = useState<Project[]>([])
  const [err, setErr] = useState('')
  const load = useCallback(() => {
    listProjects().then((r) => setProjects(r.projects), () => {})
  }, [])
  useEffect(load, [load])
  if (projects.length === 0 && !props.projectId) return null
  return (
    <>
      <select
        aria-label="Project"
        className="project-picker"
        value={props.projectId ?? ''}
        onFocus={load}
        onChange={async (e) => {
          try {
            const s = await moveSession(props.sessionId, e.target.value)
            setErr('')
            props.onMoved(s.project_id ?? '')
          } catch (x) {
            setErr((x as Error).message)
          }
        }}
      >
        <option value="">No project</option>
        {projects.map((p) => (
          <option key={p.id} value={p.id}>
            {p.name}
          </option>
        ))}
      </select>
      {err && (
        <span role="alert" className="form-error small">
          {err}
        </span>
      )}
    </>
  )
}
