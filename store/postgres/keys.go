package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	parley "github.com/parleyhq/parley"
)

const keyCols = `id, user_id, name, prefix, hash, admin, guest, created_at, expires_at, revoked_at, last_used_at`

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// CreateAPIKey stores k.
func (s *Store) CreateAPIKey(ctx context.Context, k *parley.APIKey) error {
	if k.ID == "" || k.User == "" || len(k.Hash) == 0 || k.CreatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "api key: id, user, hash and created_at are required")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		k.ID, k.User, k.Name, k.Prefix, k.Hash, k.Admin, k.Guest, k.CreatedAt.UTC(), utcPtr(k.ExpiresAt), utcPtr(k.RevokedAt), utcPtr(k.LastUsedAt))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return parley.Errorf(parley.ECConflict, "api key: a key with this id or secret exists")
	}
	if err != nil {
		return fmt.Errorf("postgres: creating api key: %w", err)
	}
	return nil
}

func scanKey(r pgx.Row) (*parley.APIKey, error) {
	var k parley.APIKey
	if err := r.Scan(&k.ID, &k.User, &k.Name, &k.Prefix, &k.Hash, &k.Admin, &k.Guest, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt); err != nil {
		return nil, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.ExpiresAt, k.RevokedAt, k.LastUsedAt = utcPtr(k.ExpiresAt), utcPtr(k.RevokedAt), utcPtr(k.LastUsedAt)
	return &k, nil
}

// APIKeyByHash returns the key whose secret hashes to hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (*parley.APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("api key: %w", parley.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading api key: %w", err)
	}
	return k, nil
}

// ListAPIKeys returns user's keys (everyone's for ""), guest tokens left out, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, user string, limit int) ([]parley.APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE NOT guest AND ($1 = '' OR user_id = $1)
		ORDER BY created_at, id LIMIT $2`, user, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing api keys: %w", err)
	}
	defer rows.Close()
	var out []parley.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: listing api keys: %w", err)
		}
		out = append(out, *k)
	}
	return out, rows.Err()
}

// RevokeAPIKey marks the key revoked.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, now time.Time) (*parley.APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING `+keyCols, id, now.UTC()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("api key", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: revoking api key: %w", err)
	}
	return k, nil
}

// TouchAPIKey sets the key's last use.
func (s *Store) TouchAPIKey(ctx context.Context, id string, now time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $2 WHERE id = $1`, id, now.UTC()); err != nil {
		return fmt.Errorf("postgres: touching api key: %w", err)
	}
	return nil
}

// DeleteExpiredAPIKeys deletes the keys that expired before now.
func (s *Store) DeleteExpiredAPIKeys(ctx context.Context, now time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM api_keys WHERE expires_at < $1`, now.UTC())
	if err != nil {
		return 0, fmt.Errorf("postgres: deleting expired api keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
