package parley

import (
	"context"
	"encoding/json"
	"time"
)

// Session is one persistent conversation.
type Session struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ProjectID is the project the session belongs to ("" for none).
	ProjectID string `json:"project_id,omitempty"`
	// LeafID is the last message of the session's active branch ("" while it has no message).
	// Stores fill it in; it is ignored by CreateSession.
	LeafID string `json:"leaf_id,omitempty"`
	// Usage totals the token usage of the session's messages. Stores fill it in; it is ignored by
	// CreateSession.
	Usage Usage `json:"usage"`
}

// Resource is something a tool result refers to (a file, a fetched page, an artifact); tool
// messages point at it by resource_id (seed 004).
type Resource struct {
	ID        string          `json:"id"`
	SessionID string          `json:"session_id"`
	Kind      string          `json:"kind"`
	URI       string          `json:"uri,omitempty"`
	Meta      json.RawMessage `json:"meta,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// Page asks for one page of a cursor-paginated listing. An empty Cursor asks for the first page.
type Page struct {
	Cursor string
	Limit  int
	// Query, when set, keeps only sessions whose title contains it, ignoring case (in SQLite,
	// the case of ASCII letters only). "%" and "_" are plain characters.
	Query string
	// Project, when set, keeps only the sessions of that project (ListSessions).
	Project string
}

// Store keeps sessions, their messages and resources. Every write is durable when it returns.
// Implementations: store/sqlite, store/postgres; store/storetest is the contract suite.
type Store interface {
	// CreateSession stores s. s.ID, CreatedAt and UpdatedAt must be set.
	CreateSession(ctx context.Context, s *Session) error
	// GetSession returns ErrNotFound for an unknown id.
	GetSession(ctx context.Context, id string) (*Session, error)
	// ListSessions returns owner's sessions, most recently updated first, and the cursor of the
	// next page ("" on the last page).
	ListSessions(ctx context.Context, owner string, p Page) ([]Session, string, error)
	// RenameSession sets the title and updated_at and returns the session.
	RenameSession(ctx context.Context, id, title string, now time.Time) (*Session, error)
	// DeleteSession deletes the session, its messages and resources.
	DeleteSession(ctx context.Context, id string) error

	// AppendMessages appends msgs to the session in one transaction, sets each one's Seq,
	// SessionID and ParentID, links them into the session's tree and makes the last one the
	// active leaf (see BranchStore), adds their Usage to the session's, and bumps the session's
	// updated_at to the last message's CreatedAt (it never moves back). Each message must have
	// ID and CreatedAt set; a ParentID given must name a message of the session (or be
	// ParentRoot). An unknown session gives ErrNotFound.
	AppendMessages(ctx context.Context, sessionID string, msgs ...*Message) error
	// ListMessages returns up to limit messages of the active branch with Seq > afterSeq, in
	// order.
	ListMessages(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Message, error)
	// History returns every message of the active branch, in order.
	History(ctx context.Context, sessionID string) ([]Message, error)
	// ModelHistory returns every message of the active branch, in order, with only the fields a
	// model is sent and the mark of a failed turn (Message.ModelView): the cheap read the agent
	// loop makes before each model call.
	ModelHistory(ctx context.Context, sessionID string) ([]Message, error)
	// OwnerUsage totals the token usage of all of owner's sessions.
	OwnerUsage(ctx context.Context, owner string) (Usage, error)
	// SessionsWithOpenToolCalls returns the ids of sessions where more assistant tool calls were
	// stored than tool messages: a run that stopped (a crash) between a model's tool calls and
	// their results leaves one. Sessions with a running run (RunStore) are left out: their calls
	// belong to that run. It returns at most limit ids greater than afterID, in order.
	SessionsWithOpenToolCalls(ctx context.Context, afterID string, limit int) ([]string, error)

	// PutResource stores r; GetResource returns ErrNotFound for an unknown id.
	PutResource(ctx context.Context, r *Resource) error
	GetResource(ctx context.Context, id string) (*Resource, error)

	BranchStore
	KeyStore
	EventStore
	RunStore
	FileStore
	WorkspaceStore
	ApprovalStore

	Close() error
}
