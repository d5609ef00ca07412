package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/store/storetest"
)

// The sweep deletes the tool approvals decided longer than --approval-retention ago, and keeps
// the recent ones and the "always" allowance.
func TestSweepDeletesOldApprovals(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "sweep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := now.Add(-8 * 24 * time.Hour)
	sess := &parley.Session{ID: parley.NewID(), Owner: "u", CreatedAt: old, UpdatedAt: old}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id     string
		at     time.Time
		always bool
	}{{"old", old, false}, {"old_always", old, true}, {"recent", now.Add(-time.Hour), false}} {
		if _, err := st.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: sess.ID, CallID: c.id, RunID: "r", Tool: "t_" + c.id,
			Arguments: "{}", CreatedAt: c.at, ExpiresAt: c.at.Add(10 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DecideApproval(ctx, sess.ID, c.id, parley.ApprovalDecision{State: parley.ApprovalApproved, Always: c.always, At: c.at}); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string { return storetest.ApprovalCallIDs(t, st, sess.ID) }
	stop := sweeper(ctx, st, 0, 7*24*time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer stop()
	// The sweep's first pass runs at once; the next, an hour later.
	want := []string{"old_always", "recent"}
	for deadline := time.Now().Add(time.Minute); !slices.Equal(left(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("approvals after the sweep: %v, want %v", left(), want)
		}
	}
}
