package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	parley "github.com/parleyhq/parley"
)

// AddArtifactVersion stores a as the next version of its artifact.
func (s *Store) AddArtifactVersion(ctx context.Context, a *parley.Artifact) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, a.SessionID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", a.SessionID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: storing artifact: %w", err)
		}
		var v int
		err = tx.QueryRowContext(ctx, `WITH prev AS (SELECT session_id, version FROM artifacts WHERE id = ?1 ORDER BY version DESC LIMIT 1)
			INSERT INTO artifacts (id, version, session_id, run_id, type, title, language, content, created_at)
			SELECT ?1, COALESCE((SELECT version FROM prev), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8
			WHERE NOT EXISTS (SELECT 1 FROM prev WHERE session_id <> ?2)
			RETURNING version`,
			a.ID, a.SessionID, a.RunID, string(a.Type), a.Title, a.Language, a.Content, micros(a.CreatedAt)).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("artifact", a.ID) // another session's
		}
		if err != nil {
			return fmt.Errorf("sqlite: storing artifact: %w", err)
		}
		a.Version = v
		return nil
	})
}

const artifactCols = `id, version, session_id, run_id, type, title, language, content, created_at`

func scanArtifact(sc interface{ Scan(...any) error }) (*parley.Artifact, error) {
	var (
		a  parley.Artifact
		at int64
	)
	if err := sc.Scan(&a.ID, &a.Version, &a.SessionID, &a.RunID, &a.Type, &a.Title, &a.Language, &a.Content, &at); err != nil {
		return nil, err
	}
	a.CreatedAt = fromMicros(at)
	return &a, nil
}

// GetArtifact returns a version of an artifact (0: the latest).
func (s *Store) GetArtifact(ctx context.Context, id string, version int) (*parley.Artifact, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE id = ? AND (? = 0 OR version = ?)
		ORDER BY version DESC LIMIT 1`, id, version, version)
	a, err := scanArtifact(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("artifact", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading artifact: %w", err)
	}
	return a, nil
}

// ListArtifacts returns the latest version of each artifact of the session.
func (s *Store) ListArtifacts(ctx context.Context, sessionID string) ([]parley.Artifact, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+artifactCols+` FROM artifacts a WHERE session_id = ?
		AND version = (SELECT MAX(version) FROM artifacts b WHERE b.id = a.id) ORDER BY id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing artifacts: %w", err)
	}
	defer rows.Close()
	out := []parley.Artifact{}
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: listing artifacts: %w", err)
		}
		out = append(out, *a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: listing artifacts: %w", err)
	}
	return out, nil
}

// AddSearchCost stores the cost of one web search call.
func (s *Store) AddSearchCost(ctx context.Context, c *parley.SearchCost) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO search_costs (id, owner, session_id, run_id, backend, query, results, credits, dollars, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, c.ID, c.Owner, c.SessionID, c.RunID, c.Backend, c.Query, c.Results, c.Credits, c.Dollars, micros(c.CreatedAt))
		if err != nil {
			return fmt.Errorf("sqlite: storing search cost: %w", err)
		}
		return nil
	})
}

// OwnerSearchUsage totals owner's search costs per backend.
func (s *Store) OwnerSearchUsage(ctx context.Context, owner string) (parley.SearchUsage, error) {
	u := parley.SearchUsage{}
	rows, err := s.db.QueryContext(ctx, `SELECT backend, COUNT(*), SUM(credits), SUM(dollars) FROM search_costs WHERE owner = ? GROUP BY backend ORDER BY backend`, owner)
	if err != nil {
		return u, fmt.Errorf("sqlite: totalling search costs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name string
			b    parley.BackendUsage
		)
		if err := rows.Scan(&name, &b.Calls, &b.Credits, &b.Dollars); err != nil {
			return u, fmt.Errorf("sqlite: totalling search costs: %w", err)
		}
		addBackend(&u, name, b)
	}
	if err := rows.Err(); err != nil {
		return u, fmt.Errorf("sqlite: totalling search costs: %w", err)
	}
	return u, nil
}

func addBackend(u *parley.SearchUsage, name string, b parley.BackendUsage) {
	if u.ByBackend == nil {
		u.ByBackend = map[string]parley.BackendUsage{}
	}
	u.ByBackend[name] = b
	u.Calls += b.Calls
	u.Credits += b.Credits
	u.Dollars += b.Dollars
}
