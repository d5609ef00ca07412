package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/storetest"
)

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) parley.Store { return openTemp(t) })
}

func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendMessages(ctx, sess.ID, &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("kept"), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.History(ctx, sess.ID)
	if err != nil || len(h) != 1 || h[0].Content.String() != "kept" {
		t.Fatalf("after reopen: %v %v", h, err)
	}
	var mode, sync string
	s.DB().QueryRow("PRAGMA journal_mode").Scan(&mode)
	s.DB().QueryRow("PRAGMA synchronous").Scan(&sync)
	if mode != "wal" || sync != "2" { // 2 is FULL
		t.Fatalf("journal_mode=%s synchronous=%s, want wal and 2 (FULL)", mode, sync)
	}
}

func TestMigrateUpDownUp(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "m.db"), WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	status := func() string {
		var b bytes.Buffer
		if err := Migrate(ctx, s.DB(), "status", &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	hasTable := func() bool {
		var n int
		s.DB().QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'messages'`).Scan(&n)
		return n == 1
	}
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	n := len(files)
	if st := status(); strings.Count(st, "pending") != n || hasTable() {
		t.Fatalf("fresh database: %q", st)
	}
	// Up applies all; each down reverts one (the first down drops the tables); up restores all.
	type step struct {
		cmd     string
		table   bool
		applied int
	}
	steps := []step{{"up", true, n}}
	for i := n - 1; i >= 0; i-- {
		steps = append(steps, step{"down", i > 0, i})
	}
	steps = append(steps, step{"up", true, n})
	for i, step := range steps {
		var out bytes.Buffer
		if err := Migrate(ctx, s.DB(), step.cmd, &out); err != nil {
			t.Fatalf("step %d %s: %v", i, step.cmd, err)
		}
		if st := status(); hasTable() != step.table || strings.Count(st, "applied") != step.applied {
			t.Fatalf("step %d %s: table=%v status %q", i, step.cmd, hasTable(), st)
		}
	}
	now := time.Now().UTC()
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendMessages(ctx, sess.ID, &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("after up, down, up"), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Migrate(ctx, s.DB(), "up", &out); err != nil || !strings.Contains(out.String(), "no pending") {
		t.Fatalf("second up: %q %v", out.String(), err)
	}
	if err := Migrate(ctx, s.DB(), "sideways", &out); err == nil {
		t.Fatal("unknown command accepted")
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, p := range []string{"", "a.db?mode=ro", filepath.Join(t.TempDir(), "missing-dir", "x.db")} {
		if s, err := Open(context.Background(), p); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestMigration2KeepsData writes rows in the first schema's form (content as JSON), migrates up
// and checks what the store reads back (and the session cost migration 3 totals), then migrates
// down to the first schema and checks the rows are as written.
func TestMigration2KeepsData(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "m2.db"), WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := migrations(t, s)
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	const v1 = `INSERT INTO sessions (id, title, owner, created_at, updated_at) VALUES ('s1', 't', 'o', 1, 2);
		INSERT INTO messages (id, session_id, seq, role, content, created_at) VALUES ('m1', 's1', 1, 'user', '"héllo \"x\""', 1);
		INSERT INTO messages (id, session_id, seq, role, content, tool_calls, usage, created_at) VALUES ('m2', 's1', 2, 'assistant', 'null',
			'[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]', '{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"cached_tokens":4,"cost":0.5}', 2);
		INSERT INTO messages (id, session_id, seq, role, content, created_at) VALUES ('m3', 's1', 3, 'user',
			'[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]', 3);`
	if _, err := s.DB().ExecContext(ctx, v1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := s.History(ctx, "s1")
	if err != nil || len(h) != 3 {
		t.Fatalf("history after up: %v %v", h, err)
	}
	got := jsonString(t, []parley.Message{h[0].OpenAI(), h[1].OpenAI(), h[2].OpenAI()})
	want := `[{"role":"user","content":"héllo \"x\""},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]`
	if got != want {
		t.Fatalf("after up:\n got %s\nwant %s", got, want)
	}
	sess, err := s.GetSession(ctx, "s1")
	if err != nil || sess.Usage != (parley.Usage{PromptTokens: 10, CompletionTokens: 3, TotalTokens: 13, CachedTokens: 4, Cost: 0.5}) {
		t.Fatalf("usage after up: %+v %v", sess, err)
	}
	if open, err := s.SessionsWithOpenToolCalls(ctx, "", 10); err != nil || len(open) != 1 || open[0] != "s1" {
		t.Fatalf("open tool calls after up: %v %v", open, err)
	}
	next := &parley.Message{ID: "m4", Role: parley.RoleUser, Content: parley.Text("next"), CreatedAt: time.UnixMicro(4)}
	if err := s.AppendMessages(ctx, "s1", next); err != nil || next.Seq != 4 {
		t.Fatalf("append after up: seq %d %v", next.Seq, err)
	}
	if _, err := p.DownTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT content FROM messages ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var contents []string
	for rows.Next() {
		var c string
		rows.Scan(&c)
		contents = append(contents, c)
	}
	wantV1 := []string{`"héllo \"x\""`, `null`,
		`[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]`, `"next"`}
	if strings.Join(contents, "\n") != strings.Join(wantV1, "\n") {
		t.Fatalf("after down: %q", contents)
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMigrationBranchesKeepsChains: sessions stored before branches (migration 12) read back byte
// for byte the same after it: written, taken down to the schema before branches (which drops
// every parent and leaf) and migrated up, each is one chain whose parents and leaf the migration
// finds again from the seqs.
func TestMigrationBranchesKeepsChains(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer s.Close()
	ids := storetest.FillChains(t, s)
	before := storetest.Snapshot(t, s, ids)
	p := migrations(t, s)
	if _, err := p.DownTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM pragma_table_info('messages') WHERE name = 'parent_id'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("parent_id still there at version 11: %d %v", n, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if after := storetest.Snapshot(t, s, ids); after != before {
		t.Fatalf("migrated sessions differ:\nbefore %.3000s\nafter  %.3000s", before, after)
	}
	if !strings.Contains(before, `"parent_id":"`) || !strings.Contains(before, `"leaf_id":"`) {
		t.Fatal("the snapshot holds no parents or leaves to compare")
	}
}

// Migration 16 (fork lineage) keeps the sessions, messages and files as they are, both ways, and
// finds the forks made before it: the lineage after down and up is the one Fork recorded.
func TestForkedFromMigrationKeepsRows(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer s.Close()
	hasColumn := func() bool {
		var n int
		if err := s.DB().QueryRow(`SELECT count(*) FROM pragma_table_info('sessions') WHERE name = 'forked_from'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	lineage := func() string {
		var out string
		if err := s.DB().QueryRow(`SELECT COALESCE(group_concat(id || '<' || forked_from, ' '), '')
			FROM (SELECT id, forked_from FROM sessions WHERE forked_from IS NOT NULL ORDER BY id)`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	p := migrations(t, s)
	storetest.CheckForkedFromMigration(t, s, storetest.ForkedFromSchema{Before: 15, HasColumn: hasColumn, Lineage: lineage,
		Down: func() error { _, err := p.DownTo(ctx, 15); return err },
		Up:   func() error { _, err := p.Up(ctx); return err }})
}

// Migration 14 keeps the events stored one per row, each as a batch of one, and its down
// migration gives back one row per event, batches of many included.
func TestEventsBatchMigrationKeepsEvents(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "m14.db"), WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := migrations(t, s)
	if _, err := p.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	const old = `INSERT INTO sessions (id, title, owner, created_at, updated_at, event_seq) VALUES ('s1', 't', 'o', 1, 2, 3);
		INSERT INTO events (session_id, seq, run_id, type, data, created_at) VALUES
			('s1', 1, 'r1', 'start', CAST('{"seq":1,"type":"start","run_id":"r1","session_id":"s1"}' AS BLOB), 10),
			('s1', 2, 'r1', 'chunk', CAST('{"seq":2,"type":"chunk","run_id":"r1","session_id":"s1","content":"a\u0000\"b\""}' AS BLOB), 10),
			('s1', 3, 'r1', 'done', CAST('{"seq":3,"type":"done","run_id":"r1","session_id":"s1","finish_reason":"stop"}' AS BLOB), 10);`
	if _, err := s.DB().ExecContext(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ListEvents(ctx, "s1", 0, 10)
	if err != nil || len(evs) != 3 || evs[1].Content != "a\x00\"b\"" || evs[2].FinishReason != "stop" {
		t.Fatalf("events after up: %+v, %v", evs, err)
	}
	if err := s.AppendEvents(ctx, "s1", time.UnixMicro(20), []parley.Event{{Seq: 3, Type: "done"}, {Seq: 4, Type: parley.EventStart, RunID: "r2"}, {Seq: 5, Type: parley.EventDone, RunID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.ListEvents(ctx, "s1", 2, 10); err != nil || len(evs) != 3 || evs[0].FinishReason != "stop" || evs[2].Seq != 5 {
		t.Fatalf("events after a new batch: %+v, %v", evs, err)
	}
	if _, err := p.DownTo(ctx, 13); err != nil {
		t.Fatal(err)
	}
	var n int
	var types string
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*), group_concat(type, ',') FROM (SELECT type FROM events WHERE session_id = 's1' ORDER BY seq)`).Scan(&n, &types); err != nil || n != 5 || types != "start,chunk,done,start,done" {
		t.Fatalf("after down: %d events (%s), %v", n, types, err)
	}
}

// Migration 15 makes event_batches a rowid table and keeps its rows byte for byte, both ways
// (a row larger than a page, bytes that are no valid UTF-8, a NUL); (session_id, first_seq)
// stays unique.
func TestEventBatchesRowidMigrationKeepsRows(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "m15.db"), WithoutMigrate())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := migrations(t, s)
	if _, err := p.UpTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at, event_seq) VALUES
		('s1', 't', 'o', 1, 2, 9), ('s2', 't', 'o', 1, 2, 9)`); err != nil {
		t.Fatal(err)
	}
	large := `[{"seq":4,"type":"chunk","content":"` + strings.Repeat("é", 3000) + `"}]`
	rows := []struct {
		sess        string
		first, last int64
		data        []byte
		at          int64
	}{
		{"s2", 1, 3, []byte(`[{"seq":1,"type":"start"},{"seq":2,"type":"chunk","content":"a\u0000b"},{"seq":3,"type":"done"}]`), 10},
		{"s1", 1, 3, []byte{'[', 0, 0xff, 0xfe, ']'}, 11},
		{"s1", 4, 4, []byte(large), 12},
		{"s1", 5, 9, []byte(`[]`), 13},
	}
	for _, r := range rows {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at) VALUES (?, ?, ?, ?, ?)`,
			r.sess, r.first, r.last, r.data, r.at); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		t.Helper()
		var out string
		if err := s.DB().QueryRowContext(ctx, `SELECT group_concat(session_id || ':' || first_seq || ':' || last_seq || ':' || hex(data) || ':' || created_at, ',')
			FROM (SELECT * FROM event_batches ORDER BY session_id, first_seq)`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	withoutRowid := func() bool {
		t.Helper()
		var wr bool
		if err := s.DB().QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE name = 'event_batches'`).Scan(&wr); err != nil {
			t.Fatal(err)
		}
		return wr
	}
	before := snapshot()
	if !withoutRowid() {
		t.Fatal("event_batches has a rowid at version 14")
	}
	if _, err := p.UpTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if withoutRowid() {
		t.Error("event_batches is still WITHOUT ROWID at version 15")
	}
	if after := snapshot(); after != before {
		t.Errorf("rows after up:\n%.300s\nwant\n%.300s", after, before)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at) VALUES ('s1', 4, 4, '[]', 14)`); err == nil {
		t.Error("a second row with the same session and first number was accepted")
	}
	if evs, err := s.ListEvents(ctx, "s2", 0, 10); err != nil || len(evs) != 3 || evs[1].Content != "a\x00b" {
		t.Errorf("events after up: %+v, %v", evs, err)
	}
	if _, err := p.DownTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	if !withoutRowid() {
		t.Error("event_batches has a rowid after down")
	}
	if after := snapshot(); after != before {
		t.Errorf("rows after down:\n%.300s\nwant\n%.300s", after, before)
	}
}

// A Fork of a session deleted between its branch's reads is not found (not an index panic).
func TestForkOfASessionDeletedBetweenItsReads(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	storetest.ForkOfADeletedSession(t, s, func(fn func()) { s.betweenBranchReads = fn })
}

// migrations returns a goose provider of the store's migrations on s's database, to move it
// between versions.
func migrations(t *testing.T, s *Store) *goose.Provider {
	t.Helper()
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, s.DB(), sub)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
