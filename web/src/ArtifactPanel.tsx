// The artifacts of the conversation, beside it: each one shown in a sandboxed iframe (an opaque
// origin without network: it cannot read this page's key or call the API) from its signed
// render URL, or as its code.
import { useEffect, useState } from 'react'
import { api } from './api'
import { fileName } from './artifactFile'

export interface Artifact {
  id: string
  version: number
  type: string
  title: string
  language?: string
  content: string
  created_at: string
  render_url: string
}

export const listArtifacts = (session: string) => api<{ artifacts: Artifact[] }>('GET', `/api/v1/sessions/${session}/artifacts`)
export const getArtifact = (id: string, version: number) => api<Artifact>('GET', `/api/v1/artifacts/${id}?version=${version}`)

function download(a: Artifact) {
  const url = URL.createObjectURL(new Blob([a.content], { type: 'text/plain;charset=utf-8' }))
  const link = document.createElement('a')
  link.href = url
  link.download = fileName(a)
  document.body.appendChild(link)
  link.click()
  link.remove()
  setTimeout(() => URL.revokeObjectURL(url), 10_000)
}

// ArtifactPanel lists the session's artifacts; tick changes when an artifact event arrives.
export function ArtifactPanel(props: { sessionId?: string; tick: number }) {
  const [items, setItems] = useState<Artifact[]>([])
  const [current, setCurrent] = useState<string>('')
  const [code, setCode] = useState(false)
  const [open, setOpen] = useState(true)
  // An older version picked in the version list (null: the latest).
  const [older, setOlder] = useState<Artifact | null>(null)

  useEffect(() => {
    let alive = true
    if (!props.sessionId) {
      setItems([])
      return
    }
    listArtifacts(props.sessionId).then(
      (r) => {
        if (!alive) return
        setItems(r.artifacts)
        // The newest (or just updated) one is shown.
        if (props.tick > 0 && r.artifacts.length) {
          const newest = [...r.artifacts].sort((a, b) => (a.created_at < b.created_at ? 1 : -1))[0]
          setCurrent(newest.id)
          setOpen(true)
        }
      },
      () => {},
    )
    return () => {
      alive = false
    }
  }, [props.sessionId, props.tick])

  useEffect(() => setOlder(null), [current, props.tick])

  if (items.length === 0) return null
  const latest = items.find((x) => x.id === current) ?? items[items.length - 1]
  const a = older && older.id === latest.id ? older : latest
  const pickVersion = (v: number) => {
    if (v === latest.version) return setOlder(null)
    getArtifact(latest.id, v).then(setOlder, () => {})
  }
  const shownAsCode = code || !['react', 'html', 'svg'].includes(a.type)
  return (
    <aside className={'artifacts' + (open ? '' : ' closed')} data-testid="artifacts" aria-label="Artifacts">
      <div className="artifacts-head">
        <button type="button" className="icon" aria-expanded={open} aria-label={open ? 'Hide artifacts' : 'Show artifacts'} onClick={() => setOpen(!open)}>
          {open ? '⟩' : '⟨'}
        </button>
        {open && (
          <>
            <select aria-label="Artifact" value={a.id} onChange={(e) => setCurrent(e.target.value)}>
              {items.map((x) => (
                <option key={x.id} value={x.id}>
                  {x.title}
                </option>
              ))}
            </select>
            <select aria-label="Version" value={a.version} onChange={(e) => pickVersion(Number(e.target.value))}>
              {Array.from({ length: latest.version }, (_, i) => latest.version - i).map((v) => (
                <option key={v} value={v}>
                  v{v}
                  {v === latest.version ? ' (latest)' : ''}
                </option>
              ))}
            </select>
            <button type="button" onClick={() => download(a)}>
              Download
            </button>
            {['react', 'html', 'svg'].includes(a.type) && (
              <button type="button" aria-pressed={code} onClick={() => setCode(!code)}>
                {code ? 'Preview' : 'Code'}
              </button>
            )}
          </>
        )}
      </div>
      {open &&
        (shownAsCode ? (
          <pre className="artifact-code" tabIndex={0} data-testid="artifact-code">
            {a.content}
          </pre>
        ) : (
          <iframe
            key={a.id + '@' + a.version}
            className="artifact-frame"
            title={a.title}
            src={a.render_url}
            sandbox="allow-scripts"
            referrerPolicy="no-referrer"
            data-testid="artifact-frame"
          />
        ))}
    </aside>
  )
}
