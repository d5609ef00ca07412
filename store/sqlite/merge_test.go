package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/rowcodec"
	"github.com/parleyhq/parley/store/storetest"
)

// finishOf begins a run of a new session with a user's message and returns the end of that run:
// an answer and n events (the last two an answer's record and the run's done, encoded by the
// store; the others given as JSON).
func finishOf(t *testing.T, s *Store, n int, now time.Time) parley.RunFinish {
	t.Helper()
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
		LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
	first, err := s.BeginRun(context.Background(), &parley.RunBegin{NewSession: sess, Reserve: 100, Run: run, Messages: []*parley.Message{user}})
	if err != nil {
		t.Fatal(err)
	}
	answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("yes"), RunID: run.ID,
		CreatedAt: now.Add(time.Second), Usage: &parley.Usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5}}
	evs := make([]parley.EncodedEvent, n)
	for j := range evs {
		ev := &parley.Event{Seq: first + int64(j), Type: parley.EventChunk, RunID: run.ID, SessionID: sess.ID, Content: fmt.Sprintf("e%d", j)}
		evs[j] = parley.EncodedEvent{Seq: ev.Seq, Event: ev}
		switch j {
		case n - 2:
			ev.Type, ev.Content, ev.Message = parley.EventRecord, "", answer
		case n - 1:
			ev.Type, ev.Content, ev.FinishReason = parley.EventDone, "", parley.FinishStop
		default:
			if evs[j].JSON, err = json.Marshal(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	return parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer}, Events: evs,
		Limit: first + 99, Last: first + int64(n) - 1, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now.Add(time.Second)}
}

// storeOther stores evs (events with their Event) as a write before would have, with other
// contents.
func storeOther(t *testing.T, s *Store, sessionID string, at time.Time, evs ...parley.EncodedEvent) {
	t.Helper()
	var stored []parley.EncodedEvent
	for _, e := range evs {
		ev := *e.Event
		ev.Content = "stored"
		j, err := json.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, parley.EncodedEvent{Seq: ev.Seq, JSON: j, Event: &ev})
	}
	if err := s.AppendEncodedEvents(context.Background(), sessionID, at, stored); err != nil {
		t.Fatal(err)
	}
}

// mergeFixture returns writes of the kinds a batch merges, with what makes them differ: begins of
// runs (3 of new sessions: selected tools, a project, every column of a message, a message made
// after the session; 2 turns in sessions that exist), ends of runs begun here (a run no longer
// this instance's, events stored before, events that make two rows, numbers reserved again
// since, an answer with a tool call and a cost) and writes of a running run's events (one of
// them stored before).
func mergeFixture(t *testing.T, s *Store, now time.Time) ([]*parley.RunBegin, []parley.RunFinish, []storetest.EventWrite) {
	t.Helper()
	ctx := context.Background()
	begins := storetest.MergeBegins(t, s, now)
	var finishes []parley.RunFinish
	for i := range 6 {
		f := finishOf(t, s, 7, now)
		switch i {
		case 1: // the run is another instance's now
			f.Instance = "other"
		case 2: // two of its events were stored, with other contents
			storeOther(t, s, f.SessionID, f.At, f.Events[1:3]...)
		case 3: // a gap: two rows
			f.Events = append(f.Events[:2:2], f.Events[3:]...)
		case 4: // the numbers were reserved again since: none go back
			f.Limit--
		case 5: // an answer with a tool call and a cost
			a := f.Messages[0]
			a.ToolCalls = []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "x", Arguments: "{}"}}}
			a.Usage.Cost = 0.5
		}
		finishes = append(finishes, f)
	}
	for i := range 2 { // turns: runs in sessions that exist, their last run ended
		f := finishOf(t, s, 7, now)
		if err := s.FinishRun(ctx, f); err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(10+i) * time.Second)
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: f.SessionID, Owner: "o", Model: "m2", Instance: "i",
			LeaseUntil: at.Add(time.Minute), CreatedAt: at}
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("again"), RunID: run.ID, CreatedAt: at}
		if i == 0 {
			run.SelectedTools = []string{"z"}
		} else {
			m.Usage = &parley.Usage{PromptTokens: 1, TotalTokens: 1, Cost: 0.125}
		}
		begins = append(begins, &parley.RunBegin{SessionID: f.SessionID, Reserve: 30, Run: run, Messages: []*parley.Message{m}})
	}
	var writes []storetest.EventWrite
	for i := range 2 {
		f := finishOf(t, s, 7, now)
		evs := f.Events[:4]
		if i == 1 { // one of them was stored before, with other contents
			storeOther(t, s, f.SessionID, f.At, evs[2])
		}
		writes = append(writes, storetest.EventWrite{SessionID: f.SessionID, At: f.At.Add(time.Duration(i) * time.Second), Events: evs})
	}
	return begins, finishes, writes
}

// dumpRows returns the rows q reads (every column, by name), one a line.
func dumpRows(t *testing.T, tx *sql.Tx, q string, args ...any) string {
	t.Helper()
	rows, err := tx.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = fmt.Sprintf("bytes(%q)", bs)
			}
			fmt.Fprintf(&b, "%s=%v(%T) ", cols[i], v, v)
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A batch's merged writes must leave the rows, and return the results, that the same writes leave
// and return run one after another by their own statements. Both are run in a transaction that is
// then rolled back, on the same data.
func TestMergedWritesLeaveWhatEachWouldAlone(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	begins, finishes, writes := mergeFixture(t, s, now)
	var (
		parts []any
		ids   []any
	)
	for _, w := range writes {
		p := &eventsPart{s: s, sessionID: w.SessionID, at: w.At, evs: w.Events, batches: rowcodec.CompactEventBatches(w.Events, nil)}
		parts, ids = append(parts, p), append(ids, w.SessionID)
	}
	for _, b := range begins {
		p, err := newBeginPart(s, b)
		if err != nil {
			t.Fatal(err)
		}
		if !p.mergeable() {
			t.Fatalf("begin %s is not mergeable", b.SessionID)
		}
		parts, ids = append(parts, p), append(ids, b.SessionID)
	}
	for i := range finishes {
		p, err := newFinishPart(s, &finishes[i])
		if err != nil {
			t.Fatal(err)
		}
		if !p.mergeable() {
			t.Fatalf("finish %s is not mergeable", finishes[i].SessionID)
		}
		parts, ids = append(parts, p), append(ids, finishes[i].SessionID)
	}
	in := "(" + placeholders(len(ids)) + ")"
	// run writes parts (merged or each alone) in a transaction, and returns what they left and
	// returned; the transaction is rolled back.
	run := func(merged bool) string {
		tx := writeTx(t, s)
		defer sqlTx{s.db, &s.ran, s}.Rollback(tx)
		before := s.ran.Load()
		if merged {
			if err := s.merge(ctx, tx, parts); err != nil {
				t.Fatalf("merged: %v", err)
			}
		} else {
			for _, p := range parts {
				var err error
				switch p := p.(type) {
				case *beginPart:
					err = p.run(ctx, tx)
				case *finishPart:
					err = p.run(ctx, tx)
				case *eventsPart:
					err = p.run(ctx, tx)
				}
				if err != nil {
					t.Fatalf("alone: %v", err)
				}
			}
		}
		t.Logf("merged %v: %d statements", merged, s.ran.Load()-before)
		var out strings.Builder
		for _, p := range parts {
			switch p := p.(type) {
			case *beginPart:
				fmt.Fprintf(&out, "begin: first %d last %d links %+v run's first %d\n", p.first, p.last, p.links, p.b.Run.FirstSeq)
			case *finishPart:
				var evs []string
				for _, e := range p.f.Events {
					evs = append(evs, string(e.JSON))
				}
				fmt.Fprintf(&out, "finish: last %d links %+v ended %v events %s\n", p.last, p.links, p.ended, evs)
			}
		}
		for _, q := range []string{
			`SELECT * FROM sessions WHERE id IN ` + in + ` ORDER BY id`,
			`SELECT * FROM runs WHERE session_id IN ` + in + ` ORDER BY id`,
			`SELECT * FROM messages WHERE session_id IN ` + in + ` ORDER BY session_id, seq`,
			`SELECT * FROM event_batches WHERE session_id IN ` + in + ` ORDER BY session_id, first_seq`,
		} {
			out.WriteString(dumpRows(t, tx, q, ids...))
		}
		return out.String()
	}
	alone := run(false)
	merged := run(true)
	if merged != alone {
		t.Errorf("merged, the writes left and returned\n%s\neach alone\n%s", merged, alone)
	}
	// Some of the writes differ from the others (so that the comparison says something).
	for _, want := range []string{`not running on instance other`, `\"stored\"`, `project_id=` + begins[1].NewSession.ProjectID,
		`selected_tools=["z"]`, `cost=0.125`} {
		if !strings.Contains(alone, want) {
			t.Errorf("the writes alone left no %s", want)
		}
	}
}

// Through the store: writes that wait while the writer is held make one batch, which merges them;
// a write of it that fails (a project that is not there, a run already running in a turn's
// session, a session deleted) gets its own error and fails none of its batch-mates.
func TestABatchMergesItsWritesAndAFailureStaysItsOwn(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("failure=%v", fail), func(t *testing.T) {
			s := openTemp(t)
			defer s.Close()
			now := time.Now().UTC().Truncate(time.Microsecond)
			begins, finishes, writes := mergeFixture(t, s, now)
			if fail {
				storetest.MergeFailures(t, s, now, begins, finishes)
			}
			// One read of the 10 sessions that exist, one insert each of the sessions, runs,
			// plain messages, other messages (a message with every column, an answer with a tool
			// call) and event rows, one update each of the sessions and of the runs: 8 (and the
			// project's read, not counted), where the 13 writes each by its own statements run 54
			// (TestMergedWritesLeaveWhatEachWouldAlone logs both).
			want := int64(8)
			if fail {
				want = -1
			}
			storetest.MergeBatch(t, s, begins, finishes, writes, fail, s.w.Queued, hold(t, s), s.ran.Load, want)
		})
	}
}

// A batch with more writes of a kind than one merged statement takes (mergeChunk) stores them in
// statements of mergeChunk rows and the rest, each write where it would be alone.
func TestABatchLargerThanAStatementMerges(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const n = mergeChunk + 3
	finishes := make([]parley.RunFinish, n)
	for i := range finishes {
		finishes[i] = finishOf(t, s, 5, now)
	}
	begins := make([]*parley.RunBegin, n)
	for i := range begins {
		sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		begins[i] = &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 10, Run: run,
			Messages: []*parley.Message{{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(fmt.Sprint(i)), RunID: run.ID, CreatedAt: now}}}
	}
	release := hold(t, s)
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() { defer wg.Done(); _, errs[i] = s.BeginRun(ctx, begins[i]) }()
		go func() { defer wg.Done(); errs[n+i] = s.FinishRun(ctx, finishes[i]) }()
	}
	waitQueued(t, s, 2*n)
	before := s.ran.Load()
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	// The read of the ends' sessions, the inserts of sessions, runs and event rows and the
	// updates of sessions and runs: 2 statements each; the messages' insert: 3 (2n rows).
	if got := s.ran.Load() - before; got != 6*2+3 {
		t.Errorf("the batch ran %d statements, want %d", got, 6*2+3)
	}
	for i, b := range begins {
		h, err := s.History(ctx, b.SessionID)
		if err != nil || len(h) != 1 || h[0].Content.String() != fmt.Sprint(i) || b.Run.FirstSeq != 1 {
			t.Fatalf("begin %d: %v, %v, run's first %d", i, h, err, b.Run.FirstSeq)
		}
	}
	for i, f := range finishes {
		h, err := s.History(ctx, f.SessionID)
		if err != nil || len(h) != 2 || h[1].ID != f.Messages[0].ID || h[1].ParentID != h[0].ID {
			t.Fatalf("finish %d: %v, %v", i, h, err)
		}
		evs, err := s.ListEvents(ctx, f.SessionID, 0, 100)
		if err != nil || len(evs) != len(f.Events) {
			t.Fatalf("finish %d: %d events, %v", i, len(evs), err)
		}
		if _, err := s.ActiveRun(ctx, f.SessionID); !errors.Is(err, parley.ErrNotFound) {
			t.Fatalf("finish %d: the run still runs (%v)", i, err)
		}
		if seq, err := s.ReserveEventSeqs(ctx, f.SessionID, 1); err != nil || seq != f.Last+1 {
			t.Fatalf("finish %d: next event number %d, %v; want %d", i, seq, err, f.Last+1)
		}
	}
}

// queryPlan returns the details of EXPLAIN QUERY PLAN for q, its args nulls.
func queryPlan(t *testing.T, s *Store, q string, args int) []string {
	t.Helper()
	rows, err := s.db.Query("EXPLAIN QUERY PLAN "+q, make([]any, args)...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// The merged statements that read or update rows find them by key, the rows given the outer
// loop: no table is read whole, whatever the number of rows.
func TestMergedStatementsReadByIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	for _, m := range []*mergedStmt{mergedRead, mergedUpdate, mergedEnds} {
		for _, n := range []int{2, mergeChunk} {
			plan := queryPlan(t, s, m.texts[n], n*m.cols)
			if len(plan) < 2 || !strings.HasPrefix(plan[0], "SCAN ") || !strings.Contains(plan[0], "VALUES") {
				t.Errorf("%d rows of %.40q: plan %q, want the rows given first", n, m.texts[n], plan)
			}
			for _, step := range plan[1:] {
				if strings.HasPrefix(step, "SCAN") || !strings.Contains(step, "USING INDEX") && !strings.Contains(step, "SUBQUERY") {
					t.Errorf("%d rows of %.40q: step %q, want each row found by an index", n, m.texts[n], step)
				}
			}
		}
	}
}

// A batch inserts its plain messages (a user's question, an answer with its usage) by a
// statement of their 11 columns, the other columns NULL, and only the others by the statement of
// every column: here 4 plain messages and a tool's result with success and a resource.
func TestABatchInsertsPlainMessagesByTheirColumns(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var parts []any
	for i := range 3 {
		sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
		if i == 2 {
			ok := true
			m.Role, m.Success, m.ToolCallID, m.Server = parley.RoleTool, &ok, "c1", "srv"
		}
		p, err := newBeginPart(s, &parley.RunBegin{NewSession: sess, Reserve: 10, Run: run, Messages: []*parley.Message{m}})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	for range 2 {
		f := finishOf(t, s, 4, now)
		p, err := newFinishPart(s, &f)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	tx := writeTx(t, s)
	defer sqlTx{s.db, &s.ran, s}.Rollback(tx)
	if err := s.merge(ctx, tx, parts); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= mergeChunk; n++ {
		if _, ok := s.wc.stmts[mergedPlainMessages.texts[n]]; ok != (n == 4) {
			t.Errorf("plain messages' statement of %d rows prepared: %v", n, ok)
		}
		if _, ok := s.wc.stmts[mergedMessages.texts[n]]; ok != (n == 1) {
			t.Errorf("every column's statement of %d rows prepared: %v", n, ok)
		}
	}
	var plain, other int
	if err := tx.QueryRow(`SELECT count(*) FILTER (WHERE success IS NULL AND server IS NULL), count(*) FILTER (WHERE success = 1 AND server = 'srv')
		FROM messages`).Scan(&plain, &other); err != nil || plain != 6 || other != 1 {
		t.Fatalf("%d plain messages, %d others, %v", plain, other, err)
	}
}

// writeTx begins a write transaction on the writer's connection, as the writer does (the
// merged statements run only there); the test must end it (sqlTx.Rollback or Commit) and
// write nothing else meanwhile.
func writeTx(t *testing.T, s *Store) *sql.Tx {
	t.Helper()
	tx, err := sqlTx{s.db, &s.ran, s}.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// A batch's merged statements run on the writer's connection directly: prepared there (and
// only there, not through database/sql), whatever the batches; a merge given a transaction
// that is not the writer's is refused rather than run on another connection. Fails on main,
// which runs them through database/sql on any connection of the pool.
func TestMergedStatementsRunOnTheWritersConnection(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 4 {
				f, err := beginChat(ctx, s, now)
				if err == nil {
					err = s.FinishRun(ctx, f)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	kinds := map[string]string{} // each merged text, and its kind
	for name, m := range map[string]*mergedStmt{"sessions": mergedSessions, "runs": mergedRuns,
		"plain messages": mergedPlainMessages, "messages": mergedMessages, "updates": mergedUpdate,
		"events": mergedEvents, "ends": mergedEnds} {
		for _, q := range m.texts[1:] {
			kinds[q] = name
		}
	}
	onWriter := map[string]bool{}
	for q := range s.wc.stmts {
		if k, ok := kinds[q]; ok {
			onWriter[k] = true
		}
	}
	s.stmtMu.Lock()
	for q := range s.stmts { // a lone write runs its own statements, one of which is a one-row merged text
		if k, ok := kinds[q]; ok && strings.Count(q, "(?") > 1 {
			t.Errorf("a merged statement of rows (%s) prepared through database/sql", k)
		}
	}
	s.stmtMu.Unlock()
	// A chat's messages are plain: every kind but "messages" ran.
	if len(onWriter) != 6 || onWriter["messages"] {
		t.Errorf("the kinds of merged statements prepared on the writer's connection: %v", onWriter)
	}

	f := finishOf(t, s, 2, now)
	p, err := newFinishPart(s, &f)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := s.merge(ctx, tx, []any{p}); !errors.Is(err, errNotWriter) {
		t.Fatalf("a merge in another transaction: %v", err)
	}
}

// The writer keeps the slices a merge fills from one batch to the next, empty and cleared:
// after chats from 32 goroutines, the statements' rows a chat uses have room kept, and no
// element of any kept slice still points at a caller's row, part or session. A slice grown
// past mergeArgsKeep is let go of. Fails on main, which makes them anew for every batch (and
// has no s.margs).
func TestAMergeKeepsItsSlicesButNoRows(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				f, err := beginChat(ctx, s, now)
				if err == nil {
					err = s.FinishRun(ctx, f)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	a := &s.margs // the writer is idle: every chat has been answered
	for i, name := range []string{"sessions", "runs", "messages", "", "updates", "event rows", "ends"} {
		if name != "" && cap(a.args[i]) == 0 {
			t.Errorf("no room kept for the %s", name)
		}
	}
	if cap(a.news) == 0 || cap(a.finishes) == 0 || cap(a.read) == 0 {
		t.Errorf("no room kept for the parts (%d news, %d finishes, %d read)", cap(a.news), cap(a.finishes), cap(a.read))
	}
	kept := func(name string, n int, left func(i int) bool) {
		for i := range n {
			if left(i) {
				t.Errorf("%s: element %d of %d kept past its batch", name, i, n)
				return
			}
		}
	}
	for i, r := range a.args {
		if len(r) != 0 {
			t.Errorf("statement %d: %d rows left", i, len(r))
		}
		r = r[:cap(r)]
		kept(fmt.Sprint("statement ", i), len(r), func(j int) bool { return r[j] != nil })
	}
	read := a.read[:cap(a.read)]
	kept("read", len(read), func(j int) bool { return read[j] != nil })
	news, finishes := a.news[:cap(a.news)], a.finishes[:cap(a.finishes)]
	kept("news", len(news), func(j int) bool { return news[j] != nil })
	kept("finishes", len(finishes), func(j int) bool { return finishes[j] != nil })

	if r := keep(make([]any, 3, mergeArgsKeep+1)); r != nil {
		t.Errorf("a slice of %d elements kept", cap(r))
	}
	if r := keep([]any{"x", 1}); len(r) != 0 || cap(r) != 2 || r[:2][0] != nil {
		t.Errorf("a small slice: %v, cap %d", r[:cap(r)], cap(r))
	}
}
