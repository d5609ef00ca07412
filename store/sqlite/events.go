package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	parley "github.com/parleyhq/parley"
)

// ReserveEventSeqs reserves n numbers of the session's event stream and returns the first.
func (s *Store) ReserveEventSeqs(ctx context.Context, sessionID string, n int64) (int64, error) {
	if n <= 0 {
		return 0, parley.Errorf(parley.ECInvalid, "events: must reserve at least one number")
	}
	var first int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		first, err = reserveEventSeqs(ctx, tx, sessionID, n)
		return err
	})
	return first, err
}

func reserveEventSeqs(ctx context.Context, tx *sql.Tx, sessionID string, n int64) (int64, error) {
	var last int64
	err := tx.QueryRowContext(ctx, `UPDATE sessions SET event_seq = event_seq + ? WHERE id = ? RETURNING event_seq`, n, sessionID).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFound("session", sessionID)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: reserving event numbers: %w", err)
	}
	return last - n + 1, nil
}

// ReleaseEventSeqs gives back the numbers after last if limit is still the last one reserved.
func (s *Store) ReleaseEventSeqs(ctx context.Context, sessionID string, limit, last int64) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return releaseEventSeqs(ctx, tx, sessionID, limit, last)
	})
}

func releaseEventSeqs(ctx context.Context, tx *sql.Tx, sessionID string, limit, last int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE sessions SET event_seq = ? WHERE id = ? AND event_seq = ?`, last, sessionID, limit)
	if err != nil {
		return fmt.Errorf("sqlite: releasing event numbers: %w", err)
	}
	return nil
}

// AppendEvents stores evs; events already stored are skipped.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, at time.Time, evs []parley.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows := make([][]byte, len(evs))
	for i := range evs {
		if evs[i].Seq <= 0 {
			return parley.Errorf(parley.ECInvalid, "events: event %d has no sequence number", i)
		}
		b, err := json.Marshal(&evs[i])
		if err != nil {
			return fmt.Errorf("sqlite: encoding event: %w", err)
		}
		rows[i] = b
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, sessionID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: storing events: %w", err)
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO events (session_id, seq, run_id, type, data, created_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, seq) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("sqlite: storing events: %w", err)
		}
		defer stmt.Close()
		for i, ev := range evs {
			if _, err := stmt.ExecContext(ctx, sessionID, ev.Seq, ev.RunID, string(ev.Type), rows[i], micros(at)); err != nil {
				return fmt.Errorf("sqlite: storing events: %w", err)
			}
		}
		return nil
	})
}

// ListEvents returns up to limit events of the session with Seq > after, in order.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]parley.Event, error) {
	if limit <= 0 {
		limit = 256
	}
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`, sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing events: %w", err)
	}
	defer rows.Close()
	var out []parley.Event
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("sqlite: reading event: %w", err)
		}
		var ev parley.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, fmt.Errorf("sqlite: decoding event: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: listing events: %w", err)
	}
	return out, nil
}

// DeleteEventsBefore deletes the events stored before t.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE created_at < ?`, micros(t))
		if err != nil {
			return fmt.Errorf("sqlite: deleting events: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
