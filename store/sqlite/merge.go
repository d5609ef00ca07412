package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/groupcommit"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// Merging a batch's like writes (groupcommit.Merger), as store/postgres does. Under load a
// group-commit batch holds many chats' writes: the begins of runs (of new sessions and turns in
// sessions that exist), the ends of runs and the writes of running runs' events. Each on its own
// is three to five statements, and each statement costs its share of database/sql, of the
// driver (a bind per parameter, a step, a reset) and of SQLite's own start and end of a
// statement. Merged, a batch reads the rows it needs of every session it writes to in one
// statement, then inserts its sessions, runs, messages and event rows and updates its sessions
// and runs in one multi-row statement each (INSERT … VALUES (…),(…), UPDATE … FROM (VALUES …)),
// whatever the number of writes, up to mergeChunk rows a statement.
//
// What they store and return is what each write's own statements would (the tests hold them to
// it). Merge says only that a part failed, not which one: the writer then runs the batch again
// with a savepoint around each write, each by its own statements, and each caller gets its own
// error.

// mergeChunk is the most rows one merged statement takes; more are split into statements of
// this many. Each row count up to it has a statement text of its own, prepared once per
// connection: the bound keeps that cache small (8 kinds × mergeChunk texts).
const mergeChunk = 16

var _ groupcommit.Merger[*sql.Tx] = sqlTx{}

// errMerged is a merged part's failure: its batch runs again, each write on its own.
var errMerged = errors.New("sqlite: a merged write failed")

// Merge runs the parts of a batch's writes that can be merged (beginPart, finishPart,
// eventsPart).
func (d sqlTx) Merge(ctx context.Context, tx *sql.Tx, parts []any) error {
	return d.s.merge(ctx, tx, parts)
}

// mergedStmt is one kind of merged statement: head, then rows times row (each `(?, …)`) joined
// by commas, then tail; its texts for 1 to mergeChunk rows are built once.
type mergedStmt struct {
	cols  int // parameters a row
	texts [mergeChunk + 1]string
}

func newMergedStmt(head, row, tail string) *mergedStmt {
	m := &mergedStmt{cols: strings.Count(row, "?")}
	for n := 1; n <= mergeChunk; n++ {
		m.texts[n] = head + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ") + tail
	}
	return m
}

// values is the `VALUES` row of n parameters.
func values(n int) string { return "(" + placeholders(n) + ")" }

var (
	// mergedRead reads, for each row (session, first and last event number to store, run and
	// instance to end), the session's leaf, last seq and event numbers, the event rows stored
	// that overlap the numbers (as readSessionOverlaps), and whether the run runs on the
	// instance. CROSS JOIN: the rows given are the outer loop, each session found by its key.
	mergedRead = newMergedStmt(`SELECT s.id, s.leaf_id, s.last_seq, s.event_seq,
	(SELECT group_concat(first_seq || ',' || last_seq, ';') FROM event_batches
		WHERE session_id = s.id AND first_seq <= v.column3 AND last_seq >= v.column2),
	EXISTS (SELECT 1 FROM runs WHERE runs.id = v.column4 AND runs.instance = v.column5 AND runs.state = 'running')
	FROM (VALUES `, values(5), `) AS v CROSS JOIN sessions s ON s.id = v.column1`)
	mergedSessions = newMergedStmt(`INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id, event_seq,
	last_seq, prompt_tokens, completion_tokens, total_tokens, reasoning_tokens, cached_tokens, cost, open_calls, leaf_id, branched)
	VALUES `, values(17), ``)
	mergedRuns     = newMergedStmt(`INSERT INTO runs (`+runCols+`) VALUES `, `(?, ?, ?, ?, ?, 'running', '', ?, ?, ?, ?, ?, ?)`, ``)
	mergedMessages = newMergedStmt(`INSERT INTO messages (id, session_id, seq, role, content, parts, name, tool_calls,
	tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error,
	parent_id) VALUES `, values(21), ``)
	// mergedPlainMessages inserts the plain messages (plainMessage), the other columns NULL.
	mergedPlainMessages = newMergedStmt(`INSERT INTO messages (`+plainMessageCols+`) VALUES `, values(11), ``)
	// mergedUpdate is updateSession for each row: the session, then updateSession's
	// parameters but its last.
	mergedUpdate = newMergedStmt(`UPDATE sessions SET last_seq = v.column2, event_seq = v.column3,
	updated_at = MAX(updated_at, v.column4), prompt_tokens = prompt_tokens + v.column5,
	completion_tokens = completion_tokens + v.column6, total_tokens = total_tokens + v.column7,
	reasoning_tokens = reasoning_tokens + v.column8, cached_tokens = cached_tokens + v.column9, cost = cost + v.column10,
	open_calls = MAX(0, open_calls + v.column11), leaf_id = v.column12, branched = MAX(branched, v.column13)
	FROM (VALUES `, values(13), `) AS v WHERE sessions.id = v.column1`)
	mergedEvents = newMergedStmt(`INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at) VALUES `, values(5), ``)
	// mergedEnds is endRun for each row (run, finish, time) that the read found running on its
	// instance.
	mergedEnds = newMergedStmt(`UPDATE runs SET state = 'ended', finish = v.column2, updated_at = v.column3
	FROM (VALUES `, values(3), `) AS v WHERE runs.id = v.column1 AND runs.state = 'running'`)
)

// sessionRow is what mergedRead found of a session.
type sessionRow struct {
	leaf      sql.NullString
	last, seq int64
	stored    [][2]int64 // the event rows that overlap the numbers to store
	running   bool       // the run to end runs on its instance
}

// readMerged reads the session of each row of args (mergedRead's), by id.
func readMerged(ctx context.Context, c cachedTx, args []any) (map[string]*sessionRow, error) {
	m := mergedRead
	out := make(map[string]*sessionRow, len(args)/m.cols)
	for len(args) > 0 {
		n := min(len(args)/m.cols, mergeChunk)
		rows, err := c.QueryContext(ctx, m.texts[n], args[:n*m.cols]...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var (
				id     string
				r      sessionRow
				stored sql.NullString
			)
			if err := rows.Scan(&id, &r.leaf, &r.last, &r.seq, &stored, &r.running); err != nil {
				rows.Close()
				return nil, err
			}
			if stored.Valid {
				if r.stored, err = parseRanges(stored.String); err != nil {
					rows.Close()
					return nil, err
				}
			}
			out[id] = &r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		args = args[n*m.cols:]
	}
	return out, nil
}

// merge does what the parts' functions would do one after another, in seven statements or so
// for the lot (eight when plain messages and others come together; more past mergeChunk rows of
// a kind).
func (s *Store) merge(ctx context.Context, tx *sql.Tx, parts []any) error {
	if tx == nil || tx != s.wc.tx { // before the writer's slices are touched
		return errNotWriter
	}
	a := &s.margs
	defer a.release()
	news, turns, finishes, events, read := a.news[:0], a.turns[:0], a.finishes[:0], a.events[:0], a.read[:0]
	defer func() { a.news, a.turns, a.finishes, a.events, a.read = news, turns, finishes, events, read }()
	for _, p := range parts {
		switch p := p.(type) {
		case *beginPart:
			s.began = true // a checkpoint that is due runs after this batch (checkpoint.go)
			p.first, p.last, p.links = 0, 0, rowcodec.Links{}
			if p.b.NewSession != nil {
				news = append(news, p)
			} else {
				turns = append(turns, p)
				read = append(read, p.sessionID, 1, 0, nil, nil)
			}
		case *finishPart:
			p.last, p.links, p.ended = 0, rowcodec.Links{}, nil
			f := p.f
			finishes = append(finishes, p)
			read = append(read, f.SessionID, f.Events[0].Seq, f.Events[len(f.Events)-1].Seq, f.RunID, f.Instance)
		case *eventsPart:
			events = append(events, p)
			read = append(read, p.sessionID, p.evs[0].Seq, p.evs[len(p.evs)-1].Seq, nil, nil)
		default:
			return fmt.Errorf("sqlite: no merge for %T", p)
		}
	}
	c := s.cached(tx)
	var found map[string]*sessionRow
	if len(read) > 0 {
		var err error
		if found, err = readMerged(ctx, c, read); err != nil {
			return err
		}
		if len(found) != len(read)/mergedRead.cols { // a session that is not there
			return errMerged
		}
	}
	// The rows of each statement, sized once (the event rows: one a write unless it has gaps).
	sessions := a.rows(0, len(news)*mergedSessions.cols)
	runs := a.rows(1, (len(news)+len(turns))*mergedRuns.cols)
	msgs := a.rows(2, (len(news)+len(turns)+len(finishes))*mergedPlainMessages.cols)
	wide := a.rows(3, 0) // mergedMessages' rows: the messages that are not plain
	// addMessage adds the row of a message (messageRow) to the messages to insert.
	addMessage := func(row []any, sessionID string, seq int64, parent any) {
		if plainMessage(row) {
			msgs = appendMessageArgs(msgs, row, sessionID, seq, parent, true)
		} else {
			wide = appendMessageArgs(wide, row, sessionID, seq, parent, false)
		}
	}
	updates := a.rows(4, (len(turns)+len(finishes))*mergedUpdate.cols)
	evRows := a.rows(5, (len(finishes)+len(events))*mergedEvents.cols)
	ends := a.rows(6, len(finishes)*mergedEnds.cols)
	defer func() { a.args = [...][]any{sessions, runs, msgs, wide, updates, evRows, ends} }()
	for _, p := range news { // as beginNewSession
		b, m := p.b, p.b.Messages[0]
		sess := b.NewSession
		if sess.ProjectID != "" {
			if err := projectExists(ctx, tx, sess.ProjectID); err != nil {
				return err
			}
		}
		p.first, p.last, p.links = 1, 1, rowcodec.LinkParents(b.Messages, "")
		if len(p.links.Outside) > 0 {
			return errMerged
		}
		total := rowcodec.TotalUsage(b.Messages)
		sessions = append(sessions, sess.ID, sess.Title, sess.Owner, micros(sess.CreatedAt),
			max(micros(sess.UpdatedAt), micros(m.CreatedAt)), nullable(sess.ProjectID), b.Reserve, int64(1),
			total.PromptTokens, total.CompletionTokens, total.TotalTokens, total.ReasoningTokens, total.CachedTokens, total.Cost,
			max(0, rowcodec.OpenCallsDelta(b.Messages)), m.ID, p.links.Branches)
		b.Run.FirstSeq = 1
		runs = appendRun(runs, b.Run, p.tools)
		addMessage(p.rows[0], sess.ID, 1, nullStr(p.links.Parents[0]))
	}
	// appendTurn adds the message of an append to a session found (as appendMessages) and the
	// session's update, whose event numbers are seq.
	appendTurn := func(sessionID string, r *sessionRow, ms []*parley.Message, row []any, seq int64) (int64, rowcodec.Links, bool) {
		links := rowcodec.LinkParents(ms, r.leaf.String)
		if len(links.Outside) > 0 {
			return 0, links, false
		}
		last, m := r.last+1, ms[0]
		addMessage(row, sessionID, last, nullStr(links.Parents[0]))
		total := rowcodec.TotalUsage(ms)
		updates = append(updates, sessionID, last, seq, micros(m.CreatedAt),
			total.PromptTokens, total.CompletionTokens, total.TotalTokens, total.ReasoningTokens, total.CachedTokens, total.Cost,
			rowcodec.OpenCallsDelta(ms), m.ID, links.Branches)
		return last, links, true
	}
	for _, p := range turns { // as BeginRun's appendMessages and createRun
		b, r := p.b, found[p.sessionID]
		var ok bool
		if p.last, p.links, ok = appendTurn(p.sessionID, r, b.Messages, p.rows[0], r.seq+b.Reserve); !ok {
			return errMerged
		}
		p.first = r.seq + 1
		b.Run.FirstSeq = p.first
		runs = appendRun(runs, b.Run, p.tools)
	}
	for _, p := range finishes { // as FinishRun's appendMessages, events and endRun
		f, r := p.f, found[p.f.SessionID]
		seq := r.seq
		if seq == f.Limit {
			seq = f.Last
		}
		var ok bool
		if p.last, p.links, ok = appendTurn(f.SessionID, r, f.Messages, p.rows[0], seq); !ok {
			return errMerged
		}
		if err := p.encodeEvents(); err != nil {
			return err
		}
		var stored rowcodec.Covered
		if len(r.stored) > 0 {
			stored = rowcodec.RangesCover(r.stored)
		}
		evRows = appendEventRows(evRows, f.SessionID, f.At, rowcodec.CompactEventBatches(f.Events, stored))
		if r.running {
			ends = append(ends, f.RunID, f.Finish, micros(f.At))
		} else {
			p.ended = parley.Errorf(parley.ECConflict, "run %s: not running on instance %s", f.RunID, f.Instance)
		}
	}
	for _, p := range events { // as appendEvents
		batches := p.batches
		if r := found[p.sessionID]; len(r.stored) > 0 {
			batches = rowcodec.CompactEventBatches(p.evs, rowcodec.RangesCover(r.stored))
		}
		evRows = appendEventRows(evRows, p.sessionID, p.at, batches)
	}
	// On the writer's connection directly (writeconn.go); the ends last, whose count tells
	// whether each run ended.
	stmts := [...]rawRun{{mergedSessions, sessions}, {mergedRuns, runs}, {mergedPlainMessages, msgs}, {mergedMessages, wide},
		{mergedUpdate, updates}, {mergedEvents, evRows}, {mergedEnds, ends}}
	var changed [len(stmts)]int64
	if err := s.execRaw(ctx, stmts[:], changed[:]); err != nil {
		return err
	}
	if changed[len(stmts)-1] != int64(len(ends)/mergedEnds.cols) {
		return errMerged
	}
	return nil
}

// mergeArgs are the slices a merge fills, kept by the writer from one batch to the next
// instead of made anew for each (about 1.2 KB a chat at 32 in flight): merge runs only in the
// writer's transaction, one batch at a time. A batch's rows are cleared once it is done, so
// that no caller's strings and bytes are kept past it, and a slice grown past mergeArgsKeep
// elements (a batch far larger than most) is let go of.
type mergeArgs struct {
	news, turns []*beginPart
	finishes    []*finishPart
	events      []*eventsPart
	read        []any    // mergedRead's rows
	args        [7][]any // the rows of merge's seven statements, in stmts' order
}

// mergeArgsKeep bounds each slice a merge keeps for the next, in elements.
const mergeArgsKeep = 4096

// rows returns the i-th statement's slice, empty, with room for at least n elements.
func (a *mergeArgs) rows(i, n int) []any {
	if r := a.args[i]; cap(r) >= n {
		return r[:0]
	}
	return make([]any, 0, n)
}

// release clears what a merge filled and keeps the slices for the next, up to mergeArgsKeep
// elements each.
func (a *mergeArgs) release() {
	a.news = keep(a.news)
	a.turns = keep(a.turns)
	a.finishes = keep(a.finishes)
	a.events = keep(a.events)
	a.read = keep(a.read)
	for i := range a.args {
		a.args[i] = keep(a.args[i])
	}
}

// keep clears s and returns it empty, or nil if it is larger than mergeArgsKeep.
func keep[T any](s []T) []T {
	clear(s)
	if cap(s) > mergeArgsKeep {
		return nil
	}
	return s[:0]
}

// appendRun adds mergedRuns' row of r to args.
func appendRun(args []any, r *parley.RunRecord, tools any) []any {
	return append(args, r.ID, r.SessionID, r.Owner, r.Model, tools, r.Instance, micros(r.LeaseUntil), r.Attempts, r.FirstSeq,
		micros(r.CreatedAt), micros(r.CreatedAt))
}

// appendEventRows adds mergedEvents' rows of batches to args.
func appendEventRows(args []any, sessionID string, at time.Time, batches []rowcodec.EventBatch) []any {
	for _, b := range batches {
		args = append(args, sessionID, b.First, b.Last, b.Data, micros(at))
	}
	return args
}
