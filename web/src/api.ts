// The REST side of Parley's public API (docs/protocol.md). Every call carries the stored key, if any.

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  reasoning_tokens?: number
  cached_tokens?: number
  cost?: number
}

export interface Session {
  id: string
  title: string
  owner: string
  created_at: string
  updated_at: string
  usage: Usage
  active_run?: string
  project_id?: string
  leaf_id?: string // the active branch's last message (issue 23)
}

export interface ToolCall {
  id: string
  type: string
  function: { name: string; arguments: string }
}

export interface Message {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string | null | Array<{ type: string; text?: string; image_url?: { url: string }; file?: { file_id?: string; filename?: string } }>
  tool_calls?: ToolCall[]
  tool_call_id?: string
  name?: string
  reasoning_content?: string
  id: string
  session_id: string
  seq: number
  run_id?: string
  model?: string
  latency_ms?: number
  usage?: Usage
  success?: boolean
  server?: string
  // error marks a failed turn: the code of the error that ended the model call.
  error?: string
  // parent_id: the message this one follows in the session's tree ("" or absent for the first).
  parent_id?: string
  created_at: string
}

export interface ModelInfo {
  id: string
  provider: string
  kind: string
  default?: boolean
  breaker: string
}

export interface ToolInfo {
  name: string
  description?: string
  server?: string
  health?: string
  breaker: string
}

export interface Me {
  user: string
  key_id?: string
  admin: boolean
  guest: boolean
  auth: boolean
}

export class ApiError extends Error {
  status: number
  code: string
  constructor(status: number, code: string, message: string) {
    super(message)
    this.status = status
    this.code = code
  }
}

const KEY = 'parley.key'

export function getKey(): string {
  try {
    return localStorage.getItem(KEY) ?? ''
  } catch {
    return ''
  }
}

export function setKey(k: string) {
  try {
    if (k) localStorage.setItem(KEY, k)
    else localStorage.removeItem(KEY)
  } catch {
    /* storage unavailable: the key lives for this page only */
  }
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {}
  const key = getKey()
  if (key) headers.Authorization = 'Bearer ' + key
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  if (res.status === 204) return undefined as T
  let data: any = null
  try {
    data = await res.json()
  } catch {
    /* not JSON */
  }
  if (!res.ok) {
    const e = data?.error
    throw new ApiError(res.status, e?.code ?? 'internal', e?.message ?? res.statusText)
  }
  return data as T
}

export const listSessions = (q: string, cursor: string, limit = 30) => {
  const p = new URLSearchParams({ limit: String(limit) })
  if (q) p.set('q', q)
  if (cursor) p.set('cursor', cursor)
  return api<{ sessions: Session[]; next_cursor?: string }>('GET', '/api/v1/sessions?' + p)
}
export const getSession = (id: string) => api<Session>('GET', '/api/v1/sessions/' + id)
export const renameSession = (id: string, title: string) => api<Session>('PATCH', '/api/v1/sessions/' + id, { title })
export const deleteSession = (id: string) => api<void>('DELETE', '/api/v1/sessions/' + id)
export const listModels = () => api<{ models: ModelInfo[] }>('GET', '/api/v1/models')
export const listTools = () => api<{ tools: ToolInfo[] }>('GET', '/api/v1/tools')
export const me = () => api<Me>('GET', '/api/v1/me')
export const guest = () => api<{ token: string; user: string }>('POST', '/api/v1/auth/guest')

// allMessages reads a session's whole history, page by page (1,000 a page).
export async function allMessages(id: string, after = 0): Promise<Message[]> {
  const out: Message[] = []
  for (;;) {
    const page = await api<{ messages: Message[]; next_after?: number }>(
      'GET',
      `/api/v1/sessions/${id}/messages?after=${after}&limit=1000`,
    )
    out.push(...page.messages)
    if (!page.next_after) return out
    after = page.next_after
  }
}

// ---- issue 23: tool approval and branches -------------------------------------------------

// Approval is a tool call that waits for the session owner's decision (approval_required), or the
// decision taken on it (approval_resolved).
export interface Approval {
  call_id: string
  tool: string
  server?: string
  arguments: string
  reason?: string
  expires_at?: string
  decision?: 'approved' | 'denied' | 'expired'
  edited?: boolean
  always?: boolean
}

export type Decision = 'approve' | 'deny' | 'always'

export const listApprovals = (id: string) => api<{ approvals: Approval[] }>('GET', `/api/v1/sessions/${id}/approvals`)
export const answerApproval = (id: string, callId: string, body: { decision: Decision; arguments?: object; reason?: string }) =>
  api<{ approval: Approval }>('POST', `/api/v1/sessions/${id}/approvals/${encodeURIComponent(callId)}`, body)

// TreeNode is one message of a session's tree (GET …/tree), every branch.
export interface TreeNode {
  id: string
  parent_id?: string
  role: string
  created_at?: string
}

// RunStarted is how a route that starts a run answers (as POST …/retry does).
export interface RunStarted {
  action?: string
  session_id?: string
  run_id?: string
  model?: string
  message_id?: string
}

export const getTree = (id: string) => api<{ leaf_id?: string; nodes: TreeNode[] }>('GET', `/api/v1/sessions/${id}/tree`)
export const setLeaf = (id: string, messageId: string) => api<{ leaf_id: string }>('PUT', `/api/v1/sessions/${id}/leaf`, { message_id: messageId })
export const forkSession = (id: string, messageId: string) => api<{ session: Session }>('POST', `/api/v1/sessions/${id}/fork`, { message_id: messageId })
export interface EditBody {
  message: string
  model?: string
  selected_tools?: string[]
  file_ids?: string[]
  binary_content?: { type: 'image_url'; image_url: { url: string } }[]
}

export const editMessage = (id: string, messageId: string, body: EditBody) =>
  api<RunStarted>('POST', `/api/v1/sessions/${id}/messages/${messageId}/edit`, body)
export const regenerate = (id: string, messageId: string, body: { model?: string; selected_tools?: string[] }) =>
  api<RunStarted>('POST', `/api/v1/sessions/${id}/messages/${messageId}/regenerate`, body)
