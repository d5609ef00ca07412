package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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

func projectExists(ctx context.Context, tx *sql.Tx, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM projects WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("project", id)
	}
	if err != nil {
		return fmt.Errorf("sqlite: reading project: %w", err)
	}
	return nil
}

// PutTodos replaces the session's todo list.
func (s *Store) PutTodos(ctx context.Context, sessionID string, todos []parley.Todo, at time.Time) error {
	if todos == nil {
		todos = []parley.Todo{}
	}
	b, err := json.Marshal(todos)
	if err != nil {
		return fmt.Errorf("sqlite: encoding todos: %w", err)
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, sessionID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: storing todos: %w", err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO todos (session_id, items, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (session_id) DO UPDATE SET items = excluded.items, updated_at = excluded.updated_at`,
			sessionID, string(b), micros(at))
		if err != nil {
			return fmt.Errorf("sqlite: storing todos: %w", err)
		}
		return nil
	})
}

// Todos returns the session's todo list.
func (s *Store) Todos(ctx context.Context, sessionID string) ([]parley.Todo, error) {
	var items sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT t.items FROM sessions s LEFT JOIN todos t ON t.session_id = s.id WHERE s.id = ?`,
		sessionID).Scan(&items)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("session", sessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading todos: %w", err)
	}
	out := []parley.Todo{}
	if items.Valid {
		if err := json.Unmarshal([]byte(items.String), &out); err != nil {
			return nil, fmt.Errorf("sqlite: decoding todos: %w", err)
		}
	}
	return out, nil
}

const projectCols = `id, owner, name, instructions, tool_policy, created_at, updated_at`

func scanProject(r scanner) (*parley.Project, error) {
	var (
		p        parley.Project
		cre, upd int64
		policy   string
	)
	if err := r.Scan(&p.ID, &p.Owner, &p.Name, &p.Instructions, &policy, &cre, &upd); err != nil {
		return nil, err
	}
	if err := decodePolicy(policy, &p.ToolPolicy); err != nil {
		return nil, err
	}
	p.CreatedAt, p.UpdatedAt = fromMicros(cre), fromMicros(upd)
	return &p, nil
}

// CreateProject stores p.
func (s *Store) CreateProject(ctx context.Context, p *parley.Project) error {
	if p.ID == "" || p.Owner == "" || p.CreatedAt.IsZero() || p.UpdatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "project: id, owner, created_at and updated_at are required")
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO projects (`+projectCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.Owner, p.Name, p.Instructions, encodePolicy(p.ToolPolicy), micros(p.CreatedAt), micros(p.UpdatedAt))
		if err != nil {
			return fmt.Errorf("sqlite: creating project: %w", err)
		}
		return nil
	})
}

// GetProject returns the project with id.
func (s *Store) GetProject(ctx context.Context, id string) (*parley.Project, error) {
	p, err := scanProject(s.queryRow(ctx, `SELECT `+projectCols+` FROM projects WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("project", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading project: %w", err)
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
	q := `SELECT ` + projectCols + ` FROM projects WHERE owner = ?`
	args := []any{owner}
	if pg.Cursor != "" {
		upd, id, err := rowcodec.DecodeCursor(pg.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` AND (updated_at, id) < (?, ?)`
		args = append(args, upd, id)
	}
	q += ` ORDER BY updated_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: listing projects: %w", err)
	}
	defer rows.Close()
	out := []parley.Project{}
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: listing projects: %w", err)
		}
		out = append(out, *p)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: listing projects: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = rowcodec.EncodeCursor(micros(last.UpdatedAt), last.ID)
	}
	return out, next, nil
}

// UpdateProject stores p's name, instructions and updated_at.
func (s *Store) UpdateProject(ctx context.Context, p *parley.Project) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE projects SET name = ?, instructions = ?, tool_policy = ?, updated_at = ? WHERE id = ?`,
			p.Name, p.Instructions, encodePolicy(p.ToolPolicy), micros(p.UpdatedAt), p.ID)
		if err != nil {
			return fmt.Errorf("sqlite: updating project: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("project", p.ID)
		}
		return nil
	})
}

// DeleteProject deletes the project and its memory; its sessions lose their project.
func (s *Store) DeleteProject(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE sessions SET project_id = NULL WHERE project_id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: detaching sessions: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM memory_entries WHERE project_id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: deleting memory: %w", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM projects WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("sqlite: deleting project: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("project", id)
		}
		return nil
	})
}

// SetSessionProject moves the session into the project, or out of any with "".
func (s *Store) SetSessionProject(ctx context.Context, sessionID, projectID string) (*parley.Session, error) {
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if projectID != "" {
			if err := projectExists(ctx, tx, projectID); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET project_id = ? WHERE id = ?`, nullable(projectID), sessionID)
		if err != nil {
			return fmt.Errorf("sqlite: moving session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("session", sessionID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.GetSession(ctx, sessionID)
}

const memoryCols = `id, project_id, content, session_id, created_at, updated_at`

func scanMemory(r scanner) (*parley.MemoryEntry, error) {
	var (
		e        parley.MemoryEntry
		cre, upd int64
	)
	if err := r.Scan(&e.ID, &e.ProjectID, &e.Content, &e.SessionID, &cre, &upd); err != nil {
		return nil, err
	}
	e.CreatedAt, e.UpdatedAt = fromMicros(cre), fromMicros(upd)
	return &e, nil
}

// AddMemory stores e, unless its project holds max entries already.
func (s *Store) AddMemory(ctx context.Context, e *parley.MemoryEntry, max int) error {
	if e.ID == "" || e.ProjectID == "" || e.CreatedAt.IsZero() || e.UpdatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "memory entry: id, project_id, created_at and updated_at are required")
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := projectExists(ctx, tx, e.ProjectID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM memory_entries WHERE project_id = ?`, e.ProjectID).Scan(&n); err != nil {
			return fmt.Errorf("sqlite: counting memory: %w", err)
		}
		if n >= max {
			return parley.Errorf(parley.ECConflict, "the project's memory is full (%d entries): delete entries first", max)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO memory_entries (`+memoryCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
			e.ID, e.ProjectID, e.Content, e.SessionID, micros(e.CreatedAt), micros(e.UpdatedAt))
		if err != nil {
			return fmt.Errorf("sqlite: saving memory: %w", err)
		}
		return nil
	})
}

// ListMemory returns up to limit of the project's entries, newest first.
func (s *Store) ListMemory(ctx context.Context, projectID string, limit int) ([]parley.MemoryEntry, error) {
	if limit <= 0 {
		limit = parley.MaxMemoryEntries
	}
	rows, err := s.query(ctx, `SELECT `+memoryCols+` FROM memory_entries WHERE project_id = ?
		ORDER BY created_at DESC, id DESC LIMIT ?`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing memory: %w", err)
	}
	defer rows.Close()
	out := []parley.MemoryEntry{}
	for rows.Next() {
		e, err := scanMemory(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: listing memory: %w", err)
		}
		out = append(out, *e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: listing memory: %w", err)
	}
	return out, nil
}

// CountMemory returns how many entries the project's memory holds.
func (s *Store) CountMemory(ctx context.Context, projectID string) (int, error) {
	var n int
	if err := s.queryRow(ctx, `SELECT count(*) FROM memory_entries WHERE project_id = ?`, projectID).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: counting memory: %w", err)
	}
	return n, nil
}

// UpdateMemory stores e's content and updated_at.
func (s *Store) UpdateMemory(ctx context.Context, e *parley.MemoryEntry) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE memory_entries SET content = ?, updated_at = ? WHERE id = ? AND project_id = ?`,
			e.Content, micros(e.UpdatedAt), e.ID, e.ProjectID)
		if err != nil {
			return fmt.Errorf("sqlite: updating memory: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("memory entry", e.ID)
		}
		return nil
	})
}

// DeleteMemory deletes the project's entry.
func (s *Store) DeleteMemory(ctx context.Context, projectID, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM memory_entries WHERE id = ? AND project_id = ?`, id, projectID)
		if err != nil {
			return fmt.Errorf("sqlite: deleting memory: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("memory entry", id)
		}
		return nil
	})
}

// encodePolicy is a project's tool policy as stored: a JSON object, or "" for none.
func encodePolicy(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

func decodePolicy(s string, dst *map[string]string) error {
	if s == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(s), dst); err != nil {
		return fmt.Errorf("sqlite: decoding a project's tool policy: %w", err)
	}
	return nil
}
