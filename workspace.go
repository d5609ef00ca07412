package parley

import (
	"context"
	"time"
)

// The states of a todo item (seed 002's TodoTool).
const (
	TodoPending    = "pending"
	TodoInProgress = "in_progress"
	TodoCompleted  = "completed"
)

// Todo is one item of a session's todo list, which the model keeps with the todo tools.
type Todo struct {
	ID      string `json:"id"`
	Content string `json:"content"`
	Status  string `json:"status"` // TodoPending, TodoInProgress or TodoCompleted
}

// Project groups sessions of one owner; its instructions and memory go into the system prompt of
// each of its sessions.
type Project struct {
	ID           string `json:"id"`
	Owner        string `json:"owner"`
	Name         string `json:"name"`
	Instructions string `json:"instructions"`
	// ToolPolicy maps tool name patterns to PolicyAuto, PolicyAsk or PolicyDeny for the project's
	// sessions (issue 23); it overrides the server's policy for the tools it matches.
	ToolPolicy map[string]string `json:"tool_policy,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
}

// MemoryEntry is one fact of a project's memory (seed 002's memory.json, per project).
type MemoryEntry struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
	Content   string `json:"content"`
	// SessionID is the session whose model saved the fact ("" when a client added it).
	SessionID string    `json:"session_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MemoryChange is the payload of a memory_update event: what happened to which entry.
type MemoryChange struct {
	ProjectID string      `json:"project_id"`
	Action    string      `json:"action"` // "saved", "updated" or "deleted"
	Entry     MemoryEntry `json:"entry"`
}

// Bounds of the workspace data, enforced by package workspace and the HTTP layer.
const (
	MaxTodos            = 100   // items of one todo list
	MaxTodoChars        = 1000  // characters of one item's content
	MaxMemoryEntries    = 500   // facts of one project's memory
	MaxMemoryChars      = 2000  // characters of one fact
	MaxProjectName      = 200   // characters of a project's name
	MaxInstructionChars = 20000 // characters of a project's instructions
)

// WorkspaceStore keeps sessions' todo lists, projects and their memory. Every write is durable when
// it returns. An unknown id gives ErrNotFound.
type WorkspaceStore interface {
	// PutTodos replaces the session's todo list (nil or empty clears it).
	PutTodos(ctx context.Context, sessionID string, todos []Todo, at time.Time) error
	// Todos returns the session's todo list, in order (empty, not nil, when it has none).
	Todos(ctx context.Context, sessionID string) ([]Todo, error)

	// CreateProject stores p; ID, Owner, CreatedAt and UpdatedAt must be set.
	CreateProject(ctx context.Context, p *Project) error
	GetProject(ctx context.Context, id string) (*Project, error)
	// ListProjects returns owner's projects, most recently updated first, and the cursor of the
	// next page ("" on the last page). Page.Query is ignored.
	ListProjects(ctx context.Context, owner string, p Page) ([]Project, string, error)
	// UpdateProject stores p's Name, Instructions, ToolPolicy and UpdatedAt.
	UpdateProject(ctx context.Context, p *Project) error
	// DeleteProject deletes the project and its memory; its sessions stay, without a project.
	DeleteProject(ctx context.Context, id string) error
	// SetSessionProject moves the session into the project ("" takes it out of any) and returns
	// it. It does not check owners: the caller does.
	SetSessionProject(ctx context.Context, sessionID, projectID string) (*Session, error)

	// AddMemory stores e, unless the project already holds max entries (ECConflict).
	AddMemory(ctx context.Context, e *MemoryEntry, max int) error
	// ListMemory returns up to limit of the project's entries, newest first.
	ListMemory(ctx context.Context, projectID string, limit int) ([]MemoryEntry, error)
	// CountMemory returns how many entries the project's memory holds.
	CountMemory(ctx context.Context, projectID string) (int, error)
	// UpdateMemory stores e's Content and UpdatedAt; the entry must belong to e.ProjectID.
	UpdateMemory(ctx context.Context, e *MemoryEntry) error
	// DeleteMemory deletes the project's entry.
	DeleteMemory(ctx context.Context, projectID, id string) error
}
