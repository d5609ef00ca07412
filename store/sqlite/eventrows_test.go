package sqlite

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// tricky returns a chat's events whose JSON holds what a rewrite of a row could change: escapes,
// a NUL, text that looks like the members the compact form leaves out, a float, an empty list.
func trickyEvents(sessionID, runID string, first int64) []parley.Event {
	ok := true
	evs := []parley.Event{
		{Type: parley.EventStart, Model: "m"},
		{Type: parley.EventChunk, Content: "a\x00b \\\"c\" <&> \u2028 ,\"run_id\":\"x\",\"seq\":1}"},
		{Type: parley.EventUsage, Usage: &parley.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5, Cost: 0.1 + 0.2}},
		{Type: parley.EventToolResult, Message: &parley.Message{Role: parley.RoleTool, Content: parley.Text("é"), Success: &ok, SessionID: sessionID, RunID: runID}},
		{Type: parley.EventTodoUpdate, Todos: []parley.Todo{}},
		{Type: parley.EventDone, FinishReason: parley.FinishStop},
	}
	for i := range evs {
		evs[i].Seq, evs[i].RunID, evs[i].SessionID = first+int64(i), runID, sessionID
	}
	return evs
}

// rowForms returns the first byte of each event row of the session, in order.
func rowForms(t *testing.T, s *Store, sessionID string) string {
	t.Helper()
	var forms string
	if err := s.db.QueryRow(`SELECT group_concat(f, '') FROM (SELECT CAST(substr(data, 1, 1) AS TEXT) AS f FROM event_batches
		WHERE session_id = ? ORDER BY first_seq)`, sessionID).Scan(&forms); err != nil {
		t.Fatal(err)
	}
	return forms
}

// A chat's events are stored in the compact form (a row without the ids and numbers every event
// repeats), beside rows stored before it as JSON arrays, and every event reads back as written.
func TestEventsStoredCompactBesideOldRows(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	f, err := beginChat(ctx, s, now)
	if err != nil {
		t.Fatal(err)
	}
	// A row as every store wrote it before the compact form, numbered after the run's events.
	old := trickyEvents(f.SessionID, "old-run", f.Last+1)
	var array []byte
	for i := range old {
		js, err := json.Marshal(&old[i])
		if err != nil {
			t.Fatal(err)
		}
		array = append(append(array, "[,"[min(i, 1)]), js...)
	}
	array = append(array, ']')
	if _, err := s.db.Exec(`INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at) VALUES (?, ?, ?, ?, 0)`,
		f.SessionID, old[0].Seq, old[len(old)-1].Seq, array); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, f); err != nil {
		t.Fatal(err)
	}
	more := trickyEvents(f.SessionID, f.RunID, old[len(old)-1].Seq+1)
	if err := s.AppendEvents(ctx, f.SessionID, now, more); err != nil {
		t.Fatal(err)
	}
	if forms := rowForms(t, s, f.SessionID); forms != "{[{" {
		t.Fatalf("rows' forms %q, want the chat's compact row, the old array, a compact row", forms)
	}
	var size, events int
	if err := s.db.QueryRow(`SELECT length(data), last_seq - first_seq + 1 FROM event_batches WHERE session_id = ? AND first_seq = ?`,
		f.SessionID, f.Events[0].Seq).Scan(&size, &events); err != nil {
		t.Fatal(err)
	}
	var want []parley.Event
	for _, e := range f.Events {
		want = append(want, *e.Event)
	}
	want = append(append(want, old...), more...)
	got, err := s.ListEvents(ctx, f.SessionID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	// The answer's record is stored numbered, as the stream sends it.
	if len(got) != len(want) || got[4].Message == nil || got[4].Message.Seq != 2 || got[4].Message.SessionID != f.SessionID {
		t.Fatalf("read back %+v", got)
	}
	want[4].Message = got[4].Message
	// The chat's row, as a JSON array, would repeat both ids in each of its events.
	asArray := 1
	for i := range events {
		js, err := json.Marshal(&got[i])
		if err != nil {
			t.Fatal(err)
		}
		asArray += len(js) + 1
	}
	if size > asArray-(events-1)*(len(f.SessionID)+len(f.RunID)) {
		t.Errorf("the chat's row holds %d bytes for %d events, as an array %d", size, events, asArray)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back:\n%+v\nwant\n%+v", got, want)
	}
	if got, err := s.ListEvents(ctx, f.SessionID, 3, 5); err != nil || !reflect.DeepEqual(got, want[3:8]) {
		t.Fatalf("after 3, 5 of them: %+v %v", got, err)
	}
	// A retried write of what is stored stores nothing more.
	if err := s.AppendEvents(ctx, f.SessionID, now, more[2:]); err != nil {
		t.Fatal(err)
	}
	if forms := rowForms(t, s, f.SessionID); forms != "{[{" {
		t.Fatalf("after a retried write: %q", forms)
	}
}

// Migration 18's down turns every compact row into the JSON array of its events, which read back
// the same (and go further down, by migration 14's down, one row per event); up again changes no
// row.
func TestMigration18DownTurnsCompactRowsIntoArrays(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer s.Close()
	p := migrations(t, s)
	now := time.Now().UTC().Truncate(time.Microsecond)
	var sessions []string
	for range 3 {
		f, err := beginChat(ctx, s, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvents(ctx, f.SessionID, now, trickyEvents(f.SessionID, f.RunID, f.Last+1)); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, f.SessionID)
	}
	list := func() [][]parley.Event {
		var all [][]parley.Event
		for _, id := range sessions {
			evs, err := s.ListEvents(ctx, id, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, evs)
		}
		return all
	}
	before := list()
	if forms := rowForms(t, s, sessions[0]); forms != "{{" {
		t.Fatalf("rows' forms before down: %q", forms)
	}
	if _, err := p.DownTo(ctx, 17); err != nil {
		t.Fatal(err)
	}
	for _, id := range sessions {
		if forms := rowForms(t, s, id); forms != "[[" {
			t.Fatalf("rows' forms after down: %q", forms)
		}
	}
	if after := list(); !reflect.DeepEqual(after, before) {
		t.Fatalf("events after down:\n%+v\nbefore\n%+v", after, before)
	}
	if len(before[0]) != 12 || !strings.Contains(before[0][7].Content, "\x00") {
		t.Fatalf("events to compare: %+v", before[0])
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if after := list(); !reflect.DeepEqual(after, before) || rowForms(t, s, sessions[1]) != "[[" {
		t.Fatalf("events after up again:\n%+v", after)
	}
	if _, err := p.DownTo(ctx, 13); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM events WHERE session_id = ? AND run_id != '' AND json_extract(CAST(data AS TEXT), '$.seq') = seq`,
		sessions[2]).Scan(&n); err != nil || n != 12 {
		t.Fatalf("%d events at version 13, %v", n, err)
	}
}
