package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	parley "github.com/parleyhq/parley"
)

// ReserveEventSeqs reserves n numbers of the session's event stream and returns the first.
func (s *Store) ReserveEventSeqs(ctx context.Context, sessionID string, n int64) (int64, error) {
	if n <= 0 {
		return 0, parley.Errorf(parley.ECInvalid, "events: must reserve at least one number")
	}
	var first int64
	err := s.write(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		first, err = reserveEventSeqs(ctx, tx, sessionID, n)
		return err
	})
	return first, err
}

func reserveEventSeqs(ctx context.Context, tx pgx.Tx, sessionID string, n int64) (int64, error) {
	var last int64
	err := tx.QueryRow(ctx, `UPDATE sessions SET event_seq = event_seq + $1 WHERE id = $2 RETURNING event_seq`, n, sessionID).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound("session", sessionID)
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: reserving event numbers: %w", err)
	}
	return last - n + 1, nil
}

// ReleaseEventSeqs gives back the numbers after last if limit is still the last one reserved.
func (s *Store) ReleaseEventSeqs(ctx context.Context, sessionID string, limit, last int64) error {
	return s.write(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return releaseEventSeqs(ctx, tx, sessionID, limit, last)
	})
}

func releaseEventSeqs(ctx context.Context, tx pgx.Tx, sessionID string, limit, last int64) error {
	if _, err := tx.Exec(ctx, `UPDATE sessions SET event_seq = $1 WHERE id = $2 AND event_seq = $3`, last, sessionID, limit); err != nil {
		return fmt.Errorf("postgres: releasing event numbers: %w", err)
	}
	return nil
}

// AppendEvents stores evs; events already stored are skipped.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, at time.Time, evs []parley.Event) error {
	if len(evs) == 0 {
		return nil
	}
	var b pgx.Batch
	for i := range evs {
		if evs[i].Seq <= 0 {
			return parley.Errorf(parley.ECInvalid, "events: event %d has no sequence number", i)
		}
		data, err := json.Marshal(&evs[i])
		if err != nil {
			return fmt.Errorf("postgres: encoding event: %w", err)
		}
		b.Queue(`INSERT INTO events (session_id, seq, run_id, type, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (session_id, seq) DO NOTHING`, sessionID, evs[i].Seq, evs[i].RunID, string(evs[i].Type), data, at.UTC())
	}
	return s.write(ctx, func(ctx context.Context, tx pgx.Tx) error {
		err := tx.SendBatch(ctx, &b).Close()
		if isFKViolation(err) { // no such session
			return notFound("session", sessionID)
		}
		if err != nil {
			return fmt.Errorf("postgres: storing events: %w", err)
		}
		return nil
	})
}

// ListEvents returns up to limit events of the session with Seq > after, in order.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]parley.Event, error) {
	if limit <= 0 {
		limit = 256
	}
	rows, err := s.pool.Query(ctx, `SELECT data FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing events: %w", err)
	}
	defer rows.Close()
	var out []parley.Event
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("postgres: reading event: %w", err)
		}
		var ev parley.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("postgres: decoding event: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: listing events: %w", err)
	}
	return out, nil
}

// DeleteEventsBefore deletes the events stored before t.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM events WHERE created_at < $1`, t.UTC())
	if err != nil {
		return 0, fmt.Errorf("postgres: deleting events: %w", err)
	}
	return tag.RowsAffected(), nil
}
