package sqlite

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// writtenBTrees returns the B-trees (tables and indexes, by name) whose pages the WAL of the
// database at path holds, each once, sorted: what the writes since the WAL last started over
// changed. Page 1 (the file's header, written whenever the file grows) is left out.
func writtenBTrees(t *testing.T, s *Store, path string) []string {
	t.Helper()
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(wal) < 32 {
		t.Fatalf("WAL of %d bytes", len(wal))
	}
	size := int(binary.BigEndian.Uint32(wal[8:12]))
	pages := map[int64]bool{}
	for off := 32; off+24+size <= len(wal); off += 24 + size {
		pages[int64(binary.BigEndian.Uint32(wal[off:off+4]))] = true
	}
	rows, err := s.db.Query(`SELECT name, pageno FROM dbstat`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		var page int64
		if err := rows.Scan(&name, &page); err != nil {
			t.Fatal(err)
		}
		if pages[page] && page != 1 && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// A streamed chat of a new session (its beginning, then its end with the answer and its events)
// writes one or more pages of each B-tree it changes, each of which the commit writes to the WAL
// and the checkpoint copies: 14 B-trees. Before migration 00017 also runs_lease, an index of
// the running runs by the end of their lease that no query needs (ClaimRuns and the ledger's
// clean-up read the running runs through runs_one_running, TestRunQueriesUseTheRunningRuns).
// Migration 00019 added runs_session, written when a run begins, which deleting a session finds
// its runs through (TestDeletingAParentSearchesItsChildrenByIndex).
func TestAChatWritesFourteenBTrees(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	chat := func() {
		f, err := beginChat(ctx, s, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	chat() // every table has its first pages
	if _, err := s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	chat()
	got := writtenBTrees(t, s, path)
	want := []string{
		"event_batches", "event_batches_created", "event_batches_seq",
		"messages", "runs", "runs_ended", "runs_one_running", "runs_session", "sessions", "sessions_owner_updated",
		"sqlite_autoindex_messages_1", "sqlite_autoindex_messages_2", "sqlite_autoindex_runs_1", "sqlite_autoindex_sessions_1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("a chat wrote the pages of %d B-trees:\n %s\nwant %d:\n %s", len(got), strings.Join(got, " "), len(want), strings.Join(want, " "))
	}
}

// beginChat begins a run of a new session with a user's message, as runs.Manager does, and
// returns its end: an answer and the run's start, chunks, records and done.
func beginChat(ctx context.Context, s *Store, now time.Time) (parley.RunFinish, error) {
	sess := &parley.Session{ID: parley.NewID(), Owner: "u", Title: "t", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "u", Model: "m", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hello"), RunID: run.ID, CreatedAt: now}
	first, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, Reserve: 1024, Run: run, Messages: []*parley.Message{user}})
	if err != nil {
		return parley.RunFinish{}, err
	}
	answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("hi there"), RunID: run.ID, Model: "m",
		CreatedAt: now, Usage: &parley.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}}
	evs := []parley.Event{{Type: parley.EventStart}, {Type: parley.EventRecord, Message: user},
		{Type: parley.EventChunk, Content: "hi "}, {Type: parley.EventChunk, Content: "there"},
		{Type: parley.EventRecord, Message: answer}, {Type: parley.EventDone, FinishReason: parley.FinishStop}}
	enc := make([]parley.EncodedEvent, len(evs))
	for j := range evs {
		e := &evs[j]
		e.Seq, e.RunID, e.SessionID = first+int64(j), run.ID, sess.ID
		enc[j] = parley.EncodedEvent{Seq: e.Seq, Event: e}
	}
	return parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer}, Events: enc, Limit: first + 1023,
		Last: enc[len(enc)-1].Seq, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now}, nil
}

// The queries that read the running runs find them through runs_one_running (the running runs
// only), not by a scan of every run: ClaimRuns (leases that ended, runs an instance left), the
// ledger's clean-up (DeleteEndedRunsBefore), RenewRuns (by id) and a session's running run.
func TestRunQueriesUseTheRunningRuns(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	for _, q := range []string{
		`UPDATE runs SET instance = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
			WHERE id IN (SELECT id FROM runs WHERE state = 'running' AND (lease_until < ? OR (instance = ? AND updated_at < ?))
				ORDER BY lease_until LIMIT ?) RETURNING id`,
		`DELETE FROM tool_calls WHERE updated_at < ? AND run_id NOT IN (SELECT id FROM runs WHERE state = 'running')`,
		`UPDATE runs SET lease_until = ? WHERE instance = ? AND state = 'running' AND id IN (?, ?) RETURNING id`,
		`SELECT ` + runCols + ` FROM runs WHERE session_id = ? AND state = 'running'`,
	} {
		plan := queryPlan(t, s, q, strings.Count(q, "?"))
		for _, step := range plan {
			if strings.Contains(step, " runs") && !strings.Contains(step, "runs_one_running") && !strings.Contains(step, "sqlite_autoindex_runs_1 (id=?)") {
				t.Errorf("%.60q: step %q, want the running runs read through runs_one_running (or a run by its id)", q, step)
			}
		}
	}
}

// Migration 17 drops an index and no row: a database written at version 16 (runs running, one
// of them with its lease ended, runs ended, the rows of their chats) reads back the same after
// it, and its running runs are found, claimed and renewed as before; down restores the index.
func TestMigration17KeepsRuns(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	defer s.Close()
	p := migrations(t, s)
	if _, err := p.DownTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	hasIndex := func() bool {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'runs_lease'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !hasIndex() {
		t.Fatal("no runs_lease at version 16")
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var ended, running []parley.RunFinish
	for i := range 6 {
		f, err := beginChat(ctx, s, now)
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if err := s.FinishRun(ctx, f); err != nil {
				t.Fatal(err)
			}
			ended = append(ended, f)
		} else {
			running = append(running, f)
		}
	}
	// One of the running runs had its lease end a minute ago.
	if _, err := s.RenewRuns(ctx, "i", []string{running[0].RunID}, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	dump := func() string {
		var b strings.Builder
		for _, q := range []string{
			`SELECT ` + runCols + ` FROM runs ORDER BY id`,
			`SELECT * FROM sessions ORDER BY id`,
			`SELECT * FROM messages ORDER BY id`,
			`SELECT * FROM event_batches ORDER BY session_id, first_seq`,
		} {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(dumpRows(t, tx, q))
			tx.Rollback()
		}
		return b.String()
	}
	before := dump()
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if hasIndex() {
		t.Fatal("runs_lease still there after migration 17")
	}
	if after := dump(); after != before {
		t.Fatalf("rows differ after migration 17:\nbefore %.3000s\nafter  %.3000s", before, after)
	}
	if !strings.Contains(before, running[2].RunID) || !strings.Contains(before, "ended") {
		t.Fatal("the dump holds no runs to compare")
	}
	for _, f := range running {
		if r, err := s.ActiveRun(ctx, f.SessionID); err != nil || r.ID != f.RunID {
			t.Fatalf("running run of %s: %+v %v", f.SessionID, r, err)
		}
	}
	for _, f := range ended {
		if _, err := s.ActiveRun(ctx, f.SessionID); parley.CodeOf(err) != parley.ECNotFound {
			t.Fatalf("ended run of %s found running: %v", f.SessionID, err)
		}
	}
	claimed, err := s.ClaimRuns(ctx, "j", "gone", now, now.Add(time.Minute), 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != running[0].RunID || claimed[0].Instance != "j" {
		t.Fatalf("claimed %+v %v, want the run whose lease ended", claimed, err)
	}
	renewed, err := s.RenewRuns(ctx, "i", []string{running[1].RunID, running[2].RunID, running[0].RunID}, now.Add(time.Hour))
	if slices.Sort(renewed); err != nil || !slices.Equal(renewed, sorted(running[1].RunID, running[2].RunID)) {
		t.Fatalf("renewed %v %v", renewed, err)
	}
	if n, err := s.DeleteEndedRunsBefore(ctx, now.Add(time.Second)); err != nil || n != 3 {
		t.Fatalf("deleted %d ended runs, %v; want 3", n, err)
	}
	if _, err := p.DownTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	if !hasIndex() {
		t.Fatal("down did not restore runs_lease")
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }
