package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// A streamed chat of a new session is two writes (runs.Manager on a parley.RunBeginner): its
// beginning inserts the session as the other steps would leave it, the run and the user's
// message (3 statements, no read); its end reads the session, inserts the answer and updates the
// session (which gives the unused event numbers back too; its read finds the event rows the
// events may overlap as well), inserts the events and ends the run (5). Before: 7 and 7, then 3
// and 6.
func TestAChatRunsEightStatements(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "u", Title: "t", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "u", Model: "m", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hello"), RunID: run.ID, CreatedAt: now}
	before := s.ran.Load()
	first, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 1024, Run: run, Messages: []*parley.Message{user}})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ran.Load() - before; n != 3 {
		t.Errorf("BeginRun of a new session ran %d statements, want 3", n)
	}
	answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now,
		Usage: &parley.Usage{TotalTokens: 5}}
	start, err := json.Marshal(parley.Event{Seq: first, Type: parley.EventStart, RunID: run.ID, SessionID: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	record := parley.Event{Seq: first + 1, Type: parley.EventRecord, RunID: run.ID, SessionID: sess.ID, Message: answer}
	before = s.ran.Load()
	err = s.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer},
		Events: []parley.EncodedEvent{{Seq: first, JSON: start}, {Seq: first + 1, Event: &record}},
		Limit:  first + 1023, Last: first + 1, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ran.Load() - before; n != 5 {
		t.Errorf("FinishRun with an answer and events ran %d statements, want 5", n)
	}
	// What the statements left: the answer after the user's message, the numbers given back.
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil || got.LeafID != answer.ID || got.Usage.TotalTokens != 5 || answer.Seq != 2 || answer.ParentID != user.ID {
		t.Fatalf("session %+v (%v), answer seq %d parent %q", got, err, answer.Seq, answer.ParentID)
	}
	// The next chat of the session: one read of the session, the message, the session's
	// update (which reserves the event numbers too) and the run. Before: 6.
	next := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "u", Model: "m", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	again := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("again"), RunID: next.ID, CreatedAt: now}
	before = s.ran.Load()
	first2, err := s.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID, Reserve: 1024, Run: next, Messages: []*parley.Message{again}})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ran.Load() - before; n != 4 {
		t.Errorf("BeginRun of an existing session ran %d statements, want 4", n)
	}
	if first2 != first+2 || next.FirstSeq != first2 || again.Seq != 3 || again.ParentID != answer.ID {
		t.Fatalf("the next run: first %d (run's %d), message seq %d parent %q; want %d, 3, %q", first2, next.FirstSeq, again.Seq, again.ParentID, first+2, answer.ID)
	}
	if seq, err := s.ReserveEventSeqs(ctx, sess.ID, 1); err != nil || seq != first2+1024 {
		t.Fatalf("next event number %d, %v; want %d", seq, err, first2+1024)
	}
}

// FinishRun's read of the session finds the event rows already stored that its events overlap
// (a write given again, or events stored while the run streamed): each event is stored once, the
// others beside them.
func TestFinishRunStoresOverlappingEventsOnce(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "u", Title: "t", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "u", Model: "m", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	first, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 100, Run: run,
		Messages: []*parley.Message{{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hello"), RunID: run.ID, CreatedAt: now}}})
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(seq int64) parley.Event {
		return parley.Event{Seq: seq, Type: parley.EventChunk, RunID: run.ID, SessionID: sess.ID, Content: fmt.Sprintf("c%d", seq)}
	}
	// Stored while the run streamed: two rows, first..first+1 and first+3.
	if err := s.AppendEvents(ctx, sess.ID, now, []parley.Event{chunk(first), chunk(first + 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, sess.ID, now, []parley.Event{chunk(first + 3)}); err != nil {
		t.Fatal(err)
	}
	var end []parley.EncodedEvent
	for seq := first + 1; seq <= first+5; seq++ {
		ev := chunk(seq)
		end = append(end, parley.EncodedEvent{Seq: seq, Event: &ev})
	}
	answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
	if err := s.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer}, Events: end,
		Limit: first + 99, Last: first + 5, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ListEvents(ctx, sess.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range evs {
		seqs = append(seqs, e.Seq)
	}
	if want := []int64{first, first + 1, first + 2, first + 3, first + 4, first + 5}; !slices.Equal(seqs, want) {
		t.Fatalf("events stored %v, want %v, each once", seqs, want)
	}
	var rows int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM event_batches WHERE session_id = ?`, sess.ID).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("%d event rows (%v), want 4: the two stored, first+2 and first+4..first+5", rows, err)
	}
}

// hold holds the store's writer until the returned release is called, so that the writes given
// meanwhile queue and then run as one batch.
func hold(t *testing.T, s *Store) (release func()) {
	t.Helper()
	entered, done, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.w.Do(context.Background(), func(context.Context, *sql.Tx) error { close(entered); <-done; return nil })
	}()
	<-entered
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(done)
			if err := <-held; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release) // a failed test must not leave the writer held
	return release
}

// waitQueued waits until n writes wait for the writer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.w.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writes queued", s.w.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A batch whose writes all succeed runs no savepoint: just their statements and one commit. One
// that fails has the batch run again with a savepoint around each write: the failure is its
// writer's alone, and the other writes are stored once.
func TestABatchRunsSavepointsOnlyWhenAWriteFails(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const n = 8
	sessions := make([]string, n)
	for i := range sessions {
		sess := &parley.Session{ID: parley.NewID(), Owner: "u", CreatedAt: now, UpdatedAt: now}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		sessions[i] = sess.ID
	}
	batch := func(fail bool) []error {
		release := hold(t, s)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			sid := sessions[i]
			if fail && i == n/2 {
				sid = "no-such-session"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.AppendMessages(ctx, sid, &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), CreatedAt: now})
			}()
		}
		waitQueued(t, s, n)
		before := s.ran.Load()
		release()
		wg.Wait()
		if ran := s.ran.Load() - before; !fail && ran != 3*n {
			t.Errorf("a batch of %d appends ran %d statements, want %d (3 each, no savepoint)", n, ran, 3*n)
		}
		return errs
	}
	for i, err := range batch(false) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for i, err := range batch(true) {
		if i == n/2 {
			if parley.CodeOf(err) != parley.ECNotFound {
				t.Errorf("the write to no session: %v, want not found", err)
			}
		} else if err != nil {
			t.Errorf("write %d beside a failing one: %v", i, err)
		}
	}
	for i, sid := range sessions {
		want := 2
		if i == n/2 { // its second write went to no session
			want = 1
		}
		if h, err := s.History(ctx, sid); err != nil || len(h) != want || h[len(h)-1].Seq != int64(want) {
			t.Fatalf("session %d: %d messages, %v; want %d, each stored once", i, len(h), err, want)
		}
	}
}

// A write that runs again with its batch (another write of the batch failed) reports what the
// run that committed did, not that and the rolled-back run's together.
func TestWritesRunAgainReportOnce(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "u", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Instance: "a", LeaseUntil: now.Add(-time.Minute), CreatedAt: now}
	if err := s.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	release := hold(t, s)
	var (
		renewed, renewedAgain []string
		claimed               []parley.RunRecord
		errs                  [4]error
		wg                    sync.WaitGroup
	)
	wg.Add(4)
	go func() {
		defer wg.Done()
		renewed, errs[0] = s.RenewRuns(ctx, "a", []string{run.ID}, now.Add(-time.Second))
	}()
	waitQueued(t, s, 1)
	go func() { // the lease renewed above is still over: the run is claimed
		defer wg.Done()
		claimed, errs[1] = s.ClaimRuns(ctx, "b", "", now, now.Add(time.Minute), 10)
	}()
	waitQueued(t, s, 2)
	go func() {
		defer wg.Done()
		renewedAgain, errs[2] = s.RenewRuns(ctx, "b", []string{run.ID}, now.Add(time.Minute))
	}()
	waitQueued(t, s, 3)
	go func() { // fails: the batch runs again
		defer wg.Done()
		errs[3] = s.AppendMessages(ctx, "no-such-session", &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("x"), CreatedAt: now})
	}()
	waitQueued(t, s, 4)
	release()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || parley.CodeOf(errs[3]) != parley.ECNotFound {
		t.Fatalf("errors %v", errs)
	}
	if !slices.Equal(renewed, []string{run.ID}) || !slices.Equal(renewedAgain, []string{run.ID}) {
		t.Errorf("renewed %v, then %v; want the run once each", renewed, renewedAgain)
	}
	if len(claimed) != 1 || claimed[0].ID != run.ID || claimed[0].Instance != "b" || claimed[0].Attempts != 1 {
		t.Errorf("claimed %+v; want the run once, attempt 1", claimed)
	}
}
