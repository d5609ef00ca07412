package postgres

import (
	"bytes"
	"context"
	"io/fs"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/postgres/pgtest"
	"github.com/parleyhq/parley/store/storetest"
)

func openTest(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.Schema(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openOneConn opens a store on a pool of one connection whose traffic p counts, for the tests
// that count a chat's round trips and statements.
func openOneConn(t testing.TB, p *probe) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.Schema(t)+"&pool_max_conns=1", p.options)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) parley.Store { return openTest(t) })
}

func TestMigrateUpDownUp(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, WithoutMigrate())
	defer s.Close()
	db := s.DB()
	defer db.Close()
	status := func() string {
		var b bytes.Buffer
		if err := Migrate(ctx, db, "status", &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	hasTable := func() bool {
		var reg *string
		if err := s.pool.QueryRow(ctx, `SELECT to_regclass('messages')::text`).Scan(&reg); err != nil {
			t.Fatal(err)
		}
		return reg != nil
	}
	files, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	n := len(files)
	if st := status(); strings.Count(st, "pending") != n || hasTable() {
		t.Fatalf("fresh schema: %q", st)
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
		if err := Migrate(ctx, db, step.cmd, &out); err != nil {
			t.Fatalf("step %d %s: %v", i, step.cmd, err)
		}
		if st := status(); hasTable() != step.table || strings.Count(st, "applied") != step.applied {
			t.Fatalf("step %d %s: table=%v status %q", i, step.cmd, hasTable(), st)
		}
	}
	var out bytes.Buffer
	if err := Migrate(ctx, db, "up", &out); err != nil || !strings.Contains(out.String(), "no pending") {
		t.Fatalf("second up: %q %v", out.String(), err)
	}
	now := time.Now().UTC()
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendMessages(ctx, sess.ID, &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("after up, down, up"), CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRejectsBadURL(t *testing.T) {
	_, err := Open(context.Background(), "postgres://user:s3cret@[::1")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad URL: %v", err)
	}
}

// A search_path naming a schema that does not exist is refused at Open with an error that says
// so and how to create it, not with PostgreSQL's "no schema has been selected to create in".
func TestOpenNamesAMissingSchema(t *testing.T) {
	u, err := url.Parse(pgtest.Schema(t)) // skips without PostgreSQL; the server is all we need
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", "parley_no_such_schema")
	u.RawQuery = q.Encode()
	_, err = Open(context.Background(), u.String())
	if err == nil || !strings.Contains(err.Error(), `the schema "parley_no_such_schema" that search_path names does not exist`) ||
		!strings.Contains(err.Error(), `CREATE SCHEMA "parley_no_such_schema";`) {
		t.Fatalf("missing schema: %v", err)
	}
	// A search_path whose first schema exists still opens.
	s := openTest(t)
	s.Close()
}

// TestMigrationBranchesKeepsChains: sessions stored before branches (migration 11) read back byte
// for byte the same after it: written, taken down to the schema before branches (which drops
// every parent and leaf) and migrated up, each is one chain whose parents and leaf the migration
// finds again from the seqs.
func TestMigrationBranchesKeepsChains(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	defer s.Close()
	ids := storetest.FillChains(t, s)
	before := storetest.Snapshot(t, s, ids)
	db := s.DB()
	defer db.Close()
	sub, _ := fs.Sub(migrationFiles, "migrations")
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'messages' AND column_name = 'parent_id'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("parent_id still there at version 10: %d %v", n, err)
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

// Migration 14 (fork lineage) keeps the sessions, messages and files as they are, both ways, and
// finds the forks made before it: the lineage after down and up is the one Fork recorded.
func TestForkedFromMigrationKeepsRows(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	defer s.Close()
	hasColumn := func() bool {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = 'sessions' AND column_name = 'forked_from'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	lineage := func() string {
		var out string
		if err := s.pool.QueryRow(ctx, `SELECT COALESCE(string_agg(id || '<' || forked_from, ' ' ORDER BY id), '')
			FROM sessions WHERE forked_from IS NOT NULL`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	db := s.DB()
	defer db.Close()
	sub, _ := fs.Sub(migrationFiles, "migrations")
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckForkedFromMigration(t, s, storetest.ForkedFromSchema{Before: 13, HasColumn: hasColumn, Lineage: lineage,
		Down: func() error { _, err := p.DownTo(ctx, 13); return err },
		Up:   func() error { _, err := p.Up(ctx); return err }})
}

// Migration 13 keeps the events stored one per row, each as a batch of one, and its down
// migration gives back one row per event, batches of many included.
func TestEventsBatchMigrationKeepsEvents(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, WithoutMigrate())
	defer s.Close()
	db := s.DB()
	defer db.Close()
	sub, _ := fs.Sub(migrationFiles, "migrations")
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	old := `INSERT INTO sessions (id, title, owner, created_at, updated_at, event_seq) VALUES ('s1', 't', 'o', now(), now(), 3);
		INSERT INTO events (session_id, seq, run_id, type, data, created_at) VALUES
			('s1', 1, 'r1', 'start', convert_to('{"seq":1,"type":"start","run_id":"r1","session_id":"s1"}', 'UTF8'), now()),
			('s1', 2, 'r1', 'chunk', convert_to('{"seq":2,"type":"chunk","run_id":"r1","session_id":"s1","content":"a\u0000\"b\""}', 'UTF8'), now()),
			('s1', 3, 'r1', 'done', convert_to('{"seq":3,"type":"done","run_id":"r1","session_id":"s1","finish_reason":"stop"}', 'UTF8'), now());`
	if _, err := db.ExecContext(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ListEvents(ctx, "s1", 0, 10)
	if err != nil || len(evs) != 3 || evs[1].Content != "a\x00\"b\"" || evs[2].FinishReason != "stop" {
		t.Fatalf("events after up: %+v, %v", evs, err)
	}
	if err := s.AppendEvents(ctx, "s1", time.Now(), []parley.Event{{Seq: 3, Type: "done"}, {Seq: 4, Type: parley.EventStart, RunID: "r2"}, {Seq: 5, Type: parley.EventDone, RunID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.ListEvents(ctx, "s1", 2, 10); err != nil || len(evs) != 3 || evs[0].FinishReason != "stop" || evs[2].Seq != 5 {
		t.Fatalf("events after a new batch: %+v, %v", evs, err)
	}
	if _, err := p.DownTo(ctx, 12); err != nil {
		t.Fatal(err)
	}
	var n int
	var types string
	if err := db.QueryRowContext(ctx, `SELECT count(*), string_agg(type, ',' ORDER BY seq) FROM events WHERE session_id = 's1'`).Scan(&n, &types); err != nil || n != 5 || types != "start,chunk,done,start,done" {
		t.Fatalf("after down: %d events (%s), %v", n, types, err)
	}
}

// A Fork of a session deleted between its branch's reads is not found (not an index panic).
func TestForkOfASessionDeletedBetweenItsReads(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	storetest.ForkOfADeletedSession(t, s, func(fn func()) { s.betweenBranchReads = fn })
}
