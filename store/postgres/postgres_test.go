package postgres

import (
	"bytes"
	"context"
	"io/fs"
	"net/url"
	"strings"
	"testing"
	"time"

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
