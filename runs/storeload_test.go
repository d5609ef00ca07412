package runs

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/store/postgres"
	"github.com/parleyhq/parley/store/postgres/pgtest"
	"github.com/parleyhq/parley/store/sqlite"
)

// Many runs emitting as fast as they can at once, on a real store: the store keeps up or slows
// them down, but logs no error, and every session's events read back from the store whole, in
// order, without a gap (what a client resuming from the database gets).
func TestManyFastRunsStoreEveryEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) parley.Store
	}{
		{"sqlite", func(t *testing.T) parley.Store {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "runs.db"))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"postgres", func(t *testing.T) parley.Store {
			st, err := postgres.Open(context.Background(), pgtest.Schema(t))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.open(t)
			defer st.Close()
			manyFastRuns(t, st)
		})
	}
}

func manyFastRuns(t *testing.T, st parley.Store) {
	// 1,000 runs, a chunk every 5 ms each (as the 1,000 streams) for 2 s; every tenth run
	// goes on past its block of reserved numbers (seqBlock), and reserves more while the store is
	// loaded. The store before group commit logged hundreds of errors here.
	// Under the race detector (CI's test command) 400 runs: the same overload for a store slowed
	// several times over, in a third of the time.
	runs, every := 1000, 5*time.Millisecond
	if raceOn {
		runs = 400
	}
	chunksOf := func(i int) int {
		if i%10 == 0 {
			return 1100
		}
		return 400
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var logs testlog.Buffer
	m := NewManager(Options{Events: st, Runs: st, Instance: "i1", Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	defer m.Shutdown(ctx)
	now := time.Now().UTC().Truncate(time.Microsecond)
	t0 := time.Now()
	sessions := make([]string, runs)
	started := make([]*Run, runs)
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: now, UpdatedAt: now}
			sessions[i] = sess.ID
			r, err := m.Begin(ctx, Spec{Session: sess.ID, Owner: "alice", NewSession: sess,
				Messages: []*parley.Message{{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: now}}})
			if err != nil {
				errs <- err
				return
			}
			started[i] = r
			r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
				for c := range chunksOf(i) {
					emit(parley.Event{Type: parley.EventChunk, Content: fmt.Sprintf("chunk %d", c)})
					time.Sleep(every)
				}
				return parley.FinishStop, nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	begun := time.Now()
	for _, r := range started {
		select {
		case <-r.Done():
		case <-ctx.Done():
			t.Fatalf("run %s did not end", r.ID)
		}
	}
	t.Logf("%d runs begun in %s, ended %s later", runs, begun.Sub(t0), time.Since(begun))
	t0 = time.Now()
	// An error is a write given up (an event or a run's end lost); a warning that the store was
	// slow and a write was tried again is backpressure doing its work.
	if l := logs.String(); strings.Contains(l, "level=ERROR") {
		t.Fatalf("the runs logged store errors:\n%.2000s", l)
	} else if l != "" {
		t.Logf("the store slowed the runs down:\n%.1000s", l)
	}
	for i, sid := range sessions {
		after, n := started[i].FirstSeq()-1, 0
		for {
			evs, err := st.ListEvents(ctx, sid, after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				if ev.Seq != after+1 {
					t.Fatalf("session %s: event %d after %d: a gap", sid, ev.Seq, after)
				}
				if c := n - 1; ev.Type == parley.EventChunk && ev.Content != fmt.Sprintf("chunk %d", c) {
					t.Fatalf("session %s: event %d is %q, want chunk %d", sid, ev.Seq, ev.Content, c)
				}
				after = ev.Seq
				n++
			}
		}
		if n != chunksOf(i)+2 || started[i].FirstSeq() != 1 {
			t.Fatalf("session %s: %d events stored from %d, want %d from 1 (start, chunks, done)", sid, n, started[i].FirstSeq(), chunksOf(i)+2)
		}
	}
	t.Logf("read back in %s", time.Since(t0))
}
