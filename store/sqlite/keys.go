package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	parley "github.com/parleyhq/parley"
)

const keyCols = `id, user_id, name, prefix, hash, admin, guest, created_at, expires_at, revoked_at, last_used_at`

func checkKey(k *parley.APIKey) error {
	if k.ID == "" || k.User == "" || len(k.Hash) == 0 || k.CreatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "api key: id, user, hash and created_at are required")
	}
	return nil
}

func optMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return micros(*t)
}

func optTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// CreateAPIKey stores k.
func (s *Store) CreateAPIKey(ctx context.Context, k *parley.APIKey) error {
	if err := checkKey(k); err != nil {
		return err
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM api_keys WHERE hash = ? OR id = ?`, k.Hash, k.ID).Scan(&n); err != nil {
			return fmt.Errorf("sqlite: checking api key: %w", err)
		}
		if n > 0 {
			return parley.Errorf(parley.ECConflict, "api key: a key with this id or secret exists")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.User, k.Name, k.Prefix, k.Hash, k.Admin, k.Guest, micros(k.CreatedAt),
			optMicros(k.ExpiresAt), optMicros(k.RevokedAt), optMicros(k.LastUsedAt))
		if err != nil {
			return fmt.Errorf("sqlite: creating api key: %w", err)
		}
		return nil
	})
}

func scanKey(r scanner) (*parley.APIKey, error) {
	var k parley.APIKey
	var created int64
	var expires, revoked, used sql.NullInt64
	if err := r.Scan(&k.ID, &k.User, &k.Name, &k.Prefix, &k.Hash, &k.Admin, &k.Guest, &created, &expires, &revoked, &used); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.ExpiresAt, k.RevokedAt, k.LastUsedAt = optTime(expires), optTime(revoked), optTime(used)
	return &k, nil
}

// APIKeyByHash returns the key whose secret hashes to hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (*parley.APIKey, error) {
	k, err := scanKey(s.queryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("api key: %w", parley.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading api key: %w", err)
	}
	return k, nil
}

// ListAPIKeys returns user's keys (everyone's for ""), guest tokens left out, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, user string, limit int) ([]parley.APIKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE guest = 0 AND (? = '' OR user_id = ?)
		ORDER BY created_at, id LIMIT ?`, user, user, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing api keys: %w", err)
	}
	defer rows.Close()
	var out []parley.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: listing api keys: %w", err)
		}
		out = append(out, *k)
	}
	return out, rows.Err()
}

// RevokeAPIKey marks the key revoked.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, now time.Time) (*parley.APIKey, error) {
	var k *parley.APIKey
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, micros(now), id); err != nil {
			return fmt.Errorf("sqlite: revoking api key: %w", err)
		}
		var err error
		k, err = scanKey(tx.QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("api key", id)
		}
		return err
	})
	return k, err
}

// TouchAPIKey sets the key's last use.
func (s *Store) TouchAPIKey(ctx context.Context, id string, now time.Time) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE id = ?`, micros(now), id)
		if err != nil {
			return fmt.Errorf("sqlite: touching api key: %w", err)
		}
		return nil
	})
}

// DeleteExpiredAPIKeys deletes the keys that expired before now.
func (s *Store) DeleteExpiredAPIKeys(ctx context.Context, now time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM api_keys WHERE expires_at IS NOT NULL AND expires_at < ?`, micros(now))
		if err != nil {
			return fmt.Errorf("sqlite: deleting expired api keys: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}
