package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

const runCols = `id, session_id, owner, model, selected_tools, state, finish, instance, lease_until, attempts, first_seq, created_at, updated_at`

// CreateRun stores r as running; a session with a running run gives ECConflict.
func (s *Store) CreateRun(ctx context.Context, r *parley.RunRecord) error {
	if err := checkRun(r); err != nil {
		return err
	}
	tools, err := encodeTools(r.SelectedTools)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.createRun(ctx, tx, r, tools)
	})
	if err != nil {
		return err
	}
	r.State, r.UpdatedAt = parley.RunStateRunning, r.CreatedAt
	return nil
}

func checkRun(r *parley.RunRecord) error {
	if r.ID == "" || r.SessionID == "" || r.Instance == "" || r.CreatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "run: id, session, instance and created_at are required")
	}
	return nil
}

// createRun is CreateRun's work inside a write transaction. The unique index runs_one_running
// finds a session's running run: no read before the insert.
func (s *Store) createRun(ctx context.Context, tx *sql.Tx, r *parley.RunRecord, tools any) error {
	_, err := s.cached(tx).ExecContext(ctx, `INSERT INTO runs (`+runCols+`) VALUES (?, ?, ?, ?, ?, 'running', '', ?, ?, ?, ?, ?, ?)`,
		r.ID, r.SessionID, r.Owner, r.Model, tools, r.Instance, micros(r.LeaseUntil), r.Attempts, r.FirstSeq, micros(r.CreatedAt), micros(r.CreatedAt))
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "runs.session_id"): // UNIQUE: runs_one_running
		return parley.Errorf(parley.ECConflict, "a run is already active in this session")
	case strings.Contains(err.Error(), "FOREIGN KEY"):
		return notFound("session", r.SessionID)
	}
	return fmt.Errorf("sqlite: creating run: %w", err)
}

// RenewRuns extends the lease of the instance's running runs among ids.
func (s *Store) RenewRuns(ctx context.Context, instance string, ids []string, until time.Time) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var renewed []string
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		renewed = []string{} // run again when the batch is (Optimistic)
		args := []any{micros(until), instance}
		for _, id := range ids {
			args = append(args, id)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE runs SET lease_until = ? WHERE instance = ? AND state = 'running'
			AND id IN (`+placeholders(len(ids))+`) RETURNING id`, args...)
		if err != nil {
			return fmt.Errorf("sqlite: renewing runs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return fmt.Errorf("sqlite: renewing runs: %w", err)
			}
			renewed = append(renewed, id)
		}
		return rows.Err()
	})
	return renewed, err
}

// EndRun marks the run ended if instance still runs it.
func (s *Store) EndRun(ctx context.Context, id, instance, finish string, at time.Time) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.endRun(ctx, tx, id, instance, finish, at)
	})
}

func (s *Store) endRun(ctx context.Context, tx *sql.Tx, id, instance, finish string, at time.Time) error {
	c := s.cached(tx)
	res, err := c.ExecContext(ctx, `UPDATE runs SET state = 'ended', finish = ?, updated_at = ? WHERE id = ? AND instance = ? AND state = 'running'`,
		finish, micros(at), id, instance)
	if err != nil {
		return fmt.Errorf("sqlite: ending run: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return parley.Errorf(parley.ECConflict, "run %s: not running on instance %s", id, instance)
	}
	return nil
}

// DeleteRun deletes a run record.
func (s *Store) DeleteRun(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: deleting run: %w", err)
		}
		return nil
	})
}

// ClaimRuns takes over running runs whose lease ended, and those of orphanedBy created or last
// claimed before now.
func (s *Store) ClaimRuns(ctx context.Context, instance, orphanedBy string, now, until time.Time, limit int) ([]parley.RunRecord, error) {
	if limit <= 0 {
		limit = 10
	}
	var out []parley.RunRecord
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = nil // run again when the batch is (Optimistic)
		rows, err := tx.QueryContext(ctx, `UPDATE runs SET instance = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
			WHERE id IN (SELECT id FROM runs WHERE state = 'running' AND (lease_until < ? OR (instance = ? AND updated_at < ?))
				ORDER BY lease_until LIMIT ?)
			RETURNING `+runCols, instance, micros(until), micros(now), micros(now), orphanedBy, micros(now), limit)
		if err != nil {
			return fmt.Errorf("sqlite: claiming runs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				return err
			}
			out = append(out, *r)
		}
		return rows.Err()
	})
	return out, err
}

// ActiveRun returns the session's running run.
func (s *Store) ActiveRun(ctx context.Context, sessionID string) (*parley.RunRecord, error) {
	r, err := scanRun(s.queryRow(ctx, `SELECT `+runCols+` FROM runs WHERE session_id = ? AND state = 'running'`, sessionID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("running run of session %q: %w", sessionID, parley.ErrNotFound)
	}
	return r, err
}

// DeleteEndedRunsBefore deletes old ended runs and old ledger entries of calls no running run owns.
func (s *Store) DeleteEndedRunsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE state = 'ended' AND updated_at < ?`, micros(t))
		if err != nil {
			return fmt.Errorf("sqlite: deleting runs: %w", err)
		}
		n, _ = res.RowsAffected()
		_, err = tx.ExecContext(ctx, `DELETE FROM tool_calls WHERE updated_at < ?
			AND run_id NOT IN (SELECT id FROM runs WHERE state = 'running')`, micros(t))
		if err != nil {
			return fmt.Errorf("sqlite: deleting the tool-call ledger: %w", err)
		}
		return nil
	})
	return n, err
}

// MarkToolCall records the state of one tool call; done stays done.
func (s *Store) MarkToolCall(ctx context.Context, sessionID, runID, callID, name, state string, at time.Time) error {
	if state != parley.ToolCallStarted && state != parley.ToolCallDone {
		return parley.Errorf(parley.ECInvalid, "tool call ledger: unknown state %q", state)
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tool_calls (session_id, call_id, run_id, name, state, updated_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (session_id, call_id) DO UPDATE SET state = excluded.state, run_id = excluded.run_id, updated_at = excluded.updated_at
			WHERE tool_calls.state <> 'done'`, sessionID, callID, runID, name, state, micros(at))
		if err != nil {
			if strings.Contains(err.Error(), "FOREIGN KEY") {
				return notFound("session", sessionID)
			}
			return fmt.Errorf("sqlite: recording a tool call: %w", err)
		}
		return nil
	})
}

// ToolCallStates returns the recorded state of each call that has one.
func (s *Store) ToolCallStates(ctx context.Context, sessionID string, callIDs []string) (map[string]string, error) {
	out := map[string]string{}
	if len(callIDs) == 0 {
		return out, nil
	}
	args := []any{sessionID}
	for _, id := range callIDs {
		args = append(args, id)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT call_id, state FROM tool_calls WHERE session_id = ? AND call_id IN (`+placeholders(len(callIDs))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading the tool-call ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("sqlite: reading the tool-call ledger: %w", err)
		}
		out[id] = state
	}
	return out, rows.Err()
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func encodeTools(tools []string) (any, error) {
	if tools == nil {
		return nil, nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, fmt.Errorf("run: encoding selected tools: %w", err)
	}
	return string(b), nil
}

func scanRun(row scanner) (*parley.RunRecord, error) {
	var (
		r                       parley.RunRecord
		tools                   sql.NullString
		lease, created, updated int64
	)
	if err := row.Scan(&r.ID, &r.SessionID, &r.Owner, &r.Model, &tools, &r.State, &r.Finish, &r.Instance, &lease, &r.Attempts, &r.FirstSeq, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("sqlite: reading run: %w", err)
	}
	if tools.Valid {
		if err := json.Unmarshal([]byte(tools.String), &r.SelectedTools); err != nil {
			return nil, fmt.Errorf("sqlite: run %s: decoding selected tools: %w", r.ID, err)
		}
	}
	r.LeaseUntil, r.CreatedAt, r.UpdatedAt = fromMicros(lease), fromMicros(created), fromMicros(updated)
	return &r, nil
}

var _ parley.RunBeginner = (*Store)(nil)

// newBeginPart checks b and encodes what it stores.
func newBeginPart(s *Store, b *parley.RunBegin) (*beginPart, error) {
	if b.Reserve <= 0 {
		return nil, parley.Errorf(parley.ECInvalid, "events: must reserve at least one number")
	}
	sessionID := b.SessionID
	if b.NewSession != nil {
		if b.Leaf != "" {
			return nil, parley.Errorf(parley.ECInvalid, "leaf: a new session has no message to be its leaf")
		}
		if err := checkSession(b.NewSession); err != nil {
			return nil, err
		}
		sessionID = b.NewSession.ID
	}
	var tools any
	if b.Run != nil {
		if err := checkRun(b.Run); err != nil {
			return nil, err
		}
		if b.Run.SessionID != sessionID {
			return nil, parley.Errorf(parley.ECInvalid, "run: of session %q, not %q", b.Run.SessionID, sessionID)
		}
		var err error
		if tools, err = encodeTools(b.Run.SelectedTools); err != nil {
			return nil, err
		}
	}
	var rows [][]any
	if len(b.Messages) > 0 {
		var err error
		if rows, err = messageRows(b.Messages); err != nil {
			return nil, err
		}
	}
	return &beginPart{s: s, b: b, sessionID: sessionID, tools: tools, rows: rows}, nil
}

// BeginRun stores what begins a run in one transaction (parley.RunBeginner).
func (s *Store) BeginRun(ctx context.Context, b *parley.RunBegin) (int64, error) {
	p, err := newBeginPart(s, b)
	if err != nil {
		return 0, err
	}
	if p.mergeable() {
		err = s.w.DoMerge(ctx, p.sessionID, p, p.run)
	} else {
		err = s.write(ctx, p.run)
	}
	if err != nil {
		return 0, err
	}
	if b.Run != nil {
		b.Run.State, b.Run.UpdatedAt = parley.RunStateRunning, b.Run.CreatedAt
	}
	if len(b.Messages) > 0 {
		setSeqs(p.sessionID, b.Messages, p.last, p.links)
	}
	return p.first, nil
}

// beginPart is one BeginRun's write: what it stores, and what storing it returns (first, last,
// links), set anew each time it runs. A run with one message may be merged with the other
// writes of its batch (Store.merge).
type beginPart struct {
	s         *Store
	b         *parley.RunBegin
	sessionID string
	tools     any
	rows      [][]any
	// results
	first, last int64
	links       rowcodec.Links
}

// mergeable reports whether p is a run with one message that names no parent, of a new session
// or of one that exists (a turn), and sets no leaf: the writes Store.merge merges.
func (p *beginPart) mergeable() bool {
	b := p.b
	return b.Run != nil && len(b.Messages) == 1 && b.Messages[0].ParentID == "" && b.Leaf == ""
}

// run is p's write on its own.
func (p *beginPart) run(ctx context.Context, tx *sql.Tx) (err error) {
	s, b, sessionID := p.s, p.b, p.sessionID
	s.began = true // a checkpoint that is due runs after this batch (checkpoint.go)
	p.first, p.last, p.links = 0, 0, rowcodec.Links{}
	if b.NewSession != nil {
		p.first, p.last, p.links, err = s.beginNewSession(ctx, tx, b, p.tools, p.rows)
		return err
	}
	if b.Leaf != "" {
		if _, err := setLeafTx(ctx, tx, sessionID, b.Leaf, false); err != nil {
			return err
		}
	}
	if len(b.Messages) > 0 {
		// The event numbers are reserved by the session's update that appends the
		// messages.
		var seq int64
		if p.last, seq, p.links, err = s.appendMessages(ctx, tx, sessionID, b.Messages, p.rows, eventSeqs{reserve: b.Reserve}); err != nil {
			return err
		}
		p.first = seq - b.Reserve + 1
	} else if p.first, err = s.reserveEventSeqs(ctx, tx, sessionID, b.Reserve); err != nil {
		return err
	}
	if b.Run != nil {
		b.Run.FirstSeq = p.first
		return s.createRun(ctx, tx, b.Run, p.tools)
	}
	return nil
}

// beginNewSession is BeginRun's work for a new session: with no row to read before, the session
// is inserted as the other steps would leave it (its event numbers reserved from 1, its messages'
// seqs, usage, open calls and leaf), then the run and the messages beside it. It returns what
// those steps would: the first event number, the last seq and the messages' parents.
func (s *Store) beginNewSession(ctx context.Context, tx *sql.Tx, b *parley.RunBegin, tools any, rows [][]any) (first, last int64, links rowcodec.Links, err error) {
	sess, msgs := b.NewSession, b.Messages
	links = rowcodec.LinkParents(msgs, "")
	if len(links.Outside) > 0 { // a new session has no message a parent could name
		return 0, 0, links, parley.Errorf(parley.ECInvalid, "parent_id: not a message of this session")
	}
	if sess.ProjectID != "" {
		if err := projectExists(ctx, tx, sess.ProjectID); err != nil {
			return 0, 0, links, err
		}
	}
	first, last = 1, int64(len(msgs))
	updated := micros(sess.UpdatedAt)
	var leaf any
	if len(msgs) > 0 {
		leaf = msgs[len(msgs)-1].ID
		updated = max(updated, micros(msgs[len(msgs)-1].CreatedAt))
	}
	total := rowcodec.TotalUsage(msgs)
	c := s.cached(tx)
	_, err = c.ExecContext(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id, event_seq, last_seq,
		prompt_tokens, completion_tokens, total_tokens, reasoning_tokens, cached_tokens, cost, open_calls, leaf_id, branched)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sess.ID, sess.Title, sess.Owner, micros(sess.CreatedAt), updated, nullable(sess.ProjectID), b.Reserve, last,
		total.PromptTokens, total.CompletionTokens, total.TotalTokens, total.ReasoningTokens, total.CachedTokens, total.Cost,
		max(0, rowcodec.OpenCallsDelta(msgs)), leaf, links.Branches)
	if err != nil {
		return 0, 0, links, fmt.Errorf("sqlite: creating session: %w", err)
	}
	if b.Run != nil {
		b.Run.FirstSeq = first
		if err := s.createRun(ctx, tx, b.Run, tools); err != nil {
			return 0, 0, links, err
		}
	}
	if len(msgs) > 0 {
		if err := insertMessages(ctx, c, sess.ID, 1, rows, links.Parents); err != nil {
			return 0, 0, links, err
		}
	}
	return first, last, links, nil
}

// newFinishPart checks f and encodes its messages.
func newFinishPart(s *Store, f *parley.RunFinish) (*finishPart, error) {
	var rows [][]any
	if len(f.Messages) > 0 {
		var err error
		if rows, err = messageRows(f.Messages); err != nil {
			return nil, err
		}
	}
	// The events to encode here, once the messages they may carry are numbered: encoded anew
	// each time the write runs.
	var encode []int
	for i := range f.Events {
		e := &f.Events[i]
		switch {
		case e.Seq <= 0 || e.JSON == nil && e.Event == nil:
			return nil, parley.Errorf(parley.ECInvalid, "events: event %d has no sequence number or nothing to store", i)
		case i > 0 && e.Seq <= f.Events[i-1].Seq:
			return nil, parley.Errorf(parley.ECInvalid, "events: the events of a run's end are not in order")
		case e.JSON == nil:
			encode = append(encode, i)
		}
	}
	return &finishPart{s: s, f: f, rows: rows, encode: encode}, nil
}

// FinishRun stores what ends a run in one transaction: its last messages, its events not
// stored yet, the event numbers it gives back and its end (parley.RunBeginner).
func (s *Store) FinishRun(ctx context.Context, f parley.RunFinish) error {
	p, err := newFinishPart(s, &f)
	if err != nil {
		return err
	}
	if p.mergeable() {
		err = s.w.DoMerge(ctx, f.SessionID, p, p.run)
	} else {
		err = s.write(ctx, p.run)
	}
	if err != nil {
		return err
	}
	if len(f.Messages) > 0 {
		setSeqs(f.SessionID, f.Messages, p.last, p.links)
	}
	return p.ended
}

// finishPart is one FinishRun's write: what it stores, and what storing it returns (last, links,
// ended), set anew each time it runs. An answer with events may be merged with the other writes
// of its batch (Store.merge).
type finishPart struct {
	s      *Store
	f      *parley.RunFinish
	rows   [][]any
	encode []int // the events to encode once the messages are numbered
	// results
	last  int64
	links rowcodec.Links
	ended error // endRun's: a run no longer this instance's fails no write
}

// mergeable reports whether p is a run's end with one message that names no parent, and
// events: the writes Store.merge merges.
func (p *finishPart) mergeable() bool {
	f := p.f
	return len(f.Messages) == 1 && f.Messages[0].ParentID == "" && len(f.Events) > 0
}

// encodeEvents encodes the events of p that came without their JSON, now that the messages are
// numbered (p.last, p.links).
func (p *finishPart) encodeEvents() error {
	f := p.f
	for _, i := range p.encode {
		f.Events[i].JSON = nil
	}
	if err := rowcodec.EncodeAfter(f.Events, f.Messages, f.SessionID, p.last, p.links); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// run is p's write on its own.
func (p *finishPart) run(ctx context.Context, tx *sql.Tx) (err error) {
	s, f := p.s, p.f
	p.last, p.links, p.ended = 0, rowcodec.Links{}, nil
	var overlaps *eventOverlaps
	if len(f.Messages) > 0 {
		// The unused event numbers are given back by the session's update that appends
		// the messages, and its read of the session finds the event rows already stored
		// that the events overlap (a retried write).
		if len(f.Events) > 0 {
			overlaps = &eventOverlaps{first: f.Events[0].Seq, last: f.Events[len(f.Events)-1].Seq}
		}
		if p.last, _, p.links, err = s.appendMessages(ctx, tx, f.SessionID, f.Messages, p.rows,
			eventSeqs{release: true, limit: f.Limit, last: f.Last, overlaps: overlaps}); err != nil {
			return err
		}
	}
	if len(f.Events) > 0 {
		if err := p.encodeEvents(); err != nil {
			return err
		}
		if overlaps == nil {
			err = s.appendEvents(ctx, tx, f.SessionID, f.At, f.Events, rowcodec.CompactEventBatches(f.Events, nil))
		} else {
			var stored rowcodec.Covered
			if len(overlaps.stored) > 0 {
				stored = rowcodec.RangesCover(overlaps.stored)
			}
			err = insertEventBatches(ctx, s.cached(tx), f.SessionID, f.At, rowcodec.CompactEventBatches(f.Events, stored))
		}
		if err != nil {
			return err
		}
	}
	if len(f.Messages) == 0 {
		if err := s.releaseEventSeqs(ctx, tx, f.SessionID, f.Limit, f.Last); err != nil {
			return err
		}
	}
	// A run no longer this instance's is no failure of the transaction: the messages, the
	// events and the numbers are kept.
	p.ended = s.endRun(ctx, tx, f.RunID, f.Instance, f.Finish, f.At)
	if parley.CodeOf(p.ended) != parley.ECConflict {
		err, p.ended = p.ended, nil
		return err
	}
	return nil
}
