package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// ReserveEventSeqs reserves n numbers of the session's event stream and returns the first.
func (s *Store) ReserveEventSeqs(ctx context.Context, sessionID string, n int64) (int64, error) {
	if n <= 0 {
		return 0, parley.Errorf(parley.ECInvalid, "events: must reserve at least one number")
	}
	var first int64
	err := s.writeFor(ctx, sessionID, func(ctx context.Context, tx pgx.Tx) (err error) {
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
	return s.writeFor(ctx, sessionID, func(ctx context.Context, tx pgx.Tx) error {
		return releaseEventSeqs(ctx, tx, sessionID, limit, last)
	})
}

const releaseSQL = `UPDATE sessions SET event_seq = $1 WHERE id = $2 AND event_seq = $3`

func releaseEventSeqs(ctx context.Context, tx pgx.Tx, sessionID string, limit, last int64) error {
	if _, err := tx.Exec(ctx, releaseSQL, last, sessionID, limit); err != nil {
		return fmt.Errorf("postgres: releasing event numbers: %w", err)
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
		return fmt.Errorf("postgres: %w", err)
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
	p := &eventsPart{sessionID: sessionID, at: at, evs: evs, batches: rowcodec.EventBatches(evs, nil)}
	fn := func(ctx context.Context, tx pgx.Tx) error { return p.run(ctx, tx) }
	if len(p.batches) == 1 { // one row: merged with its batch's other rows (endMerged)
		return s.w.DoMerge(ctx, sessionID, p, fn)
	}
	return s.writeFor(ctx, sessionID, fn)
}

// eventsPart is one write of a run's events (AppendEncodedEvents): evs, joined into batches.
type eventsPart struct {
	sessionID string
	at        time.Time
	evs       []parley.EncodedEvent
	batches   []rowcodec.EventBatch
}

// run is p's write on its own.
func (p *eventsPart) run(ctx context.Context, tx pgx.Tx) error {
	return storeEvents(ctx, tx, p.sessionID, p.at, p.evs, p.batches)
}

// storeEvents is appendEvents with its errors as the store reports them.
func storeEvents(ctx context.Context, tx pgx.Tx, sessionID string, at time.Time, evs []parley.EncodedEvent, batches []rowcodec.EventBatch) error {
	return eventsError(appendEvents(ctx, tx, sessionID, at, evs, batches), sessionID)
}

// eventsError is err, of a write of events, as the store reports it.
func eventsError(err error, sessionID string) error {
	if isFKViolation(err) { // no such session
		return notFound("session", sessionID)
	}
	if err != nil {
		return fmt.Errorf("postgres: storing events: %w", err)
	}
	return nil
}

// insertNewEventBatch inserts a row of events unless a row stored overlaps its numbers (then it
// inserts nothing): the usual write needs no read of what is stored before it.
const insertNewEventBatch = `INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at)
	SELECT $1::text, $2::bigint, $3::bigint, $4::bytea, $5::timestamptz WHERE NOT EXISTS
	(SELECT 1 FROM event_batches WHERE session_id = $1::text AND first_seq <= $3::bigint AND last_seq >= $2::bigint)`

// queueNewEventBatches queues the insert of each of batches unless a stored row overlaps it
// (insertNewEventBatch).
func queueNewEventBatches(b *pgx.Batch, sessionID string, at time.Time, batches []rowcodec.EventBatch) {
	for _, eb := range batches {
		b.Queue(insertNewEventBatch, sessionID, eb.First, eb.Last, eb.Data, at.UTC())
	}
}

// readNewEventBatches reads the results of n inserts queueNewEventBatches queued: overlap is
// whether one of them inserted nothing.
func readNewEventBatches(br pgx.BatchResults, n int) (overlap bool, err error) {
	for range n {
		tag, err := br.Exec()
		if err != nil {
			return false, err
		}
		overlap = overlap || tag.RowsAffected() == 0
	}
	return overlap, nil
}

// appendEvents stores evs, joined into batches (rowcodec.EventBatches(evs, nil)), in one round
// trip: each row is inserted unless a row already stored overlaps it. If one did (a write run
// again), the rest of evs is stored around what is stored (appendAround).
func appendEvents(ctx context.Context, tx pgx.Tx, sessionID string, at time.Time, evs []parley.EncodedEvent, batches []rowcodec.EventBatch) error {
	b := &pgx.Batch{}
	queueNewEventBatches(b, sessionID, at, batches)
	br := tx.SendBatch(ctx, b)
	overlap, err := readNewEventBatches(br, len(batches))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil || !overlap {
		return err
	}
	return appendAround(ctx, tx, sessionID, at, evs)
}

// appendAround stores those of evs that no stored row holds, in rows of consecutive numbers.
func appendAround(ctx context.Context, tx pgx.Tx, sessionID string, at time.Time, evs []parley.EncodedEvent) error {
	rows, err := tx.Query(ctx, `SELECT first_seq, last_seq FROM event_batches WHERE session_id = $1 AND first_seq <= $2 AND last_seq >= $3`,
		sessionID, evs[len(evs)-1].Seq, evs[0].Seq)
	if err != nil {
		return err
	}
	var stored [][2]int64
	for rows.Next() {
		var r [2]int64
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			rows.Close()
			return err
		}
		stored = append(stored, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, b := range rowcodec.EventBatches(evs, rowcodec.RangesCover(stored)) {
		if _, err := tx.Exec(ctx, `INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at) VALUES ($1, $2, $3, $4, $5)`,
			sessionID, b.First, b.Last, b.Data, at.UTC()); err != nil {
			return err
		}
	}
	return nil
}

// ListEvents returns up to limit events of the session with Seq > after, in order.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]parley.Event, error) {
	if limit <= 0 {
		limit = 256
	}
	// Each row holds one event at least: limit rows are enough.
	rows, err := s.pool.Query(ctx, `SELECT data FROM event_batches WHERE session_id = $1 AND last_seq > $2 ORDER BY first_seq LIMIT $3`,
		sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing events: %w", err)
	}
	defer rows.Close()
	var out []parley.Event
	for rows.Next() && len(out) < limit {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("postgres: reading events: %w", err)
		}
		if out, err = rowcodec.DecodeEventBatch(out, data, after, limit); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: listing events: %w", err)
	}
	return out, nil
}

// DeleteEventsBefore deletes the events stored before t.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	// Rows hold consecutive numbers: each held last-first+1 events.
	var n int64
	err := s.pool.QueryRow(ctx, `WITH gone AS (DELETE FROM event_batches WHERE created_at < $1 RETURNING last_seq - first_seq + 1 AS n)
		SELECT COALESCE(SUM(n), 0)::bigint FROM gone`, t.UTC()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: deleting events: %w", err)
	}
	return n, nil
}
