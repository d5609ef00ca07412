package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// The tests of group commit: many callers' writes share transactions, each keeps its own
// outcome, and a run's beginning and end are one write each (parley.RunBeginner).

func beginner(t *testing.T, s parley.Store) parley.RunBeginner {
	t.Helper()
	rb, ok := s.(parley.RunBeginner)
	if !ok {
		t.Fatalf("%T is not a parley.RunBeginner", s)
	}
	return rb
}

func testBeginRun(t *testing.T, s parley.Store) {
	rb := beginner(t, s)
	at := base
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: at, UpdatedAt: at}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Model: "m", Instance: "i1",
		LeaseUntil: at.Add(time.Minute), CreatedAt: at, SelectedTools: []string{"calculator"}}
	user := msg(parley.RoleUser, "hello", at)
	user.RunID = run.ID
	first, err := rb.BeginRun(ctx, &parley.RunBegin{NewSession: sess, Reserve: 100, Run: run, Messages: []*parley.Message{user}})
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 || user.Seq != 1 || user.SessionID != sess.ID || run.FirstSeq != 1 || run.State != parley.RunStateRunning {
		t.Fatalf("first %d, message seq %d of %q, run first %d state %q", first, user.Seq, user.SessionID, run.FirstSeq, run.State)
	}
	if got, err := s.GetSession(ctx, sess.ID); err != nil || got.Owner != "alice" {
		t.Fatalf("the new session: %+v, %v", got, err)
	}
	h, err := s.History(ctx, sess.ID)
	if err != nil || len(h) != 1 || h[0].ID != user.ID || h[0].RunID != run.ID {
		t.Fatalf("history: %+v, %v", h, err)
	}
	active, err := s.ActiveRun(ctx, sess.ID)
	if err != nil || active.ID != run.ID || active.FirstSeq != 1 || len(active.SelectedTools) != 1 {
		t.Fatalf("active run: %+v, %v", active, err)
	}
	testBeginNewSessionWithTurn(t, s)

	// A second run of the session is refused, and nothing of it is stored: no message, no
	// numbers taken.
	second := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Instance: "i2", LeaseUntil: at.Add(time.Minute), CreatedAt: at}
	late := msg(parley.RoleUser, "again", at)
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID, Reserve: 100, Run: second, Messages: []*parley.Message{late}}); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("a second running run: %v, want conflict", err)
	}
	if h, _ := s.History(ctx, sess.ID); len(h) != 1 {
		t.Fatalf("the refused run stored its message: %d messages", len(h))
	}

	// The run ends: the numbers after its last event go back, and the session is free.
	if err := rb.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Limit: 100, Last: 7, RunID: run.ID, Instance: "i1",
		Finish: parley.FinishStop, At: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActiveRun(ctx, sess.ID); !isNotFound(err) {
		t.Fatalf("after FinishRun the run is still running: %v", err)
	}
	// An existing session: the next run goes on from 8.
	next := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Instance: "i1", LeaseUntil: at.Add(time.Minute), CreatedAt: at}
	if first, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID, Reserve: 10, Run: next, Messages: []*parley.Message{late}}); err != nil || first != 8 || late.Seq != 2 {
		t.Fatalf("the next run: first %d, message seq %d, %v; want 8 and 2", first, late.Seq, err)
	}
	// Finishing a run another instance took over is a conflict, and the numbers go back all
	// the same.
	err = rb.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Limit: 17, Last: 9, RunID: next.ID, Instance: "someone-else", Finish: parley.FinishStop, At: at})
	if parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("finishing another instance's run: %v, want conflict", err)
	}
	if first, err := s.ReserveEventSeqs(ctx, sess.ID, 1); err != nil || first != 10 {
		t.Fatalf("after a refused finish: next number %d, %v; want 10", first, err)
	}

	// A write that fails half-way leaves nothing: the new session, created first, goes too.
	orphan := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: at, UpdatedAt: at}
	dup := &parley.RunRecord{ID: run.ID, SessionID: orphan.ID, Owner: "alice", Instance: "i1", LeaseUntil: at.Add(time.Minute), CreatedAt: at}
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{NewSession: orphan, Reserve: 10, Run: dup, Messages: []*parley.Message{msg(parley.RoleUser, "x", at)}}); err == nil {
		t.Fatal("a run with a used id was stored")
	}
	if _, err := s.GetSession(ctx, orphan.ID); !isNotFound(err) {
		t.Fatalf("the session of a failed BeginRun was kept: %v", err)
	}
	// Unknown session, no reservation.
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: "no-such-session", Reserve: 1}); !isNotFound(err) {
		t.Fatalf("an unknown session: %v, want not found", err)
	}
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("reserving nothing: %v, want invalid", err)
	}
}

// Many writers at once, some of whose writes fail: each failure is its writer's alone, and every
// write acknowledged is stored.
func testConcurrentWritesFailAlone(t *testing.T, s parley.Store) {
	const writers = 64
	sessions := make([]*parley.Session, writers)
	for i := range sessions {
		sessions[i] = newSession(t, s, "alice", base)
	}
	busy := sessions[0]
	if err := s.CreateRun(ctx, &parley.RunRecord{ID: parley.NewID(), SessionID: busy.ID, Instance: "i1", LeaseUntil: base.Add(time.Hour), CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	msgs := make([]*parley.Message, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 4 {
			case 1: // an unknown session
				errs[i] = s.AppendMessages(ctx, fmt.Sprintf("missing-%d", i), msg(parley.RoleUser, "lost", base))
			case 2: // a second running run
				errs[i] = s.CreateRun(ctx, &parley.RunRecord{ID: parley.NewID(), SessionID: busy.ID, Instance: "i2", LeaseUntil: base.Add(time.Hour), CreatedAt: base})
			default:
				msgs[i] = msg(parley.RoleUser, fmt.Sprintf("message %d", i), base)
				errs[i] = s.AppendMessages(ctx, sessions[i].ID, msgs[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		switch i % 4 {
		case 1:
			if !isNotFound(err) {
				t.Errorf("writer %d (unknown session): %v, want not found", i, err)
			}
		case 2:
			if parley.CodeOf(err) != parley.ECConflict {
				t.Errorf("writer %d (second run): %v, want conflict", i, err)
			}
		default:
			if err != nil {
				t.Errorf("writer %d failed beside failing writes: %v", i, err)
				continue
			}
			h, err := s.History(ctx, sessions[i].ID)
			if err != nil || len(h) != 1 || h[0].ID != msgs[i].ID || msgs[i].Seq != 1 {
				t.Errorf("writer %d: acknowledged, stored %d messages (%v)", i, len(h), err)
			}
		}
	}
}

// Many runs emit events fast at once, each reserving its numbers in blocks and storing its
// events in small batches as a run does: every write succeeds, the numbers come in order, and
// every session's events read back whole, in order, without a gap.
func testConcurrentEventStreams(t *testing.T, s parley.Store) {
	const runs, events, block, batch = 48, 300, 64, 5
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = newSession(t, s, "alice", base).ID
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for _, sid := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit, next := int64(0), int64(1)
			for next <= events {
				if next > limit {
					first, err := s.ReserveEventSeqs(ctx, sid, block)
					if err != nil {
						errs <- fmt.Errorf("reserving: %w", err)
						return
					}
					if first != next {
						errs <- fmt.Errorf("reserved from %d, want %d", first, next)
						return
					}
					limit = first + block - 1
				}
				var evs []parley.Event
				for len(evs) < batch && next <= min(limit, events) {
					evs = append(evs, parley.Event{Seq: next, Type: parley.EventChunk, RunID: "r", SessionID: sid, Content: fmt.Sprintf("chunk %d", next)})
					next++
				}
				if err := s.AppendEvents(ctx, sid, base, evs); err != nil {
					errs <- fmt.Errorf("storing %d..%d: %w", evs[0].Seq, evs[len(evs)-1].Seq, err)
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
	for _, sid := range ids {
		after, n := int64(0), 0
		for {
			evs, err := s.ListEvents(ctx, sid, after, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if ev.Seq != after+1 || ev.Content != fmt.Sprintf("chunk %d", ev.Seq) {
					t.Fatalf("session %s: event %d (%q) after %d", sid, ev.Seq, ev.Content, after)
				}
				after = ev.Seq
				n++
			}
		}
		if n != events {
			t.Fatalf("session %s: %d events stored, want %d", sid, n, events)
		}
	}
}

// A run's end in one write (FinishRun): its answer, its events not stored yet (some encoded by
// the caller, some left to the store, after the answer is numbered), the numbers it gives back
// and its end; all of it or, on a failure, none of it.
func testFinishRunWithEnd(t *testing.T, s parley.Store) {
	rb := beginner(t, s)
	at := base
	begin := func(sess *parley.Session, instance string) (*parley.RunRecord, *parley.Message, int64) {
		t.Helper()
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Model: "m", Instance: instance,
			LeaseUntil: at.Add(time.Minute), CreatedAt: at}
		user := msg(parley.RoleUser, "hello", at)
		user.RunID = run.ID
		first, err := rb.BeginRun(ctx, &parley.RunBegin{NewSession: sess, Reserve: 100, Run: run, Messages: []*parley.Message{user}})
		if err != nil {
			t.Fatal(err)
		}
		return run, user, first
	}
	newSess := func() *parley.Session {
		return &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: at, UpdatedAt: at}
	}
	encoded := func(ev parley.Event) parley.EncodedEvent {
		t.Helper()
		b, err := json.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		return parley.EncodedEvent{Seq: ev.Seq, JSON: b, Event: &ev}
	}

	sess := newSess()
	run, user, first := begin(sess, "i1")
	ev := func(seq int64, typ parley.EventType) parley.Event {
		return parley.Event{Seq: seq, Type: typ, RunID: run.ID, SessionID: sess.ID, Content: fmt.Sprintf("e%d", seq)}
	}
	// The first events were stored while the run streamed, as the stream encoded them.
	if ea, ok := s.(parley.EncodedEventAppender); ok {
		if err := ea.AppendEncodedEvents(ctx, sess.ID, at, []parley.EncodedEvent{encoded(ev(first, parley.EventStart)), encoded(ev(first+1, parley.EventChunk))}); err != nil {
			t.Fatal(err)
		}
	} else if err := s.AppendEvents(ctx, sess.ID, at, []parley.Event{ev(first, parley.EventStart), ev(first+1, parley.EventChunk)}); err != nil {
		t.Fatal(err)
	}
	answer := msg(parley.RoleAssistant, "hi there", at.Add(time.Second))
	answer.RunID = run.ID
	record := parley.Event{Seq: first + 3, Type: parley.EventRecord, RunID: run.ID, SessionID: sess.ID, Message: answer}
	done := parley.Event{Seq: first + 4, Type: parley.EventDone, RunID: run.ID, SessionID: sess.ID, FinishReason: parley.FinishStop}
	end := parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer},
		Events: []parley.EncodedEvent{encoded(ev(first+2, parley.EventChunk)), {Seq: record.Seq, Event: &record}, {Seq: done.Seq, Event: &done}},
		Limit:  first + 99, Last: done.Seq, RunID: run.ID, Instance: "i1", Finish: parley.FinishStop, At: at.Add(time.Second)}
	if err := rb.FinishRun(ctx, end); err != nil {
		t.Fatal(err)
	}
	// The answer is numbered and follows the user's message; the record event the store encoded
	// shows it so.
	if answer.Seq != user.Seq+1 || answer.SessionID != sess.ID || answer.ParentID != user.ID {
		t.Fatalf("the answer: seq %d of %q, parent %q; want %d of %q, parent %q", answer.Seq, answer.SessionID, answer.ParentID, user.Seq+1, sess.ID, user.ID)
	}
	var rec parley.Event
	if err := json.Unmarshal(end.Events[1].JSON, &rec); err != nil || rec.Message == nil || rec.Message.Seq != answer.Seq || rec.Message.ParentID != user.ID || rec.Seq != record.Seq {
		t.Fatalf("the record event's JSON as the store made it: %s, %v", end.Events[1].JSON, err)
	}
	if want := jsonOf(t, &record); string(end.Events[1].JSON) != want {
		t.Fatalf("the record event's JSON:\n%s\nwant, as the numbered event encodes:\n%s", end.Events[1].JSON, want)
	}
	if end.Events[2].JSON == nil {
		t.Fatal("the done event's JSON was not set")
	}
	h, err := s.History(ctx, sess.ID)
	if err != nil || len(h) != 2 || h[1].ID != answer.ID || h[1].Content.String() != "hi there" {
		t.Fatalf("history after the run's end: %+v, %v", h, err)
	}
	evs, err := s.ListEvents(ctx, sess.ID, 0, 100)
	if err != nil || len(evs) != 5 {
		t.Fatalf("events: %d, %v; want 5", len(evs), err)
	}
	for i, e := range evs {
		if e.Seq != first+int64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, first+int64(i))
		}
	}
	if evs[2].Content != fmt.Sprintf("e%d", first+2) || evs[3].Type != parley.EventRecord || evs[3].Message == nil ||
		evs[3].Message.ID != answer.ID || evs[3].Message.Seq != answer.Seq || evs[4].Type != parley.EventDone || evs[4].FinishReason != parley.FinishStop {
		t.Fatalf("the events of the run's end as stored: %+v", evs[2:])
	}
	if _, err := s.ActiveRun(ctx, sess.ID); !isNotFound(err) {
		t.Fatalf("after FinishRun the run is still running: %v", err)
	}
	if next, err := s.ReserveEventSeqs(ctx, sess.ID, 1); err != nil || next != done.Seq+1 {
		t.Fatalf("after the run's end: next number %d, %v; want %d", next, err, done.Seq+1)
	}

	// A run another instance took over: a conflict, and its answer, events and numbers are
	// stored all the same.
	sess2 := newSess()
	run2, _, first2 := begin(sess2, "i1")
	answer2 := msg(parley.RoleAssistant, "late", at)
	answer2.RunID = run2.ID
	record2 := parley.Event{Seq: first2, Type: parley.EventRecord, RunID: run2.ID, SessionID: sess2.ID, Message: answer2}
	err = rb.FinishRun(ctx, parley.RunFinish{SessionID: sess2.ID, Messages: []*parley.Message{answer2}, Events: []parley.EncodedEvent{{Seq: first2, Event: &record2}},
		Limit: first2 + 99, Last: first2, RunID: run2.ID, Instance: "someone-else", Finish: parley.FinishStop, At: at})
	if parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("finishing another instance's run: %v, want conflict", err)
	}
	if h, err := s.History(ctx, sess2.ID); err != nil || len(h) != 2 || h[1].ID != answer2.ID {
		t.Fatalf("the answer of a run taken over: %d messages, %v", len(h), err)
	}
	if evs, err := s.ListEvents(ctx, sess2.ID, 0, 10); err != nil || len(evs) != 1 || evs[0].Message == nil || evs[0].Message.Seq != answer2.Seq {
		t.Fatalf("the events of a run taken over: %+v, %v", evs, err)
	}
	if next, err := s.ReserveEventSeqs(ctx, sess2.ID, 1); err != nil || next != first2+1 {
		t.Fatalf("after a refused finish: next number %d, %v; want %d", next, err, first2+1)
	}

	// A write that fails half-way (the answer names a parent the session does not have) stores
	// nothing: no message, no event, the run still running, no number given back.
	sess3 := newSess()
	run3, _, first3 := begin(sess3, "i1")
	bad := msg(parley.RoleAssistant, "x", at)
	bad.ParentID = parley.NewID()
	start3 := ev(first3, parley.EventStart)
	err = rb.FinishRun(ctx, parley.RunFinish{SessionID: sess3.ID, Messages: []*parley.Message{bad}, Events: []parley.EncodedEvent{encoded(start3)},
		Limit: first3 + 99, Last: first3, RunID: run3.ID, Instance: "i1", Finish: parley.FinishStop, At: at})
	if err == nil || parley.CodeOf(err) == parley.ECConflict {
		t.Fatalf("an end whose answer names an unknown parent: %v, want a failure", err)
	}
	if h, _ := s.History(ctx, sess3.ID); len(h) != 1 {
		t.Fatalf("a failed end stored its answer: %d messages", len(h))
	}
	if evs, _ := s.ListEvents(ctx, sess3.ID, 0, 10); len(evs) != 0 {
		t.Fatalf("a failed end stored %d events", len(evs))
	}
	if r, err := s.ActiveRun(ctx, sess3.ID); err != nil || r.ID != run3.ID {
		t.Fatalf("after a failed end the run is not running: %v", err)
	}
	if next, err := s.ReserveEventSeqs(ctx, sess3.ID, 1); err != nil || next != first3+100 {
		t.Fatalf("after a failed end: next number %d, %v; want %d", next, err, first3+100)
	}
	// Events out of order, or with nothing to store, are refused.
	for _, evs := range [][]parley.EncodedEvent{
		{encoded(ev(first3+2, parley.EventChunk)), encoded(ev(first3+1, parley.EventChunk))},
		{{Seq: first3 + 1}},
	} {
		if err := rb.FinishRun(ctx, parley.RunFinish{SessionID: sess3.ID, Events: evs, Limit: first3 + 99, Last: first3 + 2,
			RunID: run3.ID, Instance: "i1", Finish: parley.FinishStop, At: at}); parley.CodeOf(err) != parley.ECInvalid {
			t.Fatalf("an end with events %+v: %v, want invalid", evs, err)
		}
	}
}

// A new session begun with several messages is stored as the steps one by one would leave it
// (a store may insert it whole): its leaf is the last message, its usage their total, it was
// updated when the last was made, its event numbers are reserved from 1, and what is appended
// next follows.
func testBeginNewSessionWithTurn(t *testing.T, s parley.Store) {
	t.Helper()
	rb := beginner(t, s)
	at := base
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: at, UpdatedAt: at}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Model: "m", Instance: "i1",
		LeaseUntil: at.Add(time.Minute), CreatedAt: at}
	user := msg(parley.RoleUser, "hello", at)
	answer := msg(parley.RoleAssistant, "", at.Add(time.Second))
	answer.Usage = &parley.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10, Cost: 0.5}
	answer.ToolCalls = []parley.ToolCall{{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "calculator", Arguments: "{}"}}}
	first, err := rb.BeginRun(ctx, &parley.RunBegin{NewSession: sess, Reserve: 50, Run: run, Messages: []*parley.Message{user, answer}})
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 || user.Seq != 1 || answer.Seq != 2 || user.ParentID != "" || answer.ParentID != user.ID {
		t.Fatalf("first %d; seqs %d, %d; parents %q, %q", first, user.Seq, answer.Seq, user.ParentID, answer.ParentID)
	}
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LeafID != answer.ID || got.Usage != *answer.Usage || !got.UpdatedAt.Equal(answer.CreatedAt) || !got.CreatedAt.Equal(at) {
		t.Fatalf("the new session: leaf %q, usage %+v, created %v, updated %v; want %q, %+v, %v, %v",
			got.LeafID, got.Usage, got.CreatedAt, got.UpdatedAt, answer.ID, *answer.Usage, at, answer.CreatedAt)
	}
	if err := rb.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Limit: 50, Last: 3, RunID: run.ID, Instance: "i1",
		Finish: parley.FinishStop, At: at.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// The call is open: the session is found with open tool calls once its run ended.
	if ids, err := s.SessionsWithOpenToolCalls(ctx, "", 1000); err != nil || !slices.Contains(ids, sess.ID) {
		t.Fatalf("sessions with open tool calls: %v, %v; want %s among them", ids, err, sess.ID)
	}
	result := msg(parley.RoleTool, "3", at.Add(3*time.Second))
	result.ToolCallID, result.Name = "call_1", "calculator"
	if err := s.AppendMessages(ctx, sess.ID, result); err != nil || result.Seq != 3 || result.ParentID != answer.ID {
		t.Fatalf("the next message: seq %d, parent %q, %v; want 3 after %q", result.Seq, result.ParentID, err, answer.ID)
	}
	if ids, err := s.SessionsWithOpenToolCalls(ctx, "", 1000); err != nil || slices.Contains(ids, sess.ID) {
		t.Fatalf("sessions with open tool calls after the result: %v, %v", ids, err)
	}
	if next, err := s.ReserveEventSeqs(ctx, sess.ID, 1); err != nil || next != 4 {
		t.Fatalf("the next event number: %d, %v; want 4", next, err)
	}
}

// testBeginRunWithLeaf: a run's beginning may set the session's leaf in its write (a regenerated
// answer): the answer then follows that message. A leaf that is no message of the session fails
// the write, and leaves nothing of it: no run, no numbers reserved, the leaf as it was.
func testBeginRunWithLeaf(t *testing.T, s parley.Store) {
	rb := beginner(t, s)
	at := base
	sess, other := newSession(t, s, "alice", at), newSession(t, s, "alice", at)
	q, a := msg(parley.RoleUser, "q", at), msg(parley.RoleAssistant, "a", at)
	if err := s.AppendMessages(ctx, sess.ID, q, a); err != nil {
		t.Fatal(err)
	}
	elsewhere := msg(parley.RoleUser, "elsewhere", at)
	if err := s.AppendMessages(ctx, other.ID, elsewhere); err != nil {
		t.Fatal(err)
	}
	next, err := s.ReserveEventSeqs(ctx, sess.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	record := func() *parley.RunRecord {
		return &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Model: "m", Instance: "i1",
			LeaseUntil: at.Add(time.Minute), CreatedAt: at}
	}
	for name, leaf := range map[string]string{"an unknown message": parley.NewID(), "another session's message": elsewhere.ID} {
		for _, msgs := range [][]*parley.Message{nil, {msg(parley.RoleUser, "edit", at)}} {
			_, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID, Leaf: leaf, Reserve: 10, Run: record(), Messages: msgs})
			if !isNotFound(err) {
				t.Fatalf("a leaf that is %s (%d messages): %v, want not found", name, len(msgs), err)
			}
		}
	}
	if r, err := s.ActiveRun(ctx, sess.ID); !isNotFound(err) {
		t.Fatalf("a failed begin left a run: %+v, %v", r, err)
	}
	if leaf, _, err := s.Tree(ctx, sess.ID); err != nil || leaf != a.ID {
		t.Fatalf("a failed begin moved the leaf: %q, %v; want %q", leaf, err, a.ID)
	}
	if h, _ := s.History(ctx, sess.ID); len(h) != 2 {
		t.Fatalf("a failed begin stored a message: %d messages", len(h))
	}
	if first, err := s.ReserveEventSeqs(ctx, sess.ID, 1); err != nil || first != next+1 {
		t.Fatalf("after failed begins: next number %d, %v; want %d", first, err, next+1)
	}

	// The leaf is set with the run: the answer stored next is a sibling of the old one.
	run := record()
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID, Leaf: q.ID, Reserve: 10, Run: run}); err != nil {
		t.Fatal(err)
	}
	if leaf, _, err := s.Tree(ctx, sess.ID); err != nil || leaf != q.ID {
		t.Fatalf("the leaf after BeginRun: %q, %v; want the question %q", leaf, err, q.ID)
	}
	if active, err := s.ActiveRun(ctx, sess.ID); err != nil || active.ID != run.ID {
		t.Fatalf("active run: %+v, %v", active, err)
	}
	a2 := msg(parley.RoleAssistant, "a2", at)
	if err := s.AppendMessages(ctx, sess.ID, a2); err != nil || a2.ParentID != q.ID {
		t.Fatalf("the new answer's parent: %q, %v; want %q", a2.ParentID, err, q.ID)
	}
	if err := rb.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, RunID: run.ID, Instance: "i1", Finish: parley.FinishStop, At: at}); err != nil {
		t.Fatal(err)
	}
	// With a message that names no parent (the shape of a turn), the message follows the leaf.
	turn, edit := record(), msg(parley.RoleUser, "q again", at)
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{SessionID: sess.ID, Leaf: a.ID, Reserve: 10, Run: turn, Messages: []*parley.Message{edit}}); err != nil {
		t.Fatal(err)
	}
	if edit.ParentID != a.ID {
		t.Fatalf("the turn's message follows %q, want the leaf %q", edit.ParentID, a.ID)
	}
	if h, err := s.History(ctx, sess.ID); err != nil || len(h) != 3 || h[1].ID != a.ID || h[2].ID != edit.ID {
		t.Fatalf("history: %d messages, %v", len(h), err)
	}
	// A new session has no message to be its leaf.
	fresh := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: at, UpdatedAt: at}
	if _, err := rb.BeginRun(ctx, &parley.RunBegin{NewSession: fresh, Leaf: q.ID, Reserve: 1}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("a new session with a leaf: %v, want invalid", err)
	}
}
