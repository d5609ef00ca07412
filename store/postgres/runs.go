package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	err = s.writeFor(ctx, r.SessionID, func(ctx context.Context, tx pgx.Tx) error {
		return createRun(ctx, tx, r, tools)
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

func encodeTools(tools []string) ([]byte, error) {
	if tools == nil {
		return nil, nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, fmt.Errorf("run: encoding selected tools: %w", err)
	}
	return b, nil
}

// createRun is CreateRun's work inside a transaction.
func createRun(ctx context.Context, tx pgx.Tx, r *parley.RunRecord, tools []byte) error {
	_, err := tx.Exec(ctx, `INSERT INTO runs (`+runCols+`) VALUES ($1, $2, $3, $4, $5, 'running', '', $6, $7, $8, $9, $10, $10)`,
		r.ID, r.SessionID, r.Owner, r.Model, tools, r.Instance, r.LeaseUntil.UTC(), r.Attempts, r.FirstSeq, r.CreatedAt.UTC())
	if err != nil {
		return runError(err, r.SessionID)
	}
	return nil
}

// runError says why inserting a run failed.
func runError(err error, sessionID string) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505": // unique_violation: runs_one_running
		return parley.Errorf(parley.ECConflict, "a run is already active in this session")
	case errors.As(err, &pe) && pe.Code == "23503": // foreign_key_violation
		return notFound("session", sessionID)
	}
	return fmt.Errorf("postgres: creating run: %w", err)
}

// notEnded is how a statement that updates given runs (by id) asks that they still run: a run is
// "running" or "ended", and "state <> 'ended'" is "state = 'running'" in words the planner cannot
// match to the predicate of runs_one_running. With "state = 'running'", a generic plan for many
// ids read the runs through a BitmapAnd of the primary key and runs_one_running, a scan of the
// whole partial index; and each ended run leaves a dead entry there (its end is a non-HOT update)
// until a VACUUM, so that a chat's end read one entry for every run ended since: 5,351 at 40,000
// chats with autovacuum off (issue 25, tenth pass).
// TestStatementsThatEndOrRenewGivenRunsReadThemByPrimaryKey checks the plans.
const notEnded = `state <> 'ended'`

const renewRunsSQL = `UPDATE runs SET lease_until = $1 WHERE instance = $2 AND ` + notEnded + ` AND id = ANY($3) RETURNING id`

// RenewRuns extends the lease of the instance's running runs among ids.
func (s *Store) RenewRuns(ctx context.Context, instance string, ids []string, until time.Time) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, renewRunsSQL, until.UTC(), instance, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: renewing runs: %w", err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: renewing runs: %w", err)
	}
	if renewed == nil {
		renewed = []string{}
	}
	return renewed, nil
}

// EndRun marks the run ended if instance still runs it.
func (s *Store) EndRun(ctx context.Context, id, instance, finish string, at time.Time) error {
	return s.write(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return endRun(ctx, tx, id, instance, finish, at)
	})
}

const endRunSQL = `UPDATE runs SET state = 'ended', finish = $1, updated_at = $2 WHERE id = $3 AND instance = $4 AND ` + notEnded

func endRun(ctx context.Context, tx pgx.Tx, id, instance, finish string, at time.Time) error {
	tag, err := tx.Exec(ctx, endRunSQL, finish, at.UTC(), id, instance)
	if err != nil {
		return fmt.Errorf("postgres: ending run: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return parley.Errorf(parley.ECConflict, "run %s: not running on instance %s", id, instance)
	}
	return nil
}

// DeleteRun deletes a run record.
func (s *Store) DeleteRun(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM runs WHERE id = $1`, id); err != nil {
		return fmt.Errorf("postgres: deleting run: %w", err)
	}
	return nil
}

// claimRunsSQL is ClaimRuns' statement. It finds the running runs through runs_one_running (the
// running runs only, by session) and sorts the few it takes by lease.
const claimRunsSQL = `UPDATE runs SET instance = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3
	WHERE id IN (SELECT id FROM runs WHERE state = 'running' AND (lease_until < $3 OR (instance = $4 AND updated_at < $3))
		ORDER BY lease_until LIMIT $5 FOR UPDATE SKIP LOCKED)
	RETURNING ` + runCols

// ClaimRuns takes over running runs whose lease ended, and those of orphanedBy created or last
// claimed before now. Rows another instance is claiming at the same moment are skipped, not
// waited for.
func (s *Store) ClaimRuns(ctx context.Context, instance, orphanedBy string, now, until time.Time, limit int) ([]parley.RunRecord, error) {
	if limit <= 0 {
		limit = 10
	}
	rows, err := s.pool.Query(ctx, claimRunsSQL, instance, until.UTC(), now.UTC(), orphanedBy, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: claiming runs: %w", err)
	}
	defer rows.Close()
	var out []parley.RunRecord
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claiming runs: %w", err)
	}
	return out, nil
}

// ActiveRun returns the session's running run.
func (s *Store) ActiveRun(ctx context.Context, sessionID string) (*parley.RunRecord, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE session_id = $1 AND state = 'running'`, sessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("running run of session %q: %w", sessionID, parley.ErrNotFound)
	}
	return r, err
}

// DeleteEndedRunsBefore deletes old ended runs and old ledger entries of calls no running run owns.
func (s *Store) DeleteEndedRunsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM runs WHERE state = 'ended' AND updated_at < $1`, t.UTC())
		if err != nil {
			return fmt.Errorf("postgres: deleting runs: %w", err)
		}
		n = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM tool_calls WHERE updated_at < $1
			AND run_id NOT IN (SELECT id FROM runs WHERE state = 'running')`, t.UTC()); err != nil {
			return fmt.Errorf("postgres: deleting the tool-call ledger: %w", err)
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
	return s.writeFor(ctx, sessionID, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tool_calls (session_id, call_id, run_id, name, state, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (session_id, call_id) DO UPDATE SET state = excluded.state, run_id = excluded.run_id, updated_at = excluded.updated_at
			WHERE tool_calls.state <> 'done'`, sessionID, callID, runID, name, state, at.UTC())
		if isFKViolation(err) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return fmt.Errorf("postgres: recording a tool call: %w", err)
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
	rows, err := s.pool.Query(ctx, `SELECT call_id, state FROM tool_calls WHERE session_id = $1 AND call_id = ANY($2)`, sessionID, callIDs)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading the tool-call ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("postgres: reading the tool-call ledger: %w", err)
		}
		out[id] = state
	}
	return out, rows.Err()
}

func scanRun(row pgx.Row) (*parley.RunRecord, error) {
	var (
		r                       parley.RunRecord
		tools                   []byte
		lease, created, updated time.Time
	)
	if err := row.Scan(&r.ID, &r.SessionID, &r.Owner, &r.Model, &tools, &r.State, &r.Finish, &r.Instance, &lease, &r.Attempts, &r.FirstSeq, &created, &updated); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("postgres: reading run: %w", err)
	}
	if tools != nil {
		if err := json.Unmarshal(tools, &r.SelectedTools); err != nil {
			return nil, fmt.Errorf("postgres: run %s: decoding selected tools: %w", r.ID, err)
		}
	}
	r.LeaseUntil, r.CreatedAt, r.UpdatedAt = lease.UTC(), created.UTC(), updated.UTC()
	return &r, nil
}

var _ parley.RunBeginner = (*Store)(nil)

// newBeginPart checks b and encodes what it stores.
func newBeginPart(b *parley.RunBegin) (*beginPart, error) {
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
	var tools []byte
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
	var cols []rowcodec.Columns
	if len(b.Messages) > 0 {
		var err error
		if cols, err = encodeMessages(b.Messages); err != nil {
			return nil, err
		}
	}
	return &beginPart{b: b, tools: tools, cols: cols}, nil
}

// BeginRun stores what begins a run in one transaction (parley.RunBeginner).
func (s *Store) BeginRun(ctx context.Context, b *parley.RunBegin) (int64, error) {
	p, err := newBeginPart(b)
	if err != nil {
		return 0, err
	}
	sessionID := b.SessionID
	if b.NewSession != nil {
		sessionID = b.NewSession.ID
	}
	fn := func(ctx context.Context, tx pgx.Tx) error { return p.run(ctx, tx) }
	if p.mergeable() {
		err = s.w.DoMerge(ctx, sessionID, p, fn)
	} else {
		err = s.writeFor(ctx, sessionID, fn)
	}
	if err != nil {
		return 0, err
	}
	if b.Run != nil {
		b.Run.State, b.Run.UpdatedAt = parley.RunStateRunning, b.Run.CreatedAt
	}
	if len(b.Messages) > 0 {
		setSeqs(sessionID, b.Messages, p.last, p.links)
	}
	if p.mergeable() { // its message is the session's leaf: the run's answer goes after it
		s.hints.put(sessionID, answerHint{run: b.Run.ID, seq: p.last + 1, parent: b.Messages[0].ID})
	} else {
		s.hints.forget(sessionID)
	}
	return p.first, nil
}

// beginPart is one BeginRun's write: what it stores, and what storing it returns (first, last,
// links), set anew each time it runs. A run with one message may be merged with others of its
// batch (mergedBeginSQL, mergedTurnsSQL).
type beginPart struct {
	b     *parley.RunBegin
	tools []byte
	cols  []rowcodec.Columns
	// results
	first, last int64
	links       rowcodec.Links
}

// mergeable reports whether p is a run with one message that names no parent, of a new session
// or of one that exists (a turn), and sets no leaf: the writes Merge merges.
func (p *beginPart) mergeable() bool {
	b := p.b
	return b.Run != nil && len(b.Messages) == 1 && b.Messages[0].ParentID == "" && b.Leaf == ""
}

// run is p's write on its own.
func (p *beginPart) run(ctx context.Context, tx pgx.Tx) (err error) {
	b, tools, cols := p.b, p.tools, p.cols
	sessionID := b.SessionID
	if b.NewSession != nil {
		sessionID = b.NewSession.ID
	}
	p.first, p.last, p.links = 0, 0, rowcodec.Links{}
	if b.NewSession != nil && b.Run != nil {
		p.first, p.last, p.links, err = beginNewSession(ctx, tx, b, tools, cols)
		return err
	}
	if b.Leaf != "" {
		// First, so that the messages and the answer follow it; it locks the session's row.
		if _, err := setLeafTx(ctx, tx, sessionID, b.Leaf, false); err != nil {
			return err
		}
	}
	if b.NewSession == nil && b.Run != nil && chained(b.Messages) {
		p.first, p.last, p.links, err = beginInSession(ctx, tx, b, tools, cols)
		return err
	}
	if b.NewSession != nil {
		if err := createSession(ctx, tx, b.NewSession); err != nil {
			return err
		}
	}
	if p.first, err = reserveEventSeqs(ctx, tx, sessionID, b.Reserve); err != nil {
		return err
	}
	if b.Run != nil {
		b.Run.FirstSeq = p.first
		if err := createRun(ctx, tx, b.Run, tools); err != nil {
			return err
		}
	}
	if len(b.Messages) > 0 {
		p.last, p.links, err = appendMessages(ctx, tx, sessionID, b.Messages, cols)
	}
	return err
}

// beginNewSession is BeginRun's work for a run of a new session, in one round trip: with no row
// to read before, the session is inserted as the other steps would leave it (its event numbers
// reserved from 1, its messages' seqs, usage, open calls and leaf), and the run and the messages
// are inserted beside it, all queued in one batch. It returns what those steps would.
func beginNewSession(ctx context.Context, tx pgx.Tx, b *parley.RunBegin, tools []byte, cols []rowcodec.Columns) (first, last int64, links rowcodec.Links, err error) {
	sess, msgs := b.NewSession, b.Messages
	links = rowcodec.LinkParents(msgs, "")
	if len(links.Outside) > 0 { // a new session has no message a parent could name
		return 0, 0, links, parley.Errorf(parley.ECInvalid, "parent_id: not a message of this session")
	}
	first, last = 1, int64(len(msgs))
	sessArgs, runArgs := newSessionArgs(b, tools, last, links)
	if len(msgs) == 1 { // a chat's first turn: one statement
		args := append(append(messageArgs(msgs[0], cols[0], sess.ID, 1, nullStr(links.Parents[0])), sessArgs...), runArgs...)
		// Alone in its transaction, it goes with the COMMIT: nothing of it is read back.
		if pt, ok := tx.(*pipeTx); ok && pt.holdFirst(beginNewSessionOne, args, func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return beginError(err, sess)
			}
			return nil
		}) {
			return first, last, links, nil
		}
		if _, err := tx.Exec(ctx, beginNewSessionOne, args...); err != nil {
			return 0, 0, links, beginError(err, sess)
		}
		return first, last, links, nil
	}
	q := &pgx.Batch{}
	q.Queue(insertNewSession, sessArgs...)
	q.Queue(insertRun, runArgs...)
	queueMessages(q, sess.ID, 1, msgs, cols, links.Parents)
	br := tx.SendBatch(ctx, q)
	defer br.Close()
	if _, err := br.Exec(); isFKViolation(err) {
		return 0, 0, links, notFound("project", sess.ProjectID)
	} else if err != nil {
		return 0, 0, links, fmt.Errorf("postgres: creating session: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return 0, 0, links, runError(err, sess.ID)
	}
	if err := br.Close(); err != nil {
		return 0, 0, links, fmt.Errorf("postgres: appending messages: %w", err)
	}
	return first, last, links, nil
}

// newSessionArgs returns the arguments of insertNewSession and insertRun for b, a new session's
// run whose last message has seq last (b.Run.FirstSeq is set to 1).
func newSessionArgs(b *parley.RunBegin, tools []byte, last int64, links rowcodec.Links) (sessArgs, runArgs []any) {
	sess, msgs := b.NewSession, b.Messages
	updated := sess.UpdatedAt.UTC()
	var leaf any
	if len(msgs) > 0 {
		leaf = msgs[len(msgs)-1].ID
		if at := msgs[len(msgs)-1].CreatedAt.UTC(); at.After(updated) {
			updated = at
		}
	}
	total := rowcodec.TotalUsage(msgs)
	sessArgs = []any{sess.ID, sess.Title, sess.Owner, sess.CreatedAt.UTC(), updated, nullable(sess.ProjectID), b.Reserve, last,
		total.PromptTokens, total.CompletionTokens, total.TotalTokens, total.ReasoningTokens, total.CachedTokens, total.Cost,
		max(0, rowcodec.OpenCallsDelta(msgs)), leaf, links.Branches}
	b.Run.FirstSeq = 1
	r := b.Run
	runArgs = []any{r.ID, r.SessionID, r.Owner, r.Model, tools, r.Instance, r.LeaseUntil.UTC(), r.Attempts, r.FirstSeq, r.CreatedAt.UTC()}
	return sessArgs, runArgs
}

const (
	insertNewSession = `INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id, event_seq, last_seq, prompt_tokens,
		completion_tokens, total_tokens, reasoning_tokens, cached_tokens, cost, open_calls, leaf_id, branched)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`
	insertRun = `INSERT INTO runs (` + runCols + `) VALUES ($1, $2, $3, $4, $5, 'running', '', $6, $7, $8, $9, $10, $10)`
)

// beginNewSessionOne is beginNewSession's three inserts in one statement, for one message: its
// arguments are insertMessage's ($1-$21), then insertNewSession's ($22-$38), then insertRun's
// ($39-$48). The message's and the run's references to the session are checked at the end of
// the statement, when the session's row is there.
var beginNewSessionOne = `WITH s AS (` + shiftParams(insertNewSession, 21) + `),
	r AS (` + shiftParams(insertRun, 38) + `)
	` + insertMessage

// shiftParams returns the statement q with each parameter $n numbered $(n+by).
func shiftParams(q string, by int) string {
	return paramRE.ReplaceAllStringFunc(q, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		return "$" + strconv.Itoa(n+by)
	})
}

var paramRE = regexp.MustCompile(`\$[0-9]+`)

// beginError says why beginNewSessionOne failed.
func beginError(err error, sess *parley.Session) error {
	var pe *pgconn.PgError
	switch {
	case isFKViolation(err) && errors.As(err, &pe) && pe.TableName == "sessions":
		return notFound("project", sess.ProjectID)
	case errors.As(err, &pe) && pe.TableName == "runs":
		return runError(err, sess.ID)
	}
	return fmt.Errorf("postgres: beginning a run: %w", err)
}

// beginInSession is BeginRun's work for a run of a session that exists, with messages that
// extend its chain, in one round trip: the event numbers are reserved (which locks the session's
// row), the run takes the first of them from the row as that update left it, and the messages
// are appended as appendChain does, all in one batch.
func beginInSession(ctx context.Context, tx pgx.Tx, b *parley.RunBegin, tools []byte, cols []rowcodec.Columns) (first, last int64, links rowcodec.Links, err error) {
	q := &pgx.Batch{}
	q.Queue(`UPDATE sessions SET event_seq = event_seq + $1 WHERE id = $2 RETURNING event_seq`, b.Reserve, b.SessionID)
	r := b.Run
	q.Queue(`INSERT INTO runs (`+runCols+`) VALUES ($1, $2, $3, $4, $5, 'running', '', $6, $7, $8,
		(SELECT event_seq FROM sessions WHERE id = $2) - $9 + 1, $10, $10)`,
		r.ID, r.SessionID, r.Owner, r.Model, tools, r.Instance, r.LeaseUntil.UTC(), r.Attempts, b.Reserve, r.CreatedAt.UTC())
	if len(b.Messages) > 0 {
		queueChain(q, b.SessionID, b.Messages, cols)
	}
	br := tx.SendBatch(ctx, q)
	defer br.Close()
	var reserved int64
	if err := br.QueryRow().Scan(&reserved); errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, links, notFound("session", b.SessionID)
	} else if err != nil {
		return 0, 0, links, fmt.Errorf("postgres: reserving event numbers: %w", err)
	}
	first = reserved - b.Reserve + 1
	r.FirstSeq = first
	if _, err := br.Exec(); err != nil {
		return 0, 0, links, runError(err, b.SessionID)
	}
	if len(b.Messages) > 0 {
		if last, links, err = readChain(br, b.SessionID, b.Messages); err != nil {
			return 0, 0, links, err
		}
	}
	if err := br.Close(); err != nil {
		return 0, 0, links, fmt.Errorf("postgres: beginning a run: %w", err)
	}
	return first, last, links, nil
}

// newFinishPart checks f and encodes what it stores before the transaction.
func newFinishPart(f *parley.RunFinish) (*finishPart, error) {
	var cols []rowcodec.Columns
	if len(f.Messages) > 0 {
		var err error
		if cols, err = encodeMessages(f.Messages); err != nil {
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
	return &finishPart{f: f, cols: cols, encode: encode, rel: &release{f.Limit, f.Last}}, nil
}

// FinishRun stores what ends a run in one transaction: its last messages, its events not
// stored yet, the event numbers it gives back and its end (parley.RunBeginner).
func (s *Store) FinishRun(ctx context.Context, f parley.RunFinish) error {
	p, err := newFinishPart(&f)
	if err != nil {
		return err
	}
	fn := func(ctx context.Context, tx pgx.Tx) error { return p.run(ctx, tx) }
	hint, ok := s.hints.take(f.SessionID, f.RunID)
	if p.mergeable() {
		if ok {
			p.hint = &hint
		}
		err = s.w.DoMerge(ctx, f.SessionID, p, fn)
	} else {
		err = s.writeFor(ctx, f.SessionID, fn)
	}
	if err != nil {
		return err
	}
	if len(f.Messages) > 0 {
		setSeqs(f.SessionID, f.Messages, p.last, p.links)
	}
	return p.ended
}

// finishPart is one FinishRun's write: what it stores, and what storing it returns (last,
// links, ended), set anew each time it runs. A run's end with one answer that names no parent
// and events may be merged with others of its batch (mergeFinishes).
type finishPart struct {
	f      *parley.RunFinish
	cols   []rowcodec.Columns
	encode []int // the events to encode once the messages are numbered
	rel    *release
	hint   *answerHint // where the answer is foreseen to go, if known (hints.go)
	// results
	last  int64
	links rowcodec.Links
	ended error // a run no longer this instance's (ECConflict): no failure of the write
}

// mergeable reports whether p is the end of a turn: one answer that names no parent, and events.
func (p *finishPart) mergeable() bool {
	f := p.f
	return len(f.Messages) == 1 && f.Messages[0].ParentID == "" && len(f.Events) > 0
}

// run is p's write on its own.
func (p *finishPart) run(ctx context.Context, tx pgx.Tx) (err error) {
	f := p.f
	p.last, p.links, p.ended = 0, rowcodec.Links{}, nil
	released := false
	if len(f.Messages) > 0 {
		if chained(f.Messages) { // a turn's answer: the numbers go back in the session's update
			p.last, p.links, err = appendChainReleasing(ctx, tx, f.SessionID, f.Messages, p.cols, p.rel)
			released = true
		} else {
			p.last, p.links, err = appendMessages(ctx, tx, f.SessionID, f.Messages, p.cols)
		}
		if err != nil {
			return err
		}
	}
	batches, err := p.encodeEvents()
	if err != nil {
		return err
	}
	give := p.rel
	if released {
		give = nil
	}
	p.ended, err = finishBatch(ctx, tx, *f, batches, give)
	return err
}

// encodeEvents encodes the events that carry the messages, numbered as p.last and p.links say,
// and joins the events into rows.
func (p *finishPart) encodeEvents() ([]rowcodec.EventBatch, error) {
	f := p.f
	if len(f.Events) == 0 {
		return nil, nil
	}
	for _, i := range p.encode {
		f.Events[i].JSON = nil
	}
	if err := rowcodec.EncodeAfter(f.Events, f.Messages, f.SessionID, p.last, p.links); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return rowcodec.EventBatches(f.Events, nil), nil
}

// finishBatch is the rest of FinishRun after its messages, in one round trip: the rows of its
// events (batches), each inserted unless a row already stored overlaps it, the event numbers of
// rel given back (unless nil: they went back with the messages), and the run's end. If a stored
// row overlapped one (a write run again), the events are then stored as AppendEvents stores
// them, around what is stored. It returns endRun's error apart: a run no longer this instance's
// is no failure of the transaction (ECConflict; the messages, the events and the numbers are
// kept).
func finishBatch(ctx context.Context, tx pgx.Tx, f parley.RunFinish, batches []rowcodec.EventBatch, rel *release) (ended, err error) {
	if len(batches) == 1 && rel == nil { // a chat's end: one statement
		return finishOne(ctx, tx, f, batches[0])
	}
	b := &pgx.Batch{}
	queueNewEventBatches(b, f.SessionID, f.At, batches)
	if rel != nil {
		b.Queue(releaseSQL, rel.Last, f.SessionID, rel.Limit)
	}
	b.Queue(endRunSQL, f.Finish, f.At.UTC(), f.RunID, f.Instance)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	overlap, err := readNewEventBatches(br, len(batches))
	if err != nil {
		return nil, eventsError(err, f.SessionID)
	}
	if rel != nil {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("postgres: releasing event numbers: %w", err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, fmt.Errorf("postgres: ending run: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("postgres: ending run: %w", err)
	}
	if overlap {
		if err := eventsError(appendAround(ctx, tx, f.SessionID, f.At, f.Events), f.SessionID); err != nil {
			return nil, err
		}
	}
	if tag.RowsAffected() == 0 {
		return parley.Errorf(parley.ECConflict, "run %s: not running on instance %s", f.RunID, f.Instance), nil
	}
	return nil, nil
}

// endWithEvents is finishBatch's two statements for one row of events in one: the row is
// inserted unless a stored row overlaps it, and the run ended; it returns whether each did.
const endWithEvents = `WITH e AS (` + insertNewEventBatch + ` RETURNING 1),
	r AS (UPDATE runs SET state = 'ended', finish = $6, updated_at = $5 WHERE id = $7 AND instance = $8 AND ` + notEnded + ` RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM e), EXISTS (SELECT 1 FROM r)`

// finishOne is finishBatch for one row of events whose numbers went back with the messages.
func finishOne(ctx context.Context, tx pgx.Tx, f parley.RunFinish, eb rowcodec.EventBatch) (ended, err error) {
	var stored, endedNow bool
	err = tx.QueryRow(ctx, endWithEvents, f.SessionID, eb.First, eb.Last, eb.Data, f.At.UTC(), f.Finish, f.RunID, f.Instance).
		Scan(&stored, &endedNow)
	if err != nil {
		return nil, eventsError(err, f.SessionID)
	}
	if !stored {
		if err := eventsError(appendAround(ctx, tx, f.SessionID, f.At, f.Events), f.SessionID); err != nil {
			return nil, err
		}
	}
	if !endedNow {
		return parley.Errorf(parley.ECConflict, "run %s: not running on instance %s", f.RunID, f.Instance), nil
	}
	return nil, nil
}
