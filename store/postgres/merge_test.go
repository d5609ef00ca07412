package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/groupcommit"
	"github.com/parleyhq/parley/store/internal/rowcodec"
	"github.com/parleyhq/parley/store/postgres/pgtest"
	"github.com/parleyhq/parley/store/storetest"
)

// mergeFixture returns begins of runs (3 of new sessions, 2 turns in sessions that exist), ends of
// runs begun (and committed) here and writes of a running run's events, of the kinds a batch
// merges, with what makes them differ: selected tools or none, a project, every column of a
// message, an answer with a tool call, a run no longer this instance's, events stored before,
// events that make two rows, numbers that do not go back.
func mergeFixture(t *testing.T, s *Store, now time.Time) ([]*parley.RunBegin, []parley.RunFinish, []storetest.EventWrite) {
	t.Helper()
	ctx := context.Background()
	begins := storetest.MergeBegins(t, s, now)
	var finishes []parley.RunFinish
	for i := range 6 {
		b, f := finishFixture(t, s, 7, now)
		switch i {
		case 1: // the run is another instance's now
			f.Instance = "other"
		case 2: // two of its events were stored, with other contents
			var stored []parley.EncodedEvent
			for _, e := range f.Events[1:3] {
				ev := *e.Event
				ev.Content = "stored"
				j, _ := json.Marshal(&ev)
				stored = append(stored, parley.EncodedEvent{Seq: ev.Seq, JSON: j, Event: &ev})
			}
			if err := s.AppendEncodedEvents(ctx, b.NewSession.ID, f.At, stored); err != nil {
				t.Fatal(err)
			}
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
		_, f := finishFixture(t, s, 7, now)
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
		_, f := finishFixture(t, s, 7, now)
		evs := f.Events[:4]
		if i == 1 { // one of them was stored before, with other contents
			ev := *evs[2].Event
			ev.Content = "stored"
			j, _ := json.Marshal(&ev)
			if err := s.AppendEncodedEvents(ctx, f.SessionID, f.At, []parley.EncodedEvent{{Seq: ev.Seq, JSON: j, Event: &ev}}); err != nil {
				t.Fatal(err)
			}
		}
		writes = append(writes, storetest.EventWrite{SessionID: f.SessionID, At: f.At.Add(time.Duration(i) * time.Second), Events: evs})
	}
	return begins, finishes, writes
}

// eventsPartOf is the write AppendEncodedEvents makes of w.
func eventsPartOf(w storetest.EventWrite) *eventsPart {
	return &eventsPart{sessionID: w.SessionID, at: w.At, evs: w.Events, batches: rowcodec.EventBatches(w.Events, nil)}
}

// A batch's merged writes (the begins of new sessions' runs in one statement, the ends of runs in
// two) must leave the rows, and return the results, that the same writes leave and return run
// one after another by their own statements. Both are run in a transaction that is then rolled
// back, on the same data.
func TestMergedWritesLeaveWhatEachWouldAlone(t *testing.T) {
	var sent sqlRecorder
	s := openTest(t, sent.options)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	begins, finishes, writes := mergeFixture(t, s, now)
	var (
		parts []any
		ids   []string
	)
	for _, w := range writes {
		parts, ids = append(parts, eventsPartOf(w)), append(ids, w.SessionID)
	}
	for _, b := range begins {
		p, err := newBeginPart(b)
		if err != nil {
			t.Fatal(err)
		}
		if !p.mergeable() {
			t.Fatalf("begin %s is not mergeable", b.SessionID)
		}
		parts, ids = append(parts, p), append(ids, b.SessionID)
	}
	for i := range finishes {
		p, err := newFinishPart(&finishes[i])
		if err != nil {
			t.Fatal(err)
		}
		if !p.mergeable() {
			t.Fatalf("finish %s is not mergeable", finishes[i].SessionID)
		}
		parts, ids = append(parts, p), append(ids, finishes[i].SessionID)
	}
	db := pgTx{s.pool}
	runAlone := func(tx pgx.Tx, ps []any) {
		for _, p := range ps {
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
	// The end and the write whose events overlap stored rows fail the merged ends (which go
	// with the batch's COMMIT, unread before it): the batch runs them apart, each alone.
	var mergeable, apart []any
	for _, p := range parts {
		if p == parts[1] || p == parts[len(writes)+len(begins)+2] {
			apart = append(apart, p)
		} else {
			mergeable = append(mergeable, p)
		}
	}
	t.Run("overlap", func(t *testing.T) {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Rollback(tx)
		if err := db.Merge(ctx, tx, parts); err != nil {
			t.Fatalf("merged: %v", err)
		}
		if err := db.Commit(ctx, tx); !errors.Is(err, groupcommit.ErrApart) {
			t.Fatalf("the commit with the merged ends of overlapping events: %v, want groupcommit.ErrApart", err)
		}
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE id = ANY($1)`, ids[len(writes):len(writes)+3]).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d of the merged begins' sessions committed (%v), want none", n, err)
		}
	})
	// run writes parts (merged, each merged on its own, or each alone) in a transaction, and
	// returns what they left and returned; the transaction is rolled back.
	const (
		alone = iota
		merged
		mergedOne // each mergeable part merged alone: the merged statements' one-row twins
	)
	run := func(how int) string {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Rollback(tx)
		switch how {
		case merged:
			if err := db.Merge(ctx, tx, mergeable); err != nil {
				t.Fatalf("merged: %v", err)
			}
			runAlone(tx, apart) // the held ends go with its first statement
		case mergedOne:
			sent.reset()
			for _, p := range mergeable {
				if err := db.Merge(ctx, tx, []any{p}); err != nil {
					t.Fatalf("merged alone: %v", err)
				}
			}
			runAlone(tx, apart)
			var ones int
			for _, q := range sent.all() {
				if strings.Contains(q, "unnest(") {
					t.Errorf("a part merged alone sent a statement of arrays:\n%.200s", q)
				}
				if strings.HasPrefix(q, "WITH") && strings.Contains(q, "(VALUES (") {
					ones++
				}
			}
			if ones < len(mergeable) {
				t.Errorf("%d parts merged alone sent %d one-row statements, want one or more each", len(mergeable), ones)
			}
		default:
			runAlone(tx, parts)
		}
		var out []any
		for _, p := range parts {
			switch p := p.(type) {
			case *beginPart:
				out = append(out, fmt.Sprintf("begin: first %d last %d links %+v run's first %d", p.first, p.last, p.links, p.b.Run.FirstSeq))
			case *finishPart:
				var evs []string
				for _, e := range p.f.Events {
					evs = append(evs, string(e.JSON))
				}
				out = append(out, fmt.Sprintf("finish: last %d links %+v ended %v events %s", p.last, p.links, p.ended, evs))
			}
		}
		for _, q := range []string{
			`SELECT jsonb_agg(to_jsonb(s) ORDER BY id) FROM sessions s WHERE id = ANY($1)`,
			`SELECT jsonb_agg(to_jsonb(r) ORDER BY id) FROM runs r WHERE session_id = ANY($1)`,
			`SELECT jsonb_agg(to_jsonb(m) ORDER BY session_id, seq) FROM messages m WHERE session_id = ANY($1)`,
			`SELECT jsonb_agg(jsonb_build_object('session', session_id, 'first', first_seq, 'last', last_seq,
				'data', convert_from(data, 'UTF8')::jsonb, 'at', created_at) ORDER BY session_id, first_seq)
				FROM event_batches WHERE session_id = ANY($1)`,
		} {
			var v any
			if err := tx.QueryRow(ctx, q, ids).Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		j, _ := json.MarshalIndent(out, "", " ")
		return string(j)
	}
	wantAlone := run(alone)
	// Where each answer went alone: every other end merged on its own is given it as foreseen
	// (mergedForeseenSQL's twin), the others find it (mergedAnswersSQL's twin).
	var ends []*finishPart
	hints := map[*finishPart]*answerHint{}
	for _, p := range mergeable {
		if p, ok := p.(*finishPart); ok {
			if len(ends)%2 == 0 {
				hints[p] = &answerHint{run: p.f.RunID, seq: p.last, parent: p.links.Parents[0]}
			}
			ends = append(ends, p)
		}
	}
	if got := run(merged); got != wantAlone {
		t.Errorf("merged, the writes left and returned\n%s\neach alone\n%s", got, wantAlone)
	}
	for p, h := range hints {
		p.hint = h
	}
	if got := run(mergedOne); got != wantAlone {
		t.Errorf("each merged on its own, the writes left and returned\n%s\neach alone\n%s", got, wantAlone)
	}
	// An answer foreseen where it does not go, merged on its own, fails the commit as in a batch.
	t.Run("foreseen elsewhere, one row", func(t *testing.T) {
		p := ends[0]
		defer func() { p.hint = nil }()
		p.hint = &answerHint{run: p.f.RunID, seq: hints[p].seq + 1, parent: hints[p].parent}
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Rollback(tx)
		if err := db.Merge(ctx, tx, []any{p}); err != nil {
			t.Fatalf("merged: %v", err)
		}
		if err := db.Commit(ctx, tx); !errors.Is(err, groupcommit.ErrApart) {
			t.Fatalf("the commit of an answer foreseen at the wrong seq: %v, want groupcommit.ErrApart", err)
		}
	})
	for p := range hints {
		p.hint = nil
	}
	// Some of the writes differ from the others (so that the comparison says something).
	for _, want := range []string{`not running on instance other`, `"stored"`, `"project_id": "` + begins[1].NewSession.ProjectID} {
		if !strings.Contains(wantAlone, want) {
			t.Errorf("the writes alone left no %s", want)
		}
	}
}

// Through the store: writes that wait while the writer is held make one batch, which merges them
// (one statement for the begins, two for the ends); a write of it that fails (a project that is
// not there, a session deleted) gets its own error and fails none of its batch-mates.
func TestABatchMergesItsWritesAndAFailureStaysItsOwn(t *testing.T) {
	for _, c := range []struct {
		name          string
		fail, overlap bool
	}{{"merged", false, false}, {"overlap", false, true}, {"failure", true, true}} {
		fail := c.fail
		t.Run(c.name, func(t *testing.T) {
			var p probe
			s, err := Open(context.Background(), pgtest.Schema(t), func(o *options) {
				p.options(o)
				o.writers = 1 // the one writer is held below
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Microsecond)
			begins, finishes, writes := mergeFixture(t, s, now)
			if !c.overlap { // without the end and the write whose events overlap stored rows
				finishes = append(finishes[:2:2], finishes[3:]...)
				writes = writes[:1]
			}
			if fail {
				storetest.MergeFailures(t, s, now, begins, finishes)
			}
			entered, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				held <- s.w.Do(ctx, func(context.Context, pgx.Tx) error { close(entered); <-release; return nil })
			}()
			<-entered
			var releaseOnce sync.Once
			defer releaseOnce.Do(func() { close(release) })
			// Without overlapping events: BEGIN, the merge's settings, the 3 begins of new
			// sessions, the 2 turns and the 5 answers (1 statement each lot), the end whose
			// events make two rows (its 2 rows and its run's end, 3), the other ends' and the
			// write's events and runs (1), COMMIT: 10 statements, where the writes each by its own
			// statements run 26.
			want := int64(10)
			if c.overlap {
				want = -1
			}
			storetest.MergeBatch(t, s, begins, finishes, writes, fail, s.w.Queued,
				func() { releaseOnce.Do(func() { close(release) }) }, p.stmts.Load, want)
			if err := <-held; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The merged statements find their rows by index whatever the tables' size, under the settings
// Merge gives their transaction: a generic plan (the one PostgreSQL keeps for a prepared
// statement) made while the tables are nearly empty, as here, reads no table whole.
func TestMergedStatementsReadByIndex(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	begins, finishes, _ := mergeFixture(t, s, now)
	var (
		bs []*beginPart
		fs []*finishPart
	)
	for _, b := range begins {
		p, err := newBeginPart(b)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, p)
	}
	for i := range finishes {
		p, err := newFinishPart(&finishes[i])
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, p)
	}
	f := finishes[0]
	type statement struct {
		name string
		sql  string
		args []any
	}
	ends := []any{[]string{f.SessionID}, []int64{1}, []int64{2}, [][]byte{[]byte("[]")}, []time.Time{now},
		[]string{"stop"}, []pgtype.Text{text(f.RunID)}, []pgtype.Text{text(f.Instance)}}
	statements := []statement{
		{"begins", mergedBeginSQL, beginArgs(bs[:3])},
		{"turns", mergedTurnsSQL, turnArgs(bs[3:])},
		{"answers", mergedAnswersSQL, answerArgs(fs)},
	}
	// And the one-row twins (onerow.go).
	for _, q := range []statement{
		{"begin", mergedBeginSQL, beginArgs(bs[:1])},
		{"turn", mergedTurnsSQL, turnArgs(bs[3:4])},
		{"answer", mergedAnswersSQL, answerArgs(fs[:1])},
		{"foreseen answer", mergedForeseenSQL, append(answerArgs(fs[:1]), []int64{2}, []string{parley.NewID()})},
		{"end", mergedEndsSQL, ends},
	} {
		sql, args, err := mergedStatement(q.sql, q.args)
		if err != nil || sql == q.sql {
			t.Fatalf("%s: no one-row twin (%v)", q.name, err)
		}
		statements = append(statements, statement{q.name + ", one row", sql, args})
	}
	statements = append(statements,
		statement{"foreseen answers", mergedForeseenSQL, append(answerArgs(fs[:2]), []int64{2, 2}, []string{parley.NewID(), parley.NewID()})},
		statement{"ends", mergedEndsSQL, []any{[]string{f.SessionID, f.SessionID}, []int64{1, 3}, []int64{2, 4}, [][]byte{[]byte("[]"), []byte("[]")},
			[]time.Time{now, now}, []string{"stop", ""}, []pgtype.Text{text(f.RunID), {}}, []pgtype.Text{text(f.Instance), {}}}})
	for _, q := range statements {
		t.Run(q.name, func(t *testing.T) {
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			for _, set := range []string{mergeSettings, `SET LOCAL plan_cache_mode = force_generic_plan`} {
				if _, err := tx.Exec(ctx, set); err != nil {
					t.Fatal(err)
				}
			}
			rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+q.sql, q.args...)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if p := strings.Join(plan, "\n"); strings.Contains(p, "Seq Scan") {
				t.Errorf("the plan reads a table whole:\n%s", p)
			}
		})
	}
}

// Writes of running runs' events that wait together are one statement and one round trip: BEGIN,
// the merge's settings, the rows and COMMIT.
func TestABatchOfEventWritesIsOneStatement(t *testing.T) {
	var p probe
	s, err := Open(context.Background(), pgtest.Schema(t)+"&pool_max_conns=2", func(o *options) {
		p.options(o)
		o.writers = 1 // the one writer is held below
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const n = 5
	var fs []parley.RunFinish
	for range n {
		_, f := finishFixture(t, s, 7, now)
		fs = append(fs, f)
	}
	// Round 0 prepares the statements on the writer's connection; round 1 is counted.
	for round := range 2 {
		stmts, trips := oneBatch(t, s, &p, n, func(i int) error {
			return s.AppendEncodedEvents(ctx, fs[i].SessionID, fs[i].At, fs[i].Events[2*round:2*round+2])
		})
		if round == 0 {
			continue
		}
		if got, want := stmts, int64(4); got != want {
			t.Errorf("%d statements, want %d (BEGIN, the settings, the rows, COMMIT)", got, want)
		}
		if got := trips; got != 1 {
			t.Errorf("%d round trips, want 1", got)
		}
	}
	for i, f := range fs {
		evs, err := s.ListEvents(ctx, f.SessionID, 0, 100)
		if err != nil || len(evs) != 4 {
			t.Errorf("write %d: %d events stored, %v; want 4", i, len(evs), err)
		}
	}
}

// A begin that sets the session's leaf runs its own statements: the merged ones set no leaf.
func TestABeginWithALeafIsNotMerged(t *testing.T) {
	at := time.Now().UTC()
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: "s", Owner: "alice", Instance: "i1", LeaseUntil: at, CreatedAt: at}
	msg := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q"), CreatedAt: at}
	b := &parley.RunBegin{SessionID: "s", Reserve: 1, Run: run, Messages: []*parley.Message{msg}}
	p, err := newBeginPart(b)
	if err != nil || !p.mergeable() {
		t.Fatalf("a turn's begin: mergeable %v, %v", err == nil && p.mergeable(), err)
	}
	b.Leaf = parley.NewID()
	if p, err = newBeginPart(b); err != nil || p.mergeable() {
		t.Fatalf("a begin with a leaf: mergeable %v, %v; want its own statements", err == nil && p.mergeable(), err)
	}
}

// oneBatch runs writes 0 to n-1 of s in one batch (its one writer held until all n are queued),
// fails the test if any fails, and returns the statements and round trips (counted by p) that
// the batch took.
func oneBatch(t *testing.T, s *Store, p *probe, n int, write func(i int) error) (stmts, trips int64) {
	t.Helper()
	ctx := context.Background()
	entered, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.w.Do(ctx, func(context.Context, pgx.Tx) error { close(entered); <-release; return nil })
	}()
	<-entered
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = write(i) }()
	}
	deadline := time.Now().Add(time.Minute)
	for s.w.Queued() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stmts, trips = p.stmts.Load(), p.trips.Load()
	close(release)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	return p.stmts.Load() - stmts, p.trips.Load() - trips
}

// openProbedBeside opens a store on a new schema, counted by p, with one writer (the tests hold
// it), and a second store on the same schema: another instance, whose hints are its own.
func openProbedBeside(t *testing.T, p *probe) (s, other *Store) {
	t.Helper()
	url := pgtest.Schema(t) + "&pool_max_conns=2"
	s, err := Open(context.Background(), url, func(o *options) {
		p.options(o)
		o.writers = 1
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other, err = Open(context.Background(), url, WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return s, other
}

// A batch's begins of new sessions' runs go with its COMMIT: BEGIN, the merge's settings, the
// begins and COMMIT in one round trip. So do a batch's ends of runs that this store began (where
// their answers go is foreseen: hints.go): the answers, the ends and COMMIT. The ends of runs
// another instance began send the answers with BEGIN, and the ends with COMMIT: two round trips
// (three when the ends went alone).
func TestABatchOfBeginsOrEndsTakesOneRoundTripWithItsCommit(t *testing.T) {
	var p probe
	s, other := openProbedBeside(t, &p)
	ctx := context.Background()
	const n = 5
	batch := func(write func(i int) error) (stmts, trips int64) { return oneBatch(t, s, &p, n, write) }
	// Rounds 0 and 2 prepare the statements on the writer's connection; the runs of rounds 2
	// and 3 are begun by the other instance.
	const rounds = 4
	begins := make([][]*parley.RunBegin, rounds)
	finishes := make([][]parley.RunFinish, rounds)
	for round := range rounds {
		beginner := s
		if round >= 2 {
			beginner = other
		}
		for range n {
			now := time.Now().UTC().Truncate(time.Microsecond)
			b, f := finishFixture(t, beginner, 7, now)
			finishes[round] = append(finishes[round], f)
			// A new session's run like b's, not begun yet.
			sess := *b.NewSession
			sess.ID = parley.NewID()
			run := *b.Run
			run.ID, run.SessionID = parley.NewID(), sess.ID
			m := *b.Messages[0]
			m.ID, m.RunID, m.Seq = parley.NewID(), run.ID, 0
			begins[round] = append(begins[round], &parley.RunBegin{NewSession: &sess, Reserve: b.Reserve, Run: &run, Messages: []*parley.Message{&m}})
		}
	}
	for round := range rounds {
		stmts, trips := batch(func(i int) error {
			_, err := s.BeginRun(ctx, begins[round][i])
			return err
		})
		if round == 1 && (stmts != 4 || trips != 1) {
			t.Errorf("the begins: %d statements in %d round trips, want 4 (BEGIN, the settings, the begins, COMMIT) in 1", stmts, trips)
		}
		stmts, trips = batch(func(i int) error { return s.FinishRun(ctx, finishes[round][i]) })
		if round == 1 && (stmts != 5 || trips != 1) {
			t.Errorf("the ends of runs begun here: %d statements in %d round trips, want 5 (BEGIN, the settings, the answers, the ends, COMMIT) in 1",
				stmts, trips)
		}
		if round == 3 && (stmts != 5 || trips != 2) {
			t.Errorf("the ends of runs begun elsewhere: %d statements in %d round trips, want 5 (BEGIN, the settings, the answers; the ends, COMMIT) in 2",
				stmts, trips)
		}
	}
	for _, round := range []int{1, 3} {
		for _, b := range begins[round] {
			if msgs, err := s.History(ctx, b.NewSession.ID); err != nil || len(msgs) != 1 || b.Messages[0].Seq != 1 {
				t.Errorf("begun session %s: %d messages, %v; the message's seq %d, want 1", b.NewSession.ID, len(msgs), err, b.Messages[0].Seq)
			}
		}
		for _, f := range finishes[round] {
			checkAnswerAndRecord(t, s, f, 2)
		}
	}
}

// checkAnswerAndRecord checks that f's answer is stored with seq want, after the session's
// message before it, and that f's events are stored, the answer's record carrying that seq.
func checkAnswerAndRecord(t *testing.T, s *Store, f parley.RunFinish, want int64) {
	t.Helper()
	ctx := context.Background()
	answer := f.Messages[0]
	msgs, err := s.History(ctx, f.SessionID)
	if err != nil || len(msgs) != int(want) {
		t.Fatalf("session %s: %d messages, %v; want %d", f.SessionID, len(msgs), err, want)
	}
	last := msgs[len(msgs)-1]
	if last.ID != answer.ID || last.Seq != want || answer.Seq != want || last.ParentID != msgs[len(msgs)-2].ID || answer.ParentID != last.ParentID {
		t.Errorf("session %s: the answer stored as %s seq %d after %s, told seq %d after %s; want %s seq %d after %s",
			f.SessionID, last.ID, last.Seq, last.ParentID, answer.Seq, answer.ParentID, answer.ID, want, msgs[len(msgs)-2].ID)
	}
	evs, err := s.ListEvents(ctx, f.SessionID, 0, 100)
	if err != nil || len(evs) != len(f.Events) {
		t.Fatalf("session %s: %d events, %v; want %d", f.SessionID, len(evs), err, len(f.Events))
	}
	records := 0
	for _, ev := range evs {
		if ev.Type == parley.EventRecord && ev.Message != nil && ev.Message.ID == answer.ID {
			records++
			if ev.Message.Seq != want || ev.Message.ParentID != last.ParentID {
				t.Errorf("session %s: the answer's record says seq %d after %s; want %d after %s", f.SessionID, ev.Message.Seq,
					ev.Message.ParentID, want, last.ParentID)
			}
		}
	}
	if records != 1 {
		t.Errorf("session %s: %d records of the answer among the events, want 1", f.SessionID, records)
	}
}

// The place foreseen for a run's answer (hints.go) is checked by the statement that stores it:
// when a write this store did not see (another instance's) put a message in the session after
// the run began, the batch's merged commit fails, and the batch runs again, each write by its own
// statements. Every answer is then stored where it belongs, its record carrying that seq, and
// the other ends of the batch are stored too.
func TestAnAnswerNotWhereForeseenRunsTheBatchApart(t *testing.T) {
	var p probe
	s, other := openProbedBeside(t, &p)
	ctx := context.Background()
	const n = 4
	var fs []parley.RunFinish
	for range n {
		_, f := finishFixture(t, s, 7, time.Now().UTC().Truncate(time.Microsecond))
		fs = append(fs, f)
	}
	// A message the other instance appends to the first session: its answer now goes third.
	now := time.Now().UTC().Truncate(time.Microsecond)
	note := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("and also"), CreatedAt: now}
	if err := other.AppendMessages(ctx, fs[0].SessionID, note); err != nil {
		t.Fatal(err)
	}
	d, _ := oneBatch(t, s, &p, n, func(i int) error { return s.FinishRun(ctx, fs[i]) })
	// Merged, the ends are 5 statements; run again apart, more.
	if d <= 5 {
		t.Errorf("the batch took %d statements: not run again apart", d)
	}
	checkAnswerAndRecord(t, s, fs[0], 3)
	for _, f := range fs[1:] {
		checkAnswerAndRecord(t, s, f, 2)
	}
}

// sqlRecorder records the text of every statement pgx sends, alone or in a batch.
type sqlRecorder struct {
	mu  sync.Mutex
	sql []string
}

func (r *sqlRecorder) options(o *options) {
	o.configure = func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = r }
}

func (r *sqlRecorder) add(q string) {
	r.mu.Lock()
	r.sql = append(r.sql, q)
	r.mu.Unlock()
}

func (r *sqlRecorder) reset() {
	r.mu.Lock()
	r.sql = nil
	r.mu.Unlock()
}

func (r *sqlRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sql)
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL)
	return ctx
}
func (*sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (*sqlRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *sqlRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL)
}
func (*sqlRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
