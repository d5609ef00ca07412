package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/groupcommit"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// Merging a batch's like writes. A group-commit batch under load holds many chats' writes: the
// begins of new sessions' runs, the ends of runs and the writes of running runs' events. Each on
// its own is one or two statements, and every statement costs a backend a bind, an executor's
// start and end and its share of the protocol, and the batch a round trip. Merged
// (groupcommit.Merger), a batch's begins are one statement and its ends (with its events' writes)
// two, whatever their number, each taking its rows from arrays (unnest).
// What they store is what each write's own statements would store (the tests hold them to it);
// the rows are locked in the order of their sessions' ids, as a batch's writes run.
//
// Merge says only that a part failed, not which one: the writer then runs the batch again with
// a savepoint around each write, each by its own statements, and each caller gets its own error.

var _ groupcommit.Merger[pgx.Tx] = pgTx{}

// errMerged is a merged part's failure: its batch runs again, each write on its own.
var errMerged = errors.New("postgres: a merged write failed")

// Merge runs the parts of a batch's writes that can be merged (beginPart, finishPart,
// eventsPart): the begins in one statement and the answers of the ends in another, sent together,
// then the ends' and the writes' rows of events and the runs' ends in a third, which waits to go
// with the batch's COMMIT (pipeTx.hold). A batch of new sessions' begins alone sends them with
// its COMMIT too. A held statement that fails makes the commit fail with groupcommit.ErrApart,
// and the batch runs again, each write by its own statements.
func (pgTx) Merge(ctx context.Context, tx pgx.Tx, parts []any) error {
	var (
		begins   []*beginPart
		finishes []*finishPart
		events   []*eventsPart
	)
	for _, p := range parts {
		switch p := p.(type) {
		case *beginPart:
			begins = append(begins, p)
		case *finishPart:
			finishes = append(finishes, p)
		case *eventsPart:
			events = append(events, p)
		default:
			return fmt.Errorf("postgres: no merge for %T", p)
		}
	}
	// The merged statements find their rows by key, a few among many: without this, a plan
	// made while the tables were small (a new database; PostgreSQL keeps a statement's generic
	// plan once made) reads the whole table on each batch once they have grown. The setting
	// holds for the rest of the batch's transaction, whose other writes (the group-commit
	// writer's: sessions, messages, runs, event numbers, the tool-call ledger) find their rows
	// by key as well.
	pt, ok := tx.(*pipeTx)
	if !ok {
		return fmt.Errorf("postgres: no merge in a %T", tx)
	}
	if err := pt.queue(mergeSettings); err != nil {
		return err
	}
	// What needs no answer before the batch goes on goes with its COMMIT (pipeTx.hold): the
	// ends, the begins of new sessions, and the answers whose place is foreseen (hints.go). A
	// batch of those alone is one round trip. The turns' results, and the places of the other
	// answers (their ends' events carry them), are read first, in one round trip with the rest
	// of the begins.
	var foreseen, unknown []*finishPart
	for _, p := range finishes {
		if p.hint != nil {
			foreseen = append(foreseen, p)
		} else {
			unknown = append(unknown, p)
		}
	}
	switch {
	case len(unknown) > 0 || slices.ContainsFunc(begins, isTurn):
		if err := beginAndAnswer(ctx, tx, begins, unknown); err != nil {
			return err
		}
	case len(begins) > 0:
		if err := holdBegins(pt, begins); err != nil {
			return err
		}
	}
	if len(foreseen) > 0 {
		if err := holdAnswers(pt, foreseen); err != nil {
			return err
		}
	}
	if len(finishes) > 0 || len(events) > 0 {
		if err := endMerged(ctx, tx, pt, finishes, events); err != nil {
			return err
		}
	}
	return nil
}

// isTurn reports whether p begins a run in a session that exists.
func isTurn(p *beginPart) bool { return p.b.NewSession == nil }

// holdBegins holds the merged begins of new sessions' runs (mergedBeginSQL) to go with the
// batch's COMMIT. Nothing of its results is checked: the statement inserts a session, a run and
// a message for each element of its arrays, or fails.
func holdBegins(pt *pipeTx, begins []*beginPart) error {
	q, args, err := mergedStatement(mergedBeginSQL, beginArgs(begins))
	if err != nil {
		return err
	}
	return pt.hold(q, args, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		for _, p := range begins {
			p.first, p.last = 1, 1
			p.links = rowcodec.LinkParents(p.b.Messages, "")
			p.b.Run.FirstSeq = 1
		}
		return nil
	})
}

// beginAndAnswer runs the merged begins and answers (those there are), sent together.
func beginAndAnswer(ctx context.Context, tx pgx.Tx, all []*beginPart, finishes []*finishPart) error {
	var begins, turns []*beginPart
	for _, p := range all {
		if p.b.NewSession != nil {
			begins = append(begins, p)
		} else {
			turns = append(turns, p)
		}
	}
	b := &pgx.Batch{}
	queue := func(q string, args []any) error {
		q, args, err := mergedStatement(q, args)
		if err == nil {
			b.Queue(q, args...)
		}
		return err
	}
	if len(begins) > 0 {
		if err := queue(mergedBeginSQL, beginArgs(begins)); err != nil {
			return err
		}
	}
	if len(turns) > 0 {
		if err := queue(mergedTurnsSQL, turnArgs(turns)); err != nil {
			return err
		}
	}
	if len(finishes) > 0 {
		if err := queue(mergedAnswersSQL, answerArgs(finishes)); err != nil {
			return err
		}
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if len(begins) > 0 {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(begins)) {
			return errMerged
		}
		for _, p := range begins {
			p.first, p.last = 1, 1
			p.links = rowcodec.LinkParents(p.b.Messages, "")
			p.b.Run.FirstSeq = 1
		}
	}
	if len(turns) > 0 {
		if err := readTurns(br, turns); err != nil {
			return err
		}
	}
	if len(finishes) > 0 {
		if err := readAnswers(br, finishes); err != nil {
			return err
		}
	}
	return br.Close()
}

// mergeSettings go before a batch's merged statements, in its transaction alone.
const mergeSettings = `SET LOCAL enable_seqscan = off`

// unnest returns `unnest($k::type[], …) AS name(col, …)` for cols (name type pairs), the
// parameters numbered from first.
func unnest(name string, first int, cols ...string) string {
	var args, names []string
	for i, c := range cols {
		col, typ, _ := strings.Cut(c, " ")
		args = append(args, "$"+strconv.Itoa(first+i)+"::"+typ+"[]")
		names = append(names, col)
	}
	return "unnest(" + strings.Join(args, ", ") + ") AS " + name + "(" + strings.Join(names, ", ") + ")"
}

// msgArrayCols are the columns msgArrays gives, as unnest takes them: the message's own, all but
// its session, seq and parent. JSON goes as text and is cast to jsonb.
var msgArrayCols = []string{"m_id text", "m_role text", "m_content text", "m_parts text", "m_name text", "m_calls text",
	"m_call_id text", "m_reasoning text", "m_run text", "m_model text", "m_latency bigint", "m_usage text", "m_success boolean",
	"m_resource text", "m_created timestamptz", "m_thinking text", "m_server text", "m_error text"}

// msgSelect is what the insert of messages selects from msgArrayCols, after its session and seq
// and before its parent.
const msgSelect = `m_role, m_content, m_parts::jsonb, m_name, m_calls::jsonb, m_call_id, m_reasoning, m_run, m_model,
	m_latency, m_usage::jsonb, m_success, m_resource, m_created, m_thinking::jsonb, m_server, m_error`

// msgArrays are the columns of messages, an array each (msgArrayCols).
type msgArrays struct {
	id, role                                               []string
	content, parts, name, calls, callID, reasoning, run, m []pgtype.Text
	latency                                                []int64
	usage                                                  []pgtype.Text
	success                                                []pgtype.Bool
	resource                                               []pgtype.Text
	created                                                []time.Time
	thinking, server, error                                []pgtype.Text
}

// newMsgArrays returns msgArrays with room for n messages.
func newMsgArrays(n int) msgArrays {
	return msgArrays{id: make([]string, 0, n), role: make([]string, 0, n), content: make([]pgtype.Text, 0, n),
		parts: make([]pgtype.Text, 0, n), name: make([]pgtype.Text, 0, n), calls: make([]pgtype.Text, 0, n),
		callID: make([]pgtype.Text, 0, n), reasoning: make([]pgtype.Text, 0, n), run: make([]pgtype.Text, 0, n),
		m: make([]pgtype.Text, 0, n), latency: make([]int64, 0, n), usage: make([]pgtype.Text, 0, n),
		success: make([]pgtype.Bool, 0, n), resource: make([]pgtype.Text, 0, n), created: make([]time.Time, 0, n),
		thinking: make([]pgtype.Text, 0, n), server: make([]pgtype.Text, 0, n), error: make([]pgtype.Text, 0, n)}
}

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// jsonText is an encoded column (rowcodec.Columns: a string or nil) as text.
func jsonText(v any) pgtype.Text {
	s, ok := v.(string)
	return pgtype.Text{String: s, Valid: ok}
}

func (a *msgArrays) add(m *parley.Message, c rowcodec.Columns) {
	a.id, a.role = append(a.id, m.ID), append(a.role, string(m.Role))
	a.content, a.parts = append(a.content, jsonText(c.Text)), append(a.parts, jsonText(c.Parts))
	a.name, a.calls, a.callID = append(a.name, text(m.Name)), append(a.calls, jsonText(c.ToolCalls)), append(a.callID, text(m.ToolCallID))
	a.reasoning, a.run, a.m = append(a.reasoning, text(m.Reasoning)), append(a.run, text(m.RunID)), append(a.m, text(m.Model))
	a.latency, a.usage = append(a.latency, m.LatencyMS), append(a.usage, jsonText(c.Usage))
	var success pgtype.Bool
	if m.Success != nil {
		success = pgtype.Bool{Bool: *m.Success, Valid: true}
	}
	a.success, a.resource, a.created = append(a.success, success), append(a.resource, text(m.ResourceID)), append(a.created, m.CreatedAt.UTC())
	a.thinking, a.server, a.error = append(a.thinking, jsonText(c.Thinking)), append(a.server, text(m.Server)), append(a.error, text(string(m.Error)))
}

func (a *msgArrays) args() []any {
	return []any{a.id, a.role, a.content, a.parts, a.name, a.calls, a.callID, a.reasoning, a.run, a.m, a.latency, a.usage,
		a.success, a.resource, a.created, a.thinking, a.server, a.error}
}

// beginCols are the columns of mergedBeginSQL's rows before the message's: the session's and
// the run's.
var beginCols = []string{"sid text", "title text", "owner text", "s_created timestamptz", "s_updated timestamptz",
	"project text", "reserve bigint", "pt bigint", "ct bigint", "tt bigint", "rt bigint", "cht bigint", "cost float8",
	"open_calls integer", "rid text", "r_owner text", "r_model text", "tools text", "instance text", "lease timestamptz",
	"attempts integer", "r_created timestamptz"}

// mergedBeginSQL inserts the sessions, runs and first messages of new sessions' runs, a row of
// each per element of its arrays (beginArgs), as beginNewSessionOne does for one: the session
// with its event numbers reserved from 1, its one message (seq 1, no parent) as its leaf, the
// run's first event number 1. It returns nothing; its tag counts the messages.
var mergedBeginSQL = `WITH a AS MATERIALIZED (SELECT * FROM ` + unnest("a", 1, append(beginCols, msgArrayCols...)...) + `),
	s AS (INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id, event_seq, last_seq, prompt_tokens,
		completion_tokens, total_tokens, reasoning_tokens, cached_tokens, cost, open_calls, leaf_id, branched)
		SELECT sid, title, owner, s_created, s_updated, project, reserve, 1, pt, ct, tt, rt, cht, cost, open_calls, m_id, false
		FROM a ORDER BY sid),
	r AS (INSERT INTO runs (` + runCols + `)
		SELECT rid, sid, r_owner, r_model, tools::jsonb, 'running', '', instance, lease, attempts, 1, r_created, r_created
		FROM a ORDER BY sid)
	INSERT INTO messages (` + messageCols + `)
	SELECT m_id, sid, 1, ` + msgSelect + `, NULL FROM a ORDER BY sid`

// beginArgs are mergedBeginSQL's arguments for ps (each mergeable).
func beginArgs(ps []*beginPart) []any {
	n := len(ps)
	strs := func() []string { return make([]string, 0, n) }
	texts := func() []pgtype.Text { return make([]pgtype.Text, 0, n) }
	times := func() []time.Time { return make([]time.Time, 0, n) }
	ints := func() []int64 { return make([]int64, 0, n) }
	var (
		sid, title, owner, rid, rOwner, rModel, instance = strs(), strs(), strs(), strs(), strs(), strs(), strs()
		project, tools                                   = texts(), texts()
		sCreated, sUpdated, lease, rCreated              = times(), times(), times(), times()
		reserve, pt, ct, tt, rt, cht                     = ints(), ints(), ints(), ints(), ints(), ints()
		cost                                             = make([]float64, 0, n)
		openCalls, attempts                              = make([]int32, 0, n), make([]int32, 0, n)
		msgs                                             = newMsgArrays(n)
	)
	for _, p := range ps {
		sess, r, m := p.b.NewSession, p.b.Run, p.b.Messages[0]
		updated := sess.UpdatedAt.UTC()
		if at := m.CreatedAt.UTC(); at.After(updated) {
			updated = at
		}
		total := rowcodec.TotalUsage(p.b.Messages)
		sid, title, owner = append(sid, sess.ID), append(title, sess.Title), append(owner, sess.Owner)
		sCreated, sUpdated, project = append(sCreated, sess.CreatedAt.UTC()), append(sUpdated, updated), append(project, text(sess.ProjectID))
		reserve = append(reserve, p.b.Reserve)
		pt, ct, tt = append(pt, total.PromptTokens), append(ct, total.CompletionTokens), append(tt, total.TotalTokens)
		rt, cht, cost = append(rt, total.ReasoningTokens), append(cht, total.CachedTokens), append(cost, total.Cost)
		openCalls = append(openCalls, int32(max(0, rowcodec.OpenCallsDelta(p.b.Messages))))
		var tool pgtype.Text
		if p.tools != nil {
			tool = pgtype.Text{String: string(p.tools), Valid: true}
		}
		rid, rOwner, rModel, tools = append(rid, r.ID), append(rOwner, r.Owner), append(rModel, r.Model), append(tools, tool)
		instance, lease = append(instance, r.Instance), append(lease, r.LeaseUntil.UTC())
		attempts, rCreated = append(attempts, int32(r.Attempts)), append(rCreated, r.CreatedAt.UTC())
		msgs.add(m, p.cols[0])
	}
	return append([]any{sid, title, owner, sCreated, sUpdated, project, reserve, pt, ct, tt, rt, cht, cost, openCalls,
		rid, rOwner, rModel, tools, instance, lease, attempts, rCreated}, msgs.args()...)
}

// turnCols are the columns of mergedTurnsSQL's rows before the message's: the session, the
// numbers to reserve, the message's usage and open calls, and the run's.
var turnCols = []string{"sid text", "reserve bigint", "pt bigint", "ct bigint", "tt bigint", "rt bigint", "cht bigint",
	"cost float8", "open_calls integer", "rid text", "r_owner text", "r_model text", "tools text", "instance text",
	"lease timestamptz", "attempts integer", "r_created timestamptz"}

// mergedTurnsSQL begins runs in sessions that exist, one message each, as beginInSession does for
// one: each session's row is locked (in the order of their ids) and updated once for what its
// two updates there do (the event numbers reserved; the message its leaf, its usage added), the
// run inserted with the first number reserved, and the message inserted after the leaf the
// session had, with the seq the update took. It returns each message's session, parent and seq,
// and its run's first event number; a session that is not there returns no row.
var mergedTurnsSQL = `WITH a AS MATERIALIZED (SELECT * FROM ` + unnest("a", 1, append(turnCols, msgArrayCols...)...) + `),
	old AS MATERIALIZED (SELECT id, leaf_id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE),
	s AS (UPDATE sessions SET event_seq = sessions.event_seq + a.reserve, last_seq = sessions.last_seq + 1,
		updated_at = GREATEST(sessions.updated_at, a.m_created),
		prompt_tokens = sessions.prompt_tokens + a.pt, completion_tokens = sessions.completion_tokens + a.ct,
		total_tokens = sessions.total_tokens + a.tt, reasoning_tokens = sessions.reasoning_tokens + a.rt,
		cached_tokens = sessions.cached_tokens + a.cht, cost = sessions.cost + a.cost,
		open_calls = GREATEST(0, sessions.open_calls + a.open_calls), leaf_id = a.m_id
		FROM a JOIN old ON old.id = a.sid WHERE sessions.id = a.sid AND sessions.id = ANY($1::text[])
		RETURNING sessions.id, sessions.event_seq - a.reserve + 1 AS first, sessions.last_seq, old.leaf_id),
	r AS (INSERT INTO runs (` + runCols + `)
		SELECT rid, sid, r_owner, r_model, tools::jsonb, 'running', '', instance, lease, attempts, s.first, r_created, r_created
		FROM a JOIN s ON s.id = a.sid ORDER BY sid),
	m AS (INSERT INTO messages (` + messageCols + `)
		SELECT m_id, sid, s.last_seq, ` + msgSelect + `, s.leaf_id FROM a JOIN s ON s.id = a.sid ORDER BY sid
		RETURNING session_id, parent_id, seq)
	SELECT m.session_id, m.parent_id, m.seq, s.first FROM m JOIN s ON s.id = m.session_id`

// turnArgs are mergedTurnsSQL's arguments for ps (each mergeable, of a session that exists).
func turnArgs(ps []*beginPart) []any {
	n := len(ps)
	ints := func() []int64 { return make([]int64, 0, n) }
	strs := func() []string { return make([]string, 0, n) }
	var (
		sid, rid, rOwner, rModel, instance = strs(), strs(), strs(), strs(), strs()
		reserve, pt, ct, tt, rt, cht       = ints(), ints(), ints(), ints(), ints(), ints()
		cost                               = make([]float64, 0, n)
		openCalls, attempts                = make([]int32, 0, n), make([]int32, 0, n)
		tools                              = make([]pgtype.Text, 0, n)
		lease, rCreated                    = make([]time.Time, 0, n), make([]time.Time, 0, n)
		msgs                               = newMsgArrays(n)
	)
	for _, p := range ps {
		r, m := p.b.Run, p.b.Messages[0]
		total := rowcodec.TotalUsage(p.b.Messages)
		sid, reserve = append(sid, p.b.SessionID), append(reserve, p.b.Reserve)
		pt, ct, tt = append(pt, total.PromptTokens), append(ct, total.CompletionTokens), append(tt, total.TotalTokens)
		rt, cht, cost = append(rt, total.ReasoningTokens), append(cht, total.CachedTokens), append(cost, total.Cost)
		openCalls = append(openCalls, int32(rowcodec.OpenCallsDelta(p.b.Messages)))
		var tool pgtype.Text
		if p.tools != nil {
			tool = pgtype.Text{String: string(p.tools), Valid: true}
		}
		rid, rOwner, rModel, tools = append(rid, r.ID), append(rOwner, r.Owner), append(rModel, r.Model), append(tools, tool)
		instance, lease = append(instance, r.Instance), append(lease, r.LeaseUntil.UTC())
		attempts, rCreated = append(attempts, int32(r.Attempts)), append(rCreated, r.CreatedAt.UTC())
		msgs.add(m, p.cols[0])
	}
	return append([]any{sid, reserve, pt, ct, tt, rt, cht, cost, openCalls, rid, rOwner, rModel, tools, instance, lease,
		attempts, rCreated}, msgs.args()...)
}

// readTurns reads mergedTurnsSQL's rows into ps: each one's first event number, last seq and
// links. A part whose session returned no row fails the merge.
func readTurns(br pgx.BatchResults, ps []*beginPart) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	bySession := make(map[string]*beginPart, len(ps))
	for _, p := range ps {
		bySession[p.b.SessionID] = p
		p.last = 0
	}
	for rows.Next() {
		var (
			sid        string
			parent     pgtype.Text
			seq, first int64
		)
		if err := rows.Scan(&sid, &parent, &seq, &first); err != nil {
			return err
		}
		p := bySession[sid]
		if p == nil {
			return errMerged
		}
		p.first, p.last, p.links = first, seq, rowcodec.LinkParents(p.b.Messages, parent.String)
		p.b.Run.FirstSeq = first
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range ps {
		if p.last == 0 {
			return errMerged
		}
	}
	return nil
}

// answerCols are the columns of mergedAnswersSQL's rows before the message's: the session, the
// answer's usage and open calls, and the event numbers to give back.
var answerCols = []string{"sid text", "pt bigint", "ct bigint", "tt bigint", "rt bigint", "cht bigint", "cost float8",
	"open_calls integer", "lim bigint", "lst bigint"}

// mergedAnswersSQL appends one answer to each of several sessions, as insertOneChainedReleasing
// does for one: each session's row is locked (in the order of their ids) and updated (the answer
// its leaf, its usage added, the event numbers after lst given back if lim is still the last
// reserved), and the answer inserted after the leaf it had, with the seq the update took. It
// returns each answer's session, parent and seq; a session that is not there returns no row.
var mergedAnswersSQL = `WITH a AS MATERIALIZED (SELECT * FROM ` + unnest("a", 1, append(answerCols, msgArrayCols...)...) + `),` +
	mergedAnswersBody + `
	INSERT INTO messages (` + messageCols + `)
	SELECT m_id, sid, s.last_seq, ` + msgSelect + `, s.leaf_id FROM a JOIN s ON s.id = a.sid ORDER BY sid
	RETURNING session_id, parent_id, seq`

// mergedAnswersBody are mergedAnswersSQL's CTEs after a: the sessions' rows locked and updated.
const mergedAnswersBody = `
	old AS MATERIALIZED (SELECT id, leaf_id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE),
	s AS (UPDATE sessions SET last_seq = sessions.last_seq + 1, updated_at = GREATEST(sessions.updated_at, a.m_created),
		prompt_tokens = sessions.prompt_tokens + a.pt, completion_tokens = sessions.completion_tokens + a.ct,
		total_tokens = sessions.total_tokens + a.tt, reasoning_tokens = sessions.reasoning_tokens + a.rt,
		cached_tokens = sessions.cached_tokens + a.cht, cost = sessions.cost + a.cost,
		open_calls = GREATEST(0, sessions.open_calls + a.open_calls), leaf_id = a.m_id,
		event_seq = CASE WHEN sessions.event_seq = a.lim THEN a.lst ELSE sessions.event_seq END
		FROM a JOIN old ON old.id = a.sid WHERE sessions.id = a.sid AND sessions.id = ANY($1::text[])
		RETURNING sessions.id, sessions.last_seq, old.leaf_id)`

// mergedForeseenSQL is mergedAnswersSQL for answers whose places are foreseen (answerHint: the
// seq each takes, and its parent), which their ends' events already carry: it goes with the
// batch's COMMIT, unread before it, and fails (a text that is no boolean) if an answer did not
// take its foreseen place or its session is gone, so that the batch runs again, each write by
// its own statements. It returns a row for each answer.
var mergedForeseenSQL = `WITH a AS MATERIALIZED (SELECT * FROM ` + unnest("a", 1, slices.Concat(answerCols, msgArrayCols,
	[]string{"want_seq bigint", "want_parent text"})...) + `),` + mergedAnswersBody + `,
	m AS (INSERT INTO messages (` + messageCols + `)
	SELECT m_id, sid, s.last_seq, ` + msgSelect + `, s.leaf_id FROM a JOIN s ON s.id = a.sid ORDER BY sid
	RETURNING session_id, parent_id, seq)
	SELECT a.sid, CASE WHEN m.seq = a.want_seq AND m.parent_id IS NOT DISTINCT FROM a.want_parent THEN true
		ELSE ('the answer of session ' || a.sid || ' is not where it was foreseen: stored apart')::boolean END
	FROM a LEFT JOIN m ON m.session_id = a.sid`

// holdAnswers numbers the answers of ps where their hints say, and holds mergedForeseenSQL to go
// with the batch's COMMIT.
func holdAnswers(pt *pipeTx, ps []*finishPart) error {
	want, parent := make([]int64, 0, len(ps)), make([]string, 0, len(ps))
	for _, p := range ps {
		p.last, p.links = p.hint.seq, rowcodec.LinkParents(p.f.Messages, p.hint.parent)
		want, parent = append(want, p.hint.seq), append(parent, p.hint.parent)
	}
	q, args, err := mergedStatement(mergedForeseenSQL, append(answerArgs(ps), want, parent))
	if err != nil {
		return err
	}
	return pt.hold(q, args, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		rows.Close()
		return rows.Err()
	})
}

// answerArgs are mergedAnswersSQL's arguments for ps (each mergeable).
func answerArgs(ps []*finishPart) []any {
	n := len(ps)
	ints := func() []int64 { return make([]int64, 0, n) }
	var (
		sid                 = make([]string, 0, n)
		pt, ct, tt, rt, cht = ints(), ints(), ints(), ints(), ints()
		cost                = make([]float64, 0, n)
		openCalls           = make([]int32, 0, n)
		lim, lst            = ints(), ints()
		msgs                = newMsgArrays(n)
	)
	for _, p := range ps {
		m := p.f.Messages[0]
		total := rowcodec.TotalUsage(p.f.Messages)
		sid = append(sid, p.f.SessionID)
		pt, ct, tt = append(pt, total.PromptTokens), append(ct, total.CompletionTokens), append(tt, total.TotalTokens)
		rt, cht, cost = append(rt, total.ReasoningTokens), append(cht, total.CachedTokens), append(cost, total.Cost)
		openCalls = append(openCalls, int32(rowcodec.OpenCallsDelta(p.f.Messages)))
		lim, lst = append(lim, p.rel.Limit), append(lst, p.rel.Last)
		msgs.add(m, p.cols[0])
	}
	return append([]any{sid, pt, ct, tt, rt, cht, cost, openCalls, lim, lst}, msgs.args()...)
}

// readAnswers reads mergedAnswersSQL's rows into ps: each one's last seq and links. A part
// whose session returned no row (deleted) fails the merge.
func readAnswers(br pgx.BatchResults, ps []*finishPart) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	bySession := make(map[string]*finishPart, len(ps))
	for _, p := range ps {
		bySession[p.f.SessionID] = p
		p.last = 0
	}
	for rows.Next() {
		var (
			sid    string
			parent pgtype.Text
			seq    int64
		)
		if err := rows.Scan(&sid, &parent, &seq); err != nil {
			return err
		}
		p := bySession[sid]
		if p == nil {
			return errMerged
		}
		p.last, p.links = seq, rowcodec.LinkParents(p.f.Messages, parent.String)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range ps {
		if p.last == 0 {
			return errMerged
		}
	}
	return nil
}

// mergedEndsSQL stores a row of events for each of several runs, each unless a stored row
// overlaps it (as insertNewEventBatch), and ends the runs (as endRunSQL; a row whose run is NULL
// ends none). It goes with the batch's COMMIT (pipeTx.hold), unread before it: a row that a
// stored row overlaps fails it (a text that is no boolean), and the batch runs again, each write
// by its own statements, which store the events around the stored rows. It returns, for each
// row, whether its run was ended. It finds the runs by primary key: "state <> 'ended'" (see
// notEnded).
var mergedEndsSQL = `WITH e AS MATERIALIZED (SELECT * FROM ` + unnest("e", 1, "sid text", "fs bigint", "ls bigint", "data bytea",
	"at timestamptz", "finish text", "rid text", "inst text") + `),
	i AS (INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at)
		SELECT sid, fs, ls, data, at FROM e WHERE
		(SELECT 1 FROM event_batches b WHERE b.session_id = e.sid AND b.first_seq <= e.ls AND b.last_seq >= e.fs LIMIT 1) IS NULL
		ORDER BY sid RETURNING session_id),
	r AS (UPDATE runs SET state = 'ended', finish = e.finish, updated_at = e.at FROM e
		WHERE runs.id = e.rid AND runs.id = ANY($7::text[]) AND runs.instance = e.inst AND runs.` + notEnded + ` RETURNING runs.id)
	SELECT e.sid, CASE WHEN EXISTS (SELECT 1 FROM i WHERE i.session_id = e.sid) THEN EXISTS (SELECT 1 FROM r WHERE r.id = e.rid)
		ELSE ('events of session ' || e.sid || ' overlap a stored row: stored apart')::boolean END FROM e`

// endMerged encodes the events of ps, now that their answers are numbered, and stores the rest of
// each: those whose events make one row in one statement (mergedEndsSQL) with the rows of evs
// (each one row, no run to end), held to go with the batch's COMMIT, the others each as
// finishBatch does.
func endMerged(ctx context.Context, tx pgx.Tx, pt *pipeTx, ps []*finishPart, evs []*eventsPart) error {
	var (
		merged      []*finishPart
		sid, finish []string
		rid, inst   []pgtype.Text
		fs, ls      []int64
		data        [][]byte
		at          []time.Time
	)
	for _, p := range evs {
		eb := p.batches[0]
		sid, fs, ls, data = append(sid, p.sessionID), append(fs, eb.First), append(ls, eb.Last), append(data, eb.Data)
		at, finish, rid, inst = append(at, p.at.UTC()), append(finish, ""), append(rid, pgtype.Text{}), append(inst, pgtype.Text{})
	}
	for _, p := range ps {
		batches, err := p.encodeEvents()
		if err != nil {
			return err
		}
		if len(batches) != 1 {
			if p.ended, err = finishBatch(ctx, tx, *p.f, batches, nil); err != nil {
				return err
			}
			continue
		}
		f, eb := p.f, batches[0]
		merged = append(merged, p)
		sid, fs, ls, data = append(sid, f.SessionID), append(fs, eb.First), append(ls, eb.Last), append(data, eb.Data)
		at, finish, rid, inst = append(at, f.At.UTC()), append(finish, f.Finish), append(rid, text(f.RunID)), append(inst, text(f.Instance))
	}
	if len(sid) == 0 {
		return nil
	}
	finishing := make(map[string]*finishPart, len(merged))
	for _, p := range merged {
		finishing[p.f.SessionID] = p
	}
	q, args, err := mergedStatement(mergedEndsSQL, []any{sid, fs, ls, data, at, finish, rid, inst})
	if err != nil {
		return err
	}
	return pt.hold(q, args, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				s     string
				ended bool
			)
			if err := rows.Scan(&s, &ended); err != nil {
				return err
			}
			if p := finishing[s]; p != nil {
				p.ended = nil
				if !ended {
					p.ended = parley.Errorf(parley.ECConflict, "run %s: not running on instance %s", p.f.RunID, p.f.Instance)
				}
			}
		}
		return rows.Err()
	})
}
