package runs

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/store/sqlite"
)

// slowEnd is a store too slow, once, to record the end of a run within its caller's deadline:
// the write either never happened (lost) or committed after the deadline (late).
type slowEnd struct {
	*sqlite.Store
	late  bool
	calls atomic.Int32
}

func (s *slowEnd) FinishRun(ctx context.Context, f parley.RunFinish) error {
	if s.calls.Add(1) == 1 {
		if s.late {
			if err := s.Store.FinishRun(ctx, f); err != nil {
				return err
			}
		}
		return context.DeadlineExceeded
	}
	return s.Store.FinishRun(ctx, f)
}

// An overloaded store slows the end of a run down instead of leaving its record running: a
// write of the end that timed out is tried again, and a retry that finds the end already
// written (the first write committed late) is no error.
func TestEndOfARunIsWrittenAgainWhenTheStoreTimesOut(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := map[bool]string{false: "lost", true: "late"}[late]
		t.Run(name, func(t *testing.T) {
			st := &slowEnd{Store: durableStore(t, "s1"), late: late}
			var logs testlog.Buffer
			m := NewManager(Options{Events: st, Runs: st, Instance: "i1",
				Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			defer m.Shutdown(context.Background())
			r, err := m.Begin(context.Background(), Spec{Session: "s1", Owner: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			r.Go(chunks(3))
			waitDone(t, r)
			if n := st.calls.Load(); n != 2 {
				t.Fatalf("FinishRun called %d times, want 2", n)
			}
			if _, err := st.ActiveRun(context.Background(), "s1"); !errors.Is(err, parley.ErrNotFound) {
				t.Fatalf("the run's record is still running (%v)", err)
			}
			l := logs.String()
			if strings.Contains(l, "level=ERROR") || !strings.Contains(l, "level=WARN") {
				t.Fatalf("want a warning and no error, got:\n%s", l)
			}
		})
	}
}
