package sqlite

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if st := status(); !strings.Contains(st, "00001") || !strings.Contains(st, "pending") || hasTable() {
		t.Fatalf("fresh database: %q", st)
	}
	for i, step := range []struct {
		cmd   string
		table bool
		state string
	}{{"up", true, "applied"}, {"down", false, "pending"}, {"up", true, "applied"}} {
		var out bytes.Buffer
		if err := Migrate(ctx, s.DB(), step.cmd, &out); err != nil {
			t.Fatalf("step %d %s: %v", i, step.cmd, err)
		}
		if hasTable() != step.table || !strings.Contains(status(), step.state) {
			t.Fatalf("after %s: table=%v status %q", step.cmd, hasTable(), status())
		}
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
