package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// finishFixture begins a run of a new session and returns what ends it: the answer, events
// first..first+n-1 (the last two left for the store to encode, as the run's record and done
// are) and the numbers to give back.
func finishFixture(t *testing.T, s *Store, n int, now time.Time) (*parley.RunBegin, parley.RunFinish) {
	t.Helper()
	ctx := context.Background()
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
		LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
	b := &parley.RunBegin{NewSession: sess, Reserve: 100, Run: run, Messages: []*parley.Message{user}}
	first, err := s.BeginRun(ctx, b)
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
	return b, parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer}, Events: evs,
		Limit: first + b.Reserve - 1, Last: first + int64(n) - 1, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now.Add(time.Second)}
}

// The run's events written while it streams are one round trip and the commit; its end two and
// the commit: the answer with the session's update (which gives the event numbers back too), then
// the events' row with the run's end.
func TestRoundTripsOfARunsEvents(t *testing.T) {
	var p probe
	s := openOneConn(t, &p)
	defer s.Close()
	ctx := context.Background()
	for i := range 2 { // the first prepares the statements on the connection
		_, f := finishFixture(t, s, 6, time.Now().UTC().Truncate(time.Microsecond))
		before := p.trips.Load()
		if err := s.AppendEncodedEvents(ctx, f.SessionID, f.At, f.Events[:2]); err != nil {
			t.Fatal(err)
		}
		// [BEGIN, the events' row] [COMMIT]; it was 3 (the stored rows read first).
		if got := p.trips.Load() - before; i == 1 && got != 2 {
			t.Errorf("AppendEncodedEvents: %d round trips, want 2", got)
		}
		f.Events = f.Events[2:]
		before = p.trips.Load()
		if err := s.FinishRun(ctx, f); err != nil {
			t.Fatal(err)
		}
		// [BEGIN, the answer, the session's update] [the events' row, the run's end] [COMMIT];
		// it was 6 (the stored rows read, the insert, the numbers given back and the end each one).
		if got := p.trips.Load() - before; i == 1 && got != 3 {
			t.Errorf("FinishRun: %d round trips, want 3", got)
		}
	}
}

// A run's end whose events overlap a row already stored (a write of the run's events that
// committed though its writer was not told so) stores each event once, the stored ones as they
// were, and the rest of the end as usual.
func TestFinishRunAroundStoredEvents(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	b, f := finishFixture(t, s, 7, time.Now().UTC().Truncate(time.Microsecond))
	first := f.Events[0].Seq
	// Events first+1..first+2 were stored, with other contents.
	var stored []parley.EncodedEvent
	for _, seq := range []int64{first + 1, first + 2} {
		ev := parley.Event{Seq: seq, Type: parley.EventChunk, RunID: b.Run.ID, SessionID: b.NewSession.ID, Content: "stored"}
		j, _ := json.Marshal(&ev)
		stored = append(stored, parley.EncodedEvent{Seq: seq, JSON: j, Event: &ev})
	}
	if err := s.AppendEncodedEvents(ctx, b.NewSession.ID, f.At, stored); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, f); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ListEvents(ctx, b.NewSession.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 7 {
		t.Fatalf("%d events stored, want 7: %+v", len(evs), evs)
	}
	for i, e := range evs {
		want := fmt.Sprintf("e%d", i)
		switch {
		case i == 1 || i == 2:
			want = "stored"
		case i >= 5:
			want = ""
		}
		if e.Seq != first+int64(i) || e.Content != want {
			t.Errorf("event %d: seq %d, content %q; want seq %d, content %q", i, e.Seq, e.Content, first+int64(i), want)
		}
	}
	if evs[5].Message == nil || evs[5].Message.Seq != 2 || evs[6].Type != parley.EventDone {
		t.Errorf("the record and done events: %+v %+v", evs[5], evs[6])
	}
	if _, err := s.ActiveRun(ctx, b.NewSession.ID); err == nil {
		t.Error("the run is still running after its end")
	}
	if next, err := s.ReserveEventSeqs(ctx, b.NewSession.ID, 1); err != nil || next != f.Last+1 {
		t.Errorf("the next event number %d, %v; want %d", next, err, f.Last+1)
	}
}

// FinishRun writes a chat's end in few statements (the answer and the session's update in one,
// the numbers given back in it; the events' row and the run's end in one); this holds it to the
// steps it stands for: the answer appended after the user's message by the statements of any
// message (AppendMessages naming its parent), the events appended (AppendEncodedEvents), the
// numbers given back (ReleaseEventSeqs) and the run ended (EndRun) must leave the same rows.
func TestFinishRunLeavesWhatItsStepsWould(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	fastBegin, fast := finishFixture(t, s, 6, now)
	stepsBegin, steps := finishFixture(t, s, 6, now)
	if err := s.FinishRun(ctx, fast); err != nil {
		t.Fatal(err)
	}
	answer := steps.Messages[0]
	answer.ParentID = stepsBegin.Messages[0].ID
	if err := s.AppendMessages(ctx, steps.SessionID, answer); err != nil {
		t.Fatal(err)
	}
	for i := range steps.Events {
		if e := &steps.Events[i]; e.JSON == nil {
			j, err := json.Marshal(e.Event)
			if err != nil {
				t.Fatal(err)
			}
			e.JSON = j
		}
	}
	if err := s.AppendEncodedEvents(ctx, steps.SessionID, steps.At, steps.Events); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseEventSeqs(ctx, steps.SessionID, steps.Limit, steps.Last); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRun(ctx, steps.RunID, steps.Instance, steps.Finish, steps.At); err != nil {
		t.Fatal(err)
	}
	if m := fast.Messages[0]; m.Seq != answer.Seq || m.ParentID != fastBegin.Messages[0].ID {
		t.Errorf("the answer: seq %d, parent %q; the steps give seq %d, parent of the user's message", m.Seq, m.ParentID, answer.Seq)
	}
	row := func(b *parley.RunBegin, f parley.RunFinish) string {
		ids := map[string]string{b.NewSession.ID: "session", b.Run.ID: "run", b.Messages[0].ID: "user", f.Messages[0].ID: "answer"}
		var out []any
		for _, q := range []string{
			`SELECT to_jsonb(s) FROM sessions s WHERE id = $1`,
			`SELECT to_jsonb(r) FROM runs r WHERE session_id = $1`,
			`SELECT jsonb_agg(to_jsonb(m) ORDER BY seq) FROM messages m WHERE session_id = $1`,
			`SELECT jsonb_agg(jsonb_build_object('first', first_seq, 'last', last_seq, 'data', convert_from(data, 'UTF8')::jsonb) ORDER BY first_seq)
				FROM event_batches WHERE session_id = $1`,
		} {
			var v any
			if err := s.pool.QueryRow(ctx, q, b.NewSession.ID).Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, replaceIDs(v, ids))
		}
		j, _ := json.Marshal(out)
		return string(j)
	}
	if f, st := row(fastBegin, fast), row(stepsBegin, steps); f != st {
		t.Errorf("FinishRun left\n%s\nthe steps left\n%s", f, st)
	}
}

// The statements of a chat's writes, counted as pgx sends them (each of a batch, BEGIN and
// COMMIT too): a new session's run begins in one statement, a run's end takes two, a write of
// events one.
func TestStatementsOfAChat(t *testing.T) {
	var p probe
	s := openOneConn(t, &p)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	count := func(name string, want int64, do func() error) {
		t.Helper()
		before := p.stmts.Load()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := p.stmts.Load() - before; got != want {
			t.Errorf("%s: %d statements, want %d", name, got, want)
		}
	}
	var (
		b *parley.RunBegin
		f parley.RunFinish
	)
	// BEGIN, the session with the run and the user's message, COMMIT; it was 5.
	count("BeginRun of a new session", 3, func() error { b, f = finishFixture(t, s, 6, now); return nil })
	// BEGIN, the events' row, COMMIT; it was 4.
	count("AppendEncodedEvents", 3, func() error { return s.AppendEncodedEvents(ctx, f.SessionID, f.At, f.Events[:2]) })
	f.Events = f.Events[2:]
	// BEGIN, the answer with the session's update, the events' row with the run's end, COMMIT;
	// it was 8.
	count("FinishRun", 4, func() error { return s.FinishRun(ctx, f) })
	if next, err := s.ReserveEventSeqs(ctx, b.NewSession.ID, 1); err != nil || next != f.Last+1 {
		t.Errorf("the next event number %d, %v; want %d", next, err, f.Last+1)
	}

	// A new session in a project that does not exist: not found, as CreateSession says.
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", ProjectID: "no-such-project", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i", LeaseUntil: now, CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
	_, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, Reserve: 10, Run: run, Messages: []*parley.Message{user}})
	if !errors.Is(err, parley.ErrNotFound) {
		t.Errorf("BeginRun in a project that does not exist: %v, want not found", err)
	}
}
