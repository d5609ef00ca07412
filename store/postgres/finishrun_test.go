package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// finishFixture begins a run of a new session and returns what ends it: the answer, events
// first..first+n-1 (the last two left for the store to encode, as the run's record and done
// are) and the numbers to give back.
func finishFixture(t *testing.T, s *Store, n int) (*parley.RunBegin, parley.RunFinish) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
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
	s, err := Open(context.Background(), pgtest.Schema(t)+"&pool_max_conns=1", p.options)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 2 { // the first prepares the statements on the connection
		_, f := finishFixture(t, s, 6)
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
	b, f := finishFixture(t, s, 7)
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
