package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// ReserveEventSeqs reserves n numbers of the session's event stream and returns the first.
func (s *Store) ReserveEventSeqs(ctx context.Context, sessionID string, n int64) (int64, error) {
	if n <= 0 {
		return 0, parley.Errorf(parley.ECInvalid, "events: must reserve at least one number")
	}
	var first int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		first, err = s.reserveEventSeqs(ctx, tx, sessionID, n)
		return err
	})
	return first, err
}

func (s *Store) reserveEventSeqs(ctx context.Context, tx *sql.Tx, sessionID string, n int64) (int64, error) {
	c := s.cached(tx)
	var last int64
	err := c.QueryRowContext(ctx, `UPDATE sessions SET event_seq = event_seq + ? WHERE id = ? RETURNING event_seq`, n, sessionID).Scan(&last)
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
		return s.releaseEventSeqs(ctx, tx, sessionID, limit, last)
	})
}

func (s *Store) releaseEventSeqs(ctx context.Context, tx *sql.Tx, sessionID string, limit, last int64) error {
	c := s.cached(tx)
	_, err := c.ExecContext(ctx, `UPDATE sessions SET event_seq = ? WHERE id = ? AND event_seq = ?`, last, sessionID, limit)
	if err != nil {
		return fmt.Errorf("sqlite: releasing event numbers: %w", err)
	}
	return nil
}

// AppendEvents stores evs, a batch per row; events already stored are skipped.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, at time.Time, evs []parley.Event) error {
	if len(evs) == 0 {
		return nil
	}
	evs, err := rowcodec.CheckEvents(evs)
	if err != nil {
		return err
	}
	enc, err := rowcodec.EncodeEvents(evs)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return s.appendEncoded(ctx, sessionID, at, enc)
}

var _ parley.EncodedEventAppender = (*Store)(nil)

// AppendEncodedEvents stores evs, their JSON as it is, a batch per row; events already stored
// are skipped.
func (s *Store) AppendEncodedEvents(ctx context.Context, sessionID string, at time.Time, evs []parley.EncodedEvent) error {
	if len(evs) == 0 {
		return nil
	}
	evs, err := rowcodec.CheckEncoded(evs, true)
	if err != nil {
		return err
	}
	return s.appendEncoded(ctx, sessionID, at, evs)
}

func (s *Store) appendEncoded(ctx context.Context, sessionID string, at time.Time, evs []parley.EncodedEvent) error {
	// Joined before the transaction; again inside it only if a retried write overlaps.
	p := &eventsPart{s: s, sessionID: sessionID, at: at, evs: evs, batches: rowcodec.CompactEventBatches(evs, nil)}
	if len(p.batches) == 1 { // one row: merged with its batch's other rows (Store.merge)
		return s.w.DoMerge(ctx, sessionID, p, p.run)
	}
	return s.write(ctx, p.run)
}

// eventsPart is one write of a run's events (AppendEncodedEvents): evs, joined into batches.
type eventsPart struct {
	s         *Store
	sessionID string
	at        time.Time
	evs       []parley.EncodedEvent
	batches   []rowcodec.EventBatch
}

// run is p's write on its own.
func (p *eventsPart) run(ctx context.Context, tx *sql.Tx) error {
	return p.s.appendEvents(ctx, tx, p.sessionID, p.at, p.evs, p.batches)
}

// appendEvents is AppendEvents' work inside a write transaction. A session that does not exist
// fails the insert (its foreign key): no read of the session first.
func (s *Store) appendEvents(ctx context.Context, tx *sql.Tx, sessionID string, at time.Time, evs []parley.EncodedEvent, batches []rowcodec.EventBatch) error {
	c := s.cached(tx)
	// The rows already stored that these events overlap (a retried write).
	rows, err := c.QueryContext(ctx, `SELECT first_seq, last_seq FROM event_batches WHERE session_id = ? AND first_seq <= ? AND last_seq >= ?`,
		sessionID, evs[len(evs)-1].Seq, evs[0].Seq)
	if err != nil {
		return fmt.Errorf("sqlite: storing events: %w", err)
	}
	var stored [][2]int64
	for rows.Next() {
		var r [2]int64
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: storing events: %w", err)
		}
		stored = append(stored, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: storing events: %w", err)
	}
	if len(stored) > 0 {
		batches = rowcodec.CompactEventBatches(evs, rowcodec.RangesCover(stored))
	}
	return insertEventBatches(ctx, c, sessionID, at, batches)
}

func insertEventBatches(ctx context.Context, c cachedTx, sessionID string, at time.Time, batches []rowcodec.EventBatch) error {
	for _, b := range batches {
		if _, err := c.ExecContext(ctx, `INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at) VALUES (?, ?, ?, ?, ?)`,
			sessionID, b.First, b.Last, b.Data, micros(at)); err != nil {
			return eventsError(err, sessionID)
		}
	}
	return nil
}

func eventsError(err error, sessionID string) error {
	if strings.Contains(err.Error(), "FOREIGN KEY") {
		return notFound("session", sessionID)
	}
	return fmt.Errorf("sqlite: storing events: %w", err)
}

// ListEvents returns up to limit events of the session with Seq > after, in order.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]parley.Event, error) {
	if limit <= 0 {
		limit = 256
	}
	// Each row holds one event at least: limit rows are enough.
	rows, err := s.query(ctx, `SELECT data FROM event_batches WHERE session_id = ? AND last_seq > ? ORDER BY first_seq LIMIT ?`,
		sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing events: %w", err)
	}
	defer rows.Close()
	var out []parley.Event
	for rows.Next() && len(out) < limit {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("sqlite: reading events: %w", err)
		}
		if out, err = rowcodec.DecodeEventBatch(out, data, after, limit); err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
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
		// Rows hold consecutive numbers: each held last-first+1 events.
		err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(last_seq - first_seq + 1), 0) FROM event_batches WHERE created_at < ?`, micros(t)).Scan(&n)
		if err != nil {
			return fmt.Errorf("sqlite: deleting events: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM event_batches WHERE created_at < ?`, micros(t)); err != nil {
			return fmt.Errorf("sqlite: deleting events: %w", err)
		}
		return nil
	})
	return n, err
}
