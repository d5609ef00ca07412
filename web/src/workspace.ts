// The workspace side of the API (docs/protocol.md, "Todos" and "Projects and memory"): a session's
// todo list, projects and their memory.

import { api, type Session } from './api'

export interface Todo {
  id: string
  content: string
  status: 'pending' | 'in_progress' | 'completed'
}

export interface Project {
  id: string
  owner: string
  name: string
  instructions: string
  created_at: string
  updated_at: string
}

export interface MemoryEntry {
  id: string
  project_id: string
  content: string
  session_id?: string
  created_at: string
}

export const getTodos = (sessionId: string) => api<{ todos: Todo[] }>('GET', `/api/v1/sessions/${sessionId}/todos`)
export const listProjects = () => api<{ projects: Project[] }>('GET', '/api/v1/projects?limit=200')
export const createProject = (name: string, instructions = '') => api<Project>('POST', '/api/v1/projects', { name, instructions })
export const updateProject = (id: string, patch: { name?: string; instructions?: string }) => api<Project>('PATCH', '/api/v1/projects/' + id, patch)
export const deleteProject = (id: string) => api<void>('DELETE', '/api/v1/projects/' + id)
export const listMemory = (id: string) => api<{ memory: MemoryEntry[] }>('GET', `/api/v1/projects/${id}/memory`)
export const addMemory = (id: string, content: string) => api<MemoryEntry>('POST', `/api/v1/projects/${id}/memory`, { content })
export const deleteMemory = (id: string, entry: string) => api<void>('DELETE', `/api/v1/projects/${id}/memory/${entry}`)
export const projectSessions = (id: string) =>
  api<{ sessions: Session[] }>('GET', `/api/v1/sessions?limit=50&project_id=${encodeURIComponent(id)}`)
// moveSession puts a session into a project ('' takes it out of any).
export const moveSession = (sessionId: string, projectId: string) =>
  api<Session>('PATCH', '/api/v1/sessions/' + sessionId, { project_id: projectId })
