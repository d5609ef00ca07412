package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// A chat's events make a row of over 2 KB, which PostgreSQL compresses before storing it. Since
// migration 00017 it does so with lz4 where the server has it (pglz, the default, was the
// backends' costliest function at 32 chats in flight), and the events read back as they were
// stored. On main the row is compressed with pglz. A server without lz4 keeps pglz.
func TestARowOfEventsIsCompressedWithLZ4(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	var lz4 bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_settings
		WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	want := "pglz"
	if lz4 {
		want = "lz4"
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	run := parley.NewID()
	evs := make([]parley.Event, 20)
	for i := range evs {
		evs[i] = parley.Event{Seq: int64(i + 1), Type: parley.EventChunk, RunID: run, SessionID: sess.ID,
			Content: strings.Repeat("a chunk of the answer, ", 5)}
	}
	if err := s.AppendEvents(ctx, sess.ID, now, evs); err != nil {
		t.Fatal(err)
	}
	var (
		size   int
		method *string
	)
	if err := s.pool.QueryRow(ctx, `SELECT octet_length(data), pg_column_compression(data) FROM event_batches
		WHERE session_id = $1`, sess.ID).Scan(&size, &method); err != nil {
		t.Fatal(err)
	}
	if size <= 2032 {
		t.Fatalf("the row of events is %d bytes: too small to be compressed, the test shows nothing", size)
	}
	if method == nil || *method != want {
		t.Fatalf("the row of events (%d bytes) is compressed with %v, want %s", size, deref(method), want)
	}
	got, err := s.ListEvents(ctx, sess.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read back %d events, want %d", len(got), len(evs))
	}
	for i, e := range got {
		if e.Seq != evs[i].Seq || e.Content != evs[i].Content || e.RunID != run {
			t.Fatalf("event %d read back as %+v, want %+v", i, e, evs[i])
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return "nothing"
	}
	return *p
}
