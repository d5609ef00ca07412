// Files: uploads for the composer and the files a stored message names (issue 20). A file goes to
// POST /api/v1/files as soon as it is attached (button, paste or drop); the message then names
// it by id (the WebSocket's fileIds). Files are read with the stored key, so pictures are fetched
// and shown from blob: URLs.
import { useEffect, useState } from 'react'
import { api, ApiError, getKey } from './api'

export interface UploadedFile {
  id: string
  name: string
  size: number
  media_type: string
  url: string
}

// maxFiles is the server's limit of files a message names.
export const maxFiles = 20

const inlineTypes = ['image/png', 'image/jpeg', 'image/gif', 'image/webp']

function authHeaders(): Record<string, string> {
  const key = getKey()
  return key ? { Authorization: 'Bearer ' + key } : {}
}

// uploadFiles uploads files in one request (all or nothing).
export async function uploadFiles(files: File[], sessionId?: string): Promise<UploadedFile[]> {
  const fd = new FormData()
  if (sessionId) fd.append('session_id', sessionId)
  for (const f of files) fd.append('file', f, f.name || 'pasted')
  const res = await fetch('/api/v1/files', { method: 'POST', headers: authHeaders(), body: fd })
  let data: any = null
  try {
    data = await res.json()
  } catch {
    /* not JSON */
  }
  if (!res.ok) throw new ApiError(res.status, data?.error?.code ?? 'internal', data?.error?.message ?? res.statusText)
  return data.files as UploadedFile[]
}

async function fetchContent(id: string): Promise<Blob> {
  const res = await fetch('/api/v1/files/' + id + '/content', { headers: authHeaders() })
  if (!res.ok) throw new ApiError(res.status, 'not_found', res.statusText)
  return res.blob()
}

// Attachment is a file in the composer: uploading, uploaded (id) or refused (error).
export interface Attachment {
  key: number
  name: string
  preview: string // an object URL of an image, or ''
  id?: string
  error?: string
}

// AttachmentList shows the composer's attachments with a remove button each.
export function AttachmentList(props: { items: Attachment[]; onRemove: (key: number) => void }) {
  if (props.items.length === 0) return null
  return (
    <ul className="attachments" aria-label="Attached files">
      {props.items.map((a) => (
        <li key={a.key} className={a.id ? '' : 'pending'} title={a.error ?? (a.id ? a.name : 'Uploading ' + a.name)}>
          {a.preview ? <img src={a.preview} alt={a.name} /> : <span className="file-name">{a.name}</span>}
          <button type="button" className="icon remove" aria-label={`Remove ${a.name}`} onClick={() => props.onRemove(a.key)}>
            ×
          </button>
        </li>
      ))}
    </ul>
  )
}

// FileRefView shows a file a stored message names: a picture for an image, otherwise a button that
// downloads it.
export function FileRefView(props: { id: string; name: string }) {
  const [img, setImg] = useState('')
  const [gone, setGone] = useState(false)
  useEffect(() => {
    let alive = true
    let url = ''
    ;(async () => {
      const meta = await api<UploadedFile>('GET', '/api/v1/files/' + props.id)
      if (!inlineTypes.includes(meta.media_type)) return
      const blob = await fetchContent(props.id)
      url = URL.createObjectURL(blob)
      if (alive) setImg(url)
      else URL.revokeObjectURL(url)
    })().catch(() => alive && setGone(true))
    return () => {
      alive = false
      if (url) URL.revokeObjectURL(url)
    }
  }, [props.id])
  if (img) return <img src={img} alt={props.name} className="inline-image" />
  const download = async () => {
    try {
      const url = URL.createObjectURL(await fetchContent(props.id))
      const a = document.createElement('a')
      a.href = url
      a.download = props.name
      a.click()
      setTimeout(() => URL.revokeObjectURL(url), 60_000)
    } catch {
      setGone(true)
    }
  }
  return (
    <button type="button" className="secondary file-chip" onClick={download} disabled={gone}>
      {props.name}
      {gone ? ' (deleted)' : ''}
    </button>
  )
}
