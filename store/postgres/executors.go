package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	parley "github.com/parleyhq/parley"
)

// AddArtifactVersion stores a as the next version of its artifact. Two writers racing for the
// same version: the loser takes the next one.
func (s *Store) AddArtifactVersion(ctx context.Context, a *parley.Artifact) error {
	for attempt := 0; ; attempt++ {
		var v int
		err := s.pool.QueryRow(ctx, `WITH prev AS (SELECT session_id, version FROM artifacts WHERE id = $1 ORDER BY version DESC LIMIT 1)
			INSERT INTO artifacts (id, version, session_id, run_id, type, title, language, content, created_at)
			SELECT $1, COALESCE((SELECT version FROM prev), 0) + 1, $2, $3, $4, $5, $6, $7, $8
			WHERE NOT EXISTS (SELECT 1 FROM prev WHERE session_id <> $2)
			RETURNING version`,
			a.ID, a.SessionID, a.RunID, string(a.Type), a.Title, a.Language, a.Content, a.CreatedAt).Scan(&v)
		var pe *pgconn.PgError
		switch {
		case err == nil:
			a.Version = v
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return notFound("artifact", a.ID) // another session's
		case errors.As(err, &pe) && pe.Code == "23503":
			return notFound("session", a.SessionID)
		case errors.As(err, &pe) && pe.Code == "23505" && attempt < 50:
			continue
		default:
			return fmt.Errorf("postgres: storing artifact: %w", err)
		}
	}
}

const artifactCols = `id, version, session_id, run_id, type, title, language, content, created_at`

func scanArtifact(sc pgx.Row) (*parley.Artifact, error) {
	var a parley.Artifact
	if err := sc.Scan(&a.ID, &a.Version, &a.SessionID, &a.RunID, &a.Type, &a.Title, &a.Language, &a.Content, &a.CreatedAt); err != nil {
		return nil, err
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return &a, nil
}

// GetArtifact returns a version of an artifact (0: the latest).
func (s *Store) GetArtifact(ctx context.Context, id string, version int) (*parley.Artifact, error) {
	a, err := scanArtifact(s.pool.QueryRow(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE id = $1 AND ($2 = 0 OR version = $2)
		ORDER BY version DESC LIMIT 1`, id, version))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("artifact", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading artifact: %w", err)
	}
	return a, nil
}

// ListArtifacts returns the latest version of each artifact of the session.
func (s *Store) ListArtifacts(ctx context.Context, sessionID string) ([]parley.Artifact, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (id) `+artifactCols+` FROM artifacts WHERE session_id = $1
		ORDER BY id, version DESC`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing artifacts: %w", err)
	}
	defer rows.Close()
	out := []parley.Artifact{}
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: listing artifacts: %w", err)
		}
		out = append(out, *a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: listing artifacts: %w", err)
	}
	return out, nil
}

// AddSearchCost stores the cost of one web search call.
func (s *Store) AddSearchCost(ctx context.Context, c *parley.SearchCost) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO search_costs (id, owner, session_id, run_id, backend, query, results, credits, dollars, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, c.ID, c.Owner, c.SessionID, c.RunID, c.Backend, c.Query, c.Results, c.Credits, c.Dollars, c.CreatedAt)
	if err != nil {
		return fmt.Errorf("postgres: storing search cost: %w", err)
	}
	return nil
}

// OwnerSearchUsage totals owner's search costs per backend.
func (s *Store) OwnerSearchUsage(ctx context.Context, owner string) (parley.SearchUsage, error) {
	u := parley.SearchUsage{}
	rows, err := s.pool.Query(ctx, `SELECT backend, COUNT(*), SUM(credits), SUM(dollars) FROM search_costs WHERE owner = $1 GROUP BY backend ORDER BY backend`, owner)
	if err != nil {
		return u, fmt.Errorf("postgres: totalling search costs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name string
			b    parley.BackendUsage
		)
		if err := rows.Scan(&name, &b.Calls, &b.Credits, &b.Dollars); err != nil {
			return u, fmt.Errorf("postgres: totalling search costs: %w", err)
		}
		if u.ByBackend == nil {
			u.ByBackend = map[string]parley.BackendUsage{}
		}
		u.ByBackend[name] = b
		u.Calls += b.Calls
		u.Credits += b.Credits
		u.Dollars += b.Dollars
	}
	if err := rows.Err(); err != nil {
		return u, fmt.Errorf("postgres: totalling search costs: %w", err)
	}
	return u, nil
}
