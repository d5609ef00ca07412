// Branch navigation (issue 23): a session's messages form a tree (each has a parent) and the page
// shows one branch, root to the active leaf. The tree comes compact from GET …/tree and grows with
// each stored message a run announces; "‹ 2 / 3 ›" on a message counts its siblings: the messages
// of the same role with the same parent, in storage order.

import type { EditBody, TreeNode } from './api'

export interface TreeIndex {
  byId: Map<string, TreeNode>
  children: Map<string, TreeNode[]> // parent id ("" for the roots) → children, in storage order
}

export function indexTree(nodes: readonly TreeNode[]): TreeIndex {
  const byId = new Map<string, TreeNode>()
  const children = new Map<string, TreeNode[]>()
  for (const n of nodes) {
    if (byId.has(n.id)) continue
    byId.set(n.id, n)
    const p = n.parent_id ?? ''
    const list = children.get(p)
    if (list) list.push(n)
    else children.set(p, [n])
  }
  return { byId, children }
}

export interface Siblings {
  index: number // 0-based position of the message among its siblings
  count: number
  prev?: string // the sibling before it, if any
  next?: string // the sibling after it, if any
}

// siblings places a message among its siblings, or says null when it has none (or is unknown).
export function siblings(ix: TreeIndex, id: string): Siblings | null {
  const n = ix.byId.get(id)
  if (!n) return null
  const all = (ix.children.get(n.parent_id ?? '') ?? []).filter((x) => x.role === n.role)
  if (all.length < 2) return null
  const index = all.findIndex((x) => x.id === id)
  return { index, count: all.length, prev: all[index - 1]?.id, next: all[index + 1]?.id }
}

// addNodes adds stored messages to the tree, those it does not hold yet.
export function addNodes(nodes: TreeNode[], msgs: readonly { id: string; parent_id?: string; role: string; created_at?: string }[]): TreeNode[] {
  const have = new Set(nodes.map((n) => n.id))
  const add = msgs.filter((m) => !have.has(m.id) && (have.add(m.id), true))
  if (add.length === 0) return nodes
  return [...nodes, ...add.map((m) => ({ id: m.id, parent_id: m.parent_id || undefined, role: m.role, created_at: m.created_at }))]
}

// mergeNodes is a tree just read, plus the nodes the page learnt from events after it was read.
export function mergeNodes(current: readonly TreeNode[] | null, read: TreeNode[]): TreeNode[] {
  if (!current?.length) return read
  const have = new Set(read.map((n) => n.id))
  const extra = current.filter((n) => !have.has(n.id))
  return extra.length ? [...read, ...extra] : read
}

// endsAnswer says whether row i is the last assistant message of an answer (nothing more of that
// answer follows it: the next row is a question, or there is none and it asks for no tools): it
// offers Regenerate and Fork.
export function endsAnswer(rows: readonly { kind: string; partial?: boolean; toolCalls?: unknown[] }[], i: number): boolean {
  const r = rows[i]
  if (r?.kind !== 'assistant' || r.partial) return false
  for (let j = i + 1; j < rows.length; j++) {
    const k = rows[j].kind
    if (k === 'user') return true
    if (k === 'assistant' || k === 'draft') return false
  }
  return (r.toolCalls?.length ?? 0) === 0
}

// editBody is the body of POST …/messages/{id}/edit: the edited text, with the original message's
// attachments (its files by id, its inline images as binary_content), and the model and tools
// picked in the composer.
export function editBody(text: string, orig: { fileIds: string[]; images: string[] }, model: string, selected: string[] | null): EditBody {
  const body: EditBody = { message: text }
  if (model) body.model = model
  if (selected) body.selected_tools = selected
  if (orig.fileIds.length) body.file_ids = orig.fileIds
  // Images that are not inline (a URL) stay out: they name nothing this message can send again.
  const inline = orig.images.filter((u) => u.startsWith('data:image/'))
  if (inline.length) body.binary_content = inline.map((url) => ({ type: 'image_url', image_url: { url } }))
  return body
}
