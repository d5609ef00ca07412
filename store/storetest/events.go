package storetest

import (
	"context"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func testEventSeqs(t *testing.T, s parley.Store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	sess := newSession(t, s, "alice", at)
	first, err := s.ReserveEventSeqs(ctx, sess.ID, 100)
	if err != nil || first != 1 {
		t.Fatalf("first reservation: %d, %v; want 1", first, err)
	}
	// A run that used 1..7 gives the rest back; the next run goes on from 8.
	if err := s.ReleaseEventSeqs(ctx, sess.ID, 100, 7); err != nil {
		t.Fatal(err)
	}
	if first, err = s.ReserveEventSeqs(ctx, sess.ID, 10); err != nil || first != 8 {
		t.Fatalf("after release: %d, %v; want 8", first, err)
	}
	// Once more was reserved, a late release must not hand out numbers again.
	if _, err := s.ReserveEventSeqs(ctx, sess.ID, 10); err != nil { // 18..27
		t.Fatal(err)
	}
	if err := s.ReleaseEventSeqs(ctx, sess.ID, 17, 9); err != nil {
		t.Fatal(err)
	}
	if first, err = s.ReserveEventSeqs(ctx, sess.ID, 1); err != nil || first != 28 {
		t.Fatalf("after a stale release: %d, %v; want 28", first, err)
	}
	if _, err := s.ReserveEventSeqs(ctx, "no-such-session", 1); !isNotFound(err) {
		t.Fatalf("reserving in an unknown session: %v, want not found", err)
	}
	if _, err := s.ReserveEventSeqs(ctx, sess.ID, 0); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("reserving nothing: %v, want invalid", err)
	}
}

func testEvents(t *testing.T, s parley.Store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	sess := newSession(t, s, "alice", at)
	other := newSession(t, s, "alice", at)
	user := msg(parley.RoleUser, "hi", at)
	user.ID = parley.NewID()
	var evs []parley.Event
	for i := int64(1); i <= 10; i++ {
		ev := parley.Event{Seq: i, Type: parley.EventChunk, RunID: "r1", SessionID: sess.ID, Content: "tok\u0000\n\"x\""}
		switch i {
		case 1:
			ev = parley.Event{Seq: i, Type: parley.EventStart, RunID: "r1", SessionID: sess.ID, Model: "mock/echo"}
		case 2:
			ev = parley.Event{Seq: i, Type: parley.EventRecord, RunID: "r1", SessionID: sess.ID, Message: user}
		case 10:
			ev = parley.Event{Seq: i, Type: parley.EventDone, RunID: "r1", SessionID: sess.ID, FinishReason: parley.FinishStop}
		}
		evs = append(evs, ev)
	}
	if err := s.AppendEvents(ctx, sess.ID, at, evs[:6]); err != nil {
		t.Fatal(err)
	}
	// Overlapping with what is stored (a retried write): the stored ones are skipped.
	if err := s.AppendEvents(ctx, sess.ID, at.Add(time.Hour), evs[4:]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, other.ID, at, []parley.Event{{Seq: 1, Type: parley.EventStart, RunID: "r2", SessionID: other.ID}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListEvents(ctx, sess.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if jsonOf(t, got) != jsonOf(t, evs) {
		t.Fatalf("events read back differ:\n got %s\nwant %s", jsonOf(t, got), jsonOf(t, evs))
	}
	page, err := s.ListEvents(ctx, sess.ID, 3, 4)
	if err != nil || len(page) != 4 || page[0].Seq != 4 || page[3].Seq != 7 {
		t.Fatalf("page after 3: %+v, %v", page, err)
	}
	if rest, err := s.ListEvents(ctx, sess.ID, 10, 10); err != nil || len(rest) != 0 {
		t.Fatalf("after the last: %d events, %v", len(rest), err)
	}
	if err := s.AppendEvents(ctx, "no-such-session", at, evs[:1]); !isNotFound(err) {
		t.Fatalf("events of an unknown session: %v, want not found", err)
	}
	if err := s.AppendEvents(ctx, sess.ID, at, []parley.Event{{Type: parley.EventChunk}}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("event without seq: %v, want invalid", err)
	}

	// Retention: the first write (at) goes, the second (at+1h) stays.
	n, err := s.DeleteEventsBefore(ctx, at.Add(time.Minute))
	if err != nil || n != 7 { // 6 of sess, 1 of other
		t.Fatalf("DeleteEventsBefore: %d, %v; want 7", n, err)
	}
	left, err := s.ListEvents(ctx, sess.ID, 0, 100)
	if err != nil || len(left) != 4 || left[0].Seq != 7 {
		t.Fatalf("after retention: %+v, %v", left, err)
	}
	// Deleting the session deletes its events.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if left, err := s.ListEvents(ctx, sess.ID, 0, 100); err != nil || len(left) != 0 {
		t.Fatalf("events of a deleted session: %d, %v", len(left), err)
	}
}
