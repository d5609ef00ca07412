package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	parley "github.com/parleyhq/parley"
)

const fileCols = `id, owner, session_id, name, size, sha256, media_type, created_at`

func scanFile(r scanner) (*parley.File, error) {
	var (
		f       parley.File
		sess    sql.NullString
		created int64
	)
	if err := r.Scan(&f.ID, &f.Owner, &sess, &f.Name, &f.Size, &f.SHA256, &f.MediaType, &created); err != nil {
		return nil, err
	}
	f.SessionID = sess.String
	f.CreatedAt = fromMicros(created)
	return &f, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateFile stores f within the owner's quota. The write lock serializes every write, so the
// quota check and the insert see no other owner's upload in between.
func (s *Store) CreateFile(ctx context.Context, f *parley.File, quota int64) error {
	if f.ID == "" || f.Owner == "" || f.SHA256 == "" || f.CreatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "file: id, owner, sha256 and created_at are required")
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if quota > 0 {
			var used int64
			if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM files WHERE owner = ?`, f.Owner).Scan(&used); err != nil {
				return fmt.Errorf("sqlite: reading storage use: %w", err)
			}
			if used+f.Size > quota {
				return parley.QuotaExceeded(used, quota)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO files (`+fileCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			f.ID, f.Owner, nullString(f.SessionID), f.Name, f.Size, f.SHA256, f.MediaType, micros(f.CreatedAt))
		if err != nil {
			if strings.Contains(err.Error(), "FOREIGN KEY") {
				return notFound("session", f.SessionID)
			}
			return fmt.Errorf("sqlite: storing file: %w", err)
		}
		return nil
	})
}

// GetFile returns the file with id.
func (s *Store) GetFile(ctx context.Context, id string) (*parley.File, error) {
	f, err := scanFile(s.queryRow(ctx, `SELECT `+fileCols+` FROM files WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("file", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading file: %w", err)
	}
	return f, nil
}

// ListSessionFiles returns a page of the session's files, oldest first (ids are time-ordered).
func (s *Store) ListSessionFiles(ctx context.Context, sessionID, afterID string, limit int) ([]parley.File, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+fileCols+` FROM files WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?`, sessionID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing files: %w", err)
	}
	defer rows.Close()
	var out []parley.File
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: listing files: %w", err)
		}
		out = append(out, *f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: listing files: %w", err)
	}
	return out, nil
}

// AttachFile puts a file without a session into sessionID.
func (s *Store) AttachFile(ctx context.Context, id, sessionID string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, sessionID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return notFound("session", sessionID)
		} else if err != nil {
			return fmt.Errorf("sqlite: attaching file: %w", err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM files WHERE id = ?`, id).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return notFound("file", id)
		} else if err != nil {
			return fmt.Errorf("sqlite: attaching file: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE files SET session_id = ? WHERE id = ? AND session_id IS NULL`, sessionID, id); err != nil {
			return fmt.Errorf("sqlite: attaching file: %w", err)
		}
		return nil
	})
}

// DeleteFile deletes the file's row.
func (s *Store) DeleteFile(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM files WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("sqlite: deleting file: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("file", id)
		}
		return nil
	})
}

// FileBytes totals owner's file sizes.
func (s *Store) FileBytes(ctx context.Context, owner string) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM files WHERE owner = ?`, owner).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: reading storage use: %w", err)
	}
	return n, nil
}

// BlobRefs counts the files of blob sha256.
func (s *Store) BlobRefs(ctx context.Context, sha256 string) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM files WHERE sha256 = ?`, sha256).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: counting blob references: %w", err)
	}
	return n, nil
}

// lineageQuery walks up from session ?1 along forked_from (same owner, at most ?3 steps, no
// further once ?2 is reached) and tells whether ?2 is on the way.
const lineageQuery = `WITH RECURSIVE lineage (id, owner, forked_from, depth) AS (
	SELECT id, owner, forked_from, 0 FROM sessions WHERE id = ?1
	UNION ALL
	SELECT s.id, s.owner, s.forked_from, l.depth + 1 FROM lineage l JOIN sessions s ON s.id = l.forked_from
	WHERE l.id <> ?2 AND l.depth < ?3 AND s.owner = l.owner
) SELECT EXISTS (SELECT 1 FROM lineage WHERE id = ?2)`

// InLineage reports whether ancestorID is sessionID or one of its ancestors, in one query.
func (s *Store) InLineage(ctx context.Context, sessionID, ancestorID string) (bool, error) {
	var ok bool
	if err := s.queryRow(ctx, lineageQuery, sessionID, ancestorID, parley.MaxLineage).Scan(&ok); err != nil {
		return false, fmt.Errorf("sqlite: walking the fork lineage: %w", err)
	}
	return ok, nil
}
