package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	parley "github.com/parleyhq/parley"
)

const fileCols = `id, owner, COALESCE(session_id, ''), name, size, sha256, media_type, created_at`

func scanFile(r pgx.Row) (*parley.File, error) {
	var f parley.File
	if err := r.Scan(&f.ID, &f.Owner, &f.SessionID, &f.Name, &f.Size, &f.SHA256, &f.MediaType, &f.CreatedAt); err != nil {
		return nil, err
	}
	f.CreatedAt = f.CreatedAt.UTC()
	return &f, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateFile stores f within the owner's quota. A transaction-scoped advisory lock on the owner
// serializes the quota check and insert of one owner's concurrent uploads, on every instance.
func (s *Store) CreateFile(ctx context.Context, f *parley.File, quota int64) error {
	if f.ID == "" || f.Owner == "" || f.SHA256 == "" || f.CreatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "file: id, owner, sha256 and created_at are required")
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if quota > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('parley-files:' || $1, 0))`, f.Owner); err != nil {
				return fmt.Errorf("postgres: locking storage use: %w", err)
			}
			var used int64
			if err := tx.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0)::bigint FROM files WHERE owner = $1`, f.Owner).Scan(&used); err != nil {
				return fmt.Errorf("postgres: reading storage use: %w", err)
			}
			if used+f.Size > quota {
				return parley.QuotaExceeded(used, quota)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO files (id, owner, session_id, name, size, sha256, media_type, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			f.ID, f.Owner, nullString(f.SessionID), f.Name, f.Size, f.SHA256, f.MediaType, f.CreatedAt.UTC())
		if isFKViolation(err) {
			return notFound("session", f.SessionID)
		}
		if err != nil {
			return fmt.Errorf("postgres: storing file: %w", err)
		}
		return nil
	})
}

// GetFile returns the file with id.
func (s *Store) GetFile(ctx context.Context, id string) (*parley.File, error) {
	f, err := scanFile(s.pool.QueryRow(ctx, `SELECT `+fileCols+` FROM files WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("file", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading file: %w", err)
	}
	return f, nil
}

// ListSessionFiles returns a page of the session's files, oldest first (ids are time-ordered).
func (s *Store) ListSessionFiles(ctx context.Context, sessionID, afterID string, limit int) ([]parley.File, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	rows, err := s.pool.Query(ctx, `SELECT `+fileCols+` FROM files WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3`, sessionID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing files: %w", err)
	}
	defer rows.Close()
	var out []parley.File
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: listing files: %w", err)
		}
		out = append(out, *f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: listing files: %w", err)
	}
	return out, nil
}

// AttachFile puts a file without a session into sessionID.
func (s *Store) AttachFile(ctx context.Context, id, sessionID string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1`, sessionID).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return notFound("session", sessionID)
		} else if err != nil {
			return fmt.Errorf("postgres: attaching file: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT 1 FROM files WHERE id = $1`, id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return notFound("file", id)
		} else if err != nil {
			return fmt.Errorf("postgres: attaching file: %w", err)
		}
		_, err := tx.Exec(ctx, `UPDATE files SET session_id = $1 WHERE id = $2 AND session_id IS NULL`, sessionID, id)
		if isFKViolation(err) { // the session was deleted meanwhile
			return notFound("session", sessionID)
		}
		if err != nil {
			return fmt.Errorf("postgres: attaching file: %w", err)
		}
		return nil
	})
}

// DeleteFile deletes the file's row.
func (s *Store) DeleteFile(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM files WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("postgres: deleting file: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("file", id)
	}
	return nil
}

// FileBytes totals owner's file sizes.
func (s *Store) FileBytes(ctx context.Context, owner string) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0)::bigint FROM files WHERE owner = $1`, owner).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: reading storage use: %w", err)
	}
	return n, nil
}

// BlobRefs counts the files of blob sha256.
func (s *Store) BlobRefs(ctx context.Context, sha256 string) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM files WHERE sha256 = $1`, sha256).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: counting blob references: %w", err)
	}
	return n, nil
}

// lineageQuery walks up from session $1 along forked_from (same owner, at most $3 steps, no
// further once $2 is reached) and tells whether $2 is on the way.
const lineageQuery = `WITH RECURSIVE lineage (id, owner, forked_from, depth) AS (
	SELECT id, owner, forked_from, 0 FROM sessions WHERE id = $1
	UNION ALL
	SELECT s.id, s.owner, s.forked_from, l.depth + 1 FROM lineage l JOIN sessions s ON s.id = l.forked_from
	WHERE l.id <> $2 AND l.depth < $3 AND s.owner = l.owner
) SELECT EXISTS (SELECT 1 FROM lineage WHERE id = $2)`

// InLineage reports whether ancestorID is sessionID or one of its ancestors, in one query.
func (s *Store) InLineage(ctx context.Context, sessionID, ancestorID string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, lineageQuery, sessionID, ancestorID, parley.MaxLineage).Scan(&ok); err != nil {
		return false, fmt.Errorf("postgres: walking the fork lineage: %w", err)
	}
	return ok, nil
}
