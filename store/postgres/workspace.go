package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// nullable is NULL for "", else s.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// PutTodos replaces the session's todo list.
func (s *Store) PutTodos(ctx context.Context, sessionID string, todos []parley.Todo, at time.Time) error {
	if todos == nil {
		todos = []parley.Todo{}
	}
	b, err := json.Marshal(todos)
	if err != nil {
		return fmt.Errorf("postgres: encoding todos: %w", err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO todos (session_id, items, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (session_id) DO UPDATE SET items = excluded.items, updated_at = excluded.updated_at`,
		sessionID, string(b), at.UTC())
	if isFKViolation(err) {
		return notFound("session", sessionID)
	}
	if err != nil {
		return fmt.Errorf("postgres: storing todos: %w", err)
	}
	return nil
}

// Todos returns the session's todo list.
func (s *Store) Todos(ctx context.Context, sessionID string) ([]parley.Todo, error) {
	var items []byte
	err := s.pool.QueryRow(ctx, `SELECT t.items::text FROM sessions s LEFT JOIN todos t ON t.session_id = s.id WHERE s.id = $1`,
		sessionID).Scan(&items)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("session", sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading todos: %w", err)
	}
	out := []parley.Todo{}
	if items != nil {
		if err := json.Unmarshal(items, &out); err != nil {
			return nil, fmt.Errorf("postgres: decoding todos: %w", err)
		}
	}
	return out, nil
}

const projectCols = `id, owner, name, instructions, tool_policy, created_at, updated_at`

func scanProject(r pgx.Row) (*parley.Project, error) {
	var (
		p      parley.Project
		policy string
	)
	if err := r.Scan(&p.ID, &p.Owner, &p.Name, &p.Instructions, &policy, &p.CreatedAt, &p.UpdatedAt); err != nil {
		return nil, err
	}
	if policy != "" {
		if err := json.Unmarshal([]byte(policy), &p.ToolPolicy); err != nil {
			return nil, fmt.Errorf("postgres: decoding a project's tool policy: %w", err)
		}
	}
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return &p, nil
}

// CreateProject stores p.
func (s *Store) CreateProject(ctx context.Context, p *parley.Project) error {
	if p.ID == "" || p.Owner == "" || p.CreatedAt.IsZero() || p.UpdatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "project: id, owner, created_at and updated_at are required")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO projects (`+projectCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		p.ID, p.Owner, p.Name, p.Instructions, encodePolicy(p.ToolPolicy), p.CreatedAt.UTC(), p.UpdatedAt.UTC())
	if err != nil {
		return fmt.Errorf("postgres: creating project: %w", err)
	}
	return nil
}

// GetProject returns the project with id.
func (s *Store) GetProject(ctx context.Context, id string) (*parley.Project, error) {
	p, err := scanProject(s.pool.QueryRow(ctx, `SELECT `+projectCols+` FROM projects WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("project", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading project: %w", err)
	}
	return p, nil
}

// ListProjects returns owner's projects, most recently updated first.
func (s *Store) ListProjects(ctx context.Context, owner string, pg parley.Page) ([]parley.Project, string, error) {
	limit := pg.Limit
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	q := `SELECT ` + projectCols + ` FROM projects WHERE owner = $1`
	args := []any{owner}
	if pg.Cursor != "" {
		upd, id, err := rowcodec.DecodeCursor(pg.Cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, time.UnixMicro(upd).UTC(), id)
		q += fmt.Sprintf(` AND (updated_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	q += fmt.Sprintf(` ORDER BY updated_at DESC, id DESC LIMIT %d`, limit+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: listing projects: %w", err)
	}
	defer rows.Close()
	out := []parley.Project{}
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, "", fmt.Errorf("postgres: listing projects: %w", err)
		}
		out = append(out, *p)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("postgres: listing projects: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = rowcodec.EncodeCursor(last.UpdatedAt.UnixMicro(), last.ID)
	}
	return out, next, nil
}

// UpdateProject stores p's name, instructions and updated_at.
func (s *Store) UpdateProject(ctx context.Context, p *parley.Project) error {
	tag, err := s.pool.Exec(ctx, `UPDATE projects SET name = $1, instructions = $2, tool_policy = $3, updated_at = $4 WHERE id = $5`,
		p.Name, p.Instructions, encodePolicy(p.ToolPolicy), p.UpdatedAt.UTC(), p.ID)
	if err != nil {
		return fmt.Errorf("postgres: updating project: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("project", p.ID)
	}
	return nil
}

// DeleteProject deletes the project and its memory (ON DELETE CASCADE); its sessions lose their
// project (ON DELETE SET NULL).
func (s *Store) DeleteProject(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM projects WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("postgres: deleting project: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("project", id)
	}
	return nil
}

// SetSessionProject moves the session into the project, or out of any with "".
func (s *Store) SetSessionProject(ctx context.Context, sessionID, projectID string) (*parley.Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, `UPDATE sessions SET project_id = $1 WHERE id = $2 RETURNING `+sessionCols,
		nullable(projectID), sessionID))
	if isFKViolation(err) {
		return nil, notFound("project", projectID)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("session", sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: moving session: %w", err)
	}
	return sess, nil
}

const memoryCols = `id, project_id, content, session_id, created_at, updated_at`

func scanMemory(r pgx.Row) (*parley.MemoryEntry, error) {
	var e parley.MemoryEntry
	if err := r.Scan(&e.ID, &e.ProjectID, &e.Content, &e.SessionID, &e.CreatedAt, &e.UpdatedAt); err != nil {
		return nil, err
	}
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	return &e, nil
}

// AddMemory stores e, unless its project holds max entries already. The project's row is locked
// while the entries are counted, so that concurrent saves cannot pass the bound together.
func (s *Store) AddMemory(ctx context.Context, e *parley.MemoryEntry, max int) error {
	if e.ID == "" || e.ProjectID == "" || e.CreatedAt.IsZero() || e.UpdatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "memory entry: id, project_id, created_at and updated_at are required")
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM projects WHERE id = $1 FOR UPDATE`, e.ProjectID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("project", e.ProjectID)
		}
		if err != nil {
			return fmt.Errorf("postgres: reading project: %w", err)
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM memory_entries WHERE project_id = $1`, e.ProjectID).Scan(&n); err != nil {
			return fmt.Errorf("postgres: counting memory: %w", err)
		}
		if n >= max {
			return parley.Errorf(parley.ECConflict, "the project's memory is full (%d entries): delete entries first", max)
		}
		_, err = tx.Exec(ctx, `INSERT INTO memory_entries (`+memoryCols+`) VALUES ($1, $2, $3, $4, $5, $6)`,
			e.ID, e.ProjectID, e.Content, e.SessionID, e.CreatedAt.UTC(), e.UpdatedAt.UTC())
		if err != nil {
			return fmt.Errorf("postgres: saving memory: %w", err)
		}
		return nil
	})
}

// ListMemory returns up to limit of the project's entries, newest first.
func (s *Store) ListMemory(ctx context.Context, projectID string, limit int) ([]parley.MemoryEntry, error) {
	if limit <= 0 {
		limit = parley.MaxMemoryEntries
	}
	rows, err := s.pool.Query(ctx, `SELECT `+memoryCols+` FROM memory_entries WHERE project_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing memory: %w", err)
	}
	defer rows.Close()
	out := []parley.MemoryEntry{}
	for rows.Next() {
		e, err := scanMemory(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: listing memory: %w", err)
		}
		out = append(out, *e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: listing memory: %w", err)
	}
	return out, nil
}

// CountMemory returns how many entries the project's memory holds.
func (s *Store) CountMemory(ctx context.Context, projectID string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM memory_entries WHERE project_id = $1`, projectID).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: counting memory: %w", err)
	}
	return n, nil
}

// UpdateMemory stores e's content and updated_at.
func (s *Store) UpdateMemory(ctx context.Context, e *parley.MemoryEntry) error {
	tag, err := s.pool.Exec(ctx, `UPDATE memory_entries SET content = $1, updated_at = $2 WHERE id = $3 AND project_id = $4`,
		e.Content, e.UpdatedAt.UTC(), e.ID, e.ProjectID)
	if err != nil {
		return fmt.Errorf("postgres: updating memory: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("memory entry", e.ID)
	}
	return nil
}

// DeleteMemory deletes the project's entry.
func (s *Store) DeleteMemory(ctx context.Context, projectID, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM memory_entries WHERE id = $1 AND project_id = $2`, id, projectID)
	if err != nil {
		return fmt.Errorf("postgres: deleting memory: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("memory entry", id)
	}
	return nil
}

// encodePolicy is a project's tool policy as stored: a JSON object, or "" for none.
func encodePolicy(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}
