package runs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/store/sqlite"
)

// durableStore opens a real SQLite store with the sessions the tests use.
func durableStore(t *testing.T, sessions ...string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "runs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, id := range sessions {
		if err := st.CreateSession(context.Background(), &parley.Session{ID: id, Title: id, Owner: "alice", CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func durable(t *testing.T, st *sqlite.Store, instance string, lease time.Duration) *Manager {
	t.Helper()
	m := NewManager(Options{Events: st, Runs: st, Instance: instance, Lease: lease, FlushEvery: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

func waitDone(t *testing.T, r *Run) {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s did not end", r.ID)
	}
}

// One run per session holds across instances sharing a store.
func TestOneRunPerSessionAcrossInstances(t *testing.T) {
	st := durableStore(t, "s1")
	a, b := durable(t, st, "a", time.Minute), durable(t, st, "b", time.Minute)
	ra, err := a.Begin(context.Background(), Spec{Session: "s1", Model: "m", Owner: "alice", SelectedTools: []string{"calculator"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Begin(context.Background(), Spec{Session: "s1"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second run on another instance: %v, want ErrBusy", err)
	}
	rec, err := st.ActiveRun(context.Background(), "s1")
	if err != nil || rec.ID != ra.ID || rec.Instance != "a" || rec.Owner != "alice" || len(rec.SelectedTools) != 1 {
		t.Fatalf("the run's record: %+v %v", rec, err)
	}
	// A run given back before it started frees the session everywhere.
	ra.Release()
	rb, err := b.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	rb.Go(chunks(2))
	waitDone(t, rb)
	if _, err := st.ActiveRun(context.Background(), "s1"); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("the record after the run: %v, want ended", err)
	}
	if _, err := a.Begin(context.Background(), Spec{Session: "s1"}); err != nil {
		t.Fatalf("the next run on a: %v", err)
	}
}

// A run whose instance died is taken over once its lease ends: same run, new events, its body from
// the recover function, and its record ended.
func TestRunIsTakenOverWhenItsLeaseEnds(t *testing.T) {
	st := durableStore(t, "s1")
	ctx := context.Background()
	dead := &parley.RunRecord{ID: parley.NewID(), SessionID: "s1", Owner: "alice", Model: "mock/echo", Instance: "dead",
		LeaseUntil: time.Now().Add(300 * time.Millisecond), CreatedAt: time.Now()}
	if err := st.CreateRun(ctx, dead); err != nil {
		t.Fatal(err)
	}
	b := durable(t, st, "b", 300*time.Millisecond)
	got := make(chan parley.RunRecord, 1)
	b.Start(func(_ *Run, rec parley.RunRecord) Func {
		got <- rec
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			emit(parley.Event{Type: parley.EventChunk, Content: "went on"})
			return parley.FinishStop, nil
		}
	})
	var rec parley.RunRecord
	select {
	case rec = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not taken over")
	}
	if rec.ID != dead.ID || rec.Instance != "b" || rec.Attempts != 1 || rec.Model != "mock/echo" {
		t.Fatalf("taken over: %+v", rec)
	}
	r, ok := b.Get(dead.ID)
	if !ok {
		t.Fatal("the run is not held by the instance that took it over")
	}
	waitDone(t, r)
	evs := events(t, r)
	if len(evs) != 3 || evs[0].Type != parley.EventStatus || evs[0].State != parley.RunRecovered || evs[1].Content != "went on" ||
		evs[2].Type != parley.EventDone || evs[2].RunID != dead.ID {
		t.Fatalf("events of the taken-over run: %+v", evs)
	}
	if _, err := st.ActiveRun(ctx, "s1"); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("record after the takeover ended: %v, want ended", err)
	}
}

// An instance that restarts under its name takes its runs back at once, lease or not; without a
// recover function the run is closed as interrupted.
func TestRestartTakesItsRunsBackAtOnce(t *testing.T) {
	st := durableStore(t, "s1", "s2")
	ctx := context.Background()
	mine := &parley.RunRecord{ID: parley.NewID(), SessionID: "s1", Instance: "a", LeaseUntil: time.Now().Add(time.Hour), CreatedAt: time.Now()}
	theirs := &parley.RunRecord{ID: parley.NewID(), SessionID: "s2", Instance: "b", LeaseUntil: time.Now().Add(time.Hour), CreatedAt: time.Now()}
	for _, r := range []*parley.RunRecord{mine, theirs} {
		if err := st.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	a := durable(t, st, "a", time.Hour)
	a.Start(nil)
	deadline := time.Now().Add(10 * time.Second)
	var r *Run
	for r == nil && time.Now().Before(deadline) {
		r, _ = a.Get(mine.ID)
		time.Sleep(10 * time.Millisecond)
	}
	if r == nil {
		t.Fatal("the restarted instance did not take its run back")
	}
	waitDone(t, r)
	if finish, _ := r.Result(); finish != parley.FinishInterrupted {
		t.Fatalf("finish %q, want interrupted", finish)
	}
	if _, ok := a.Get(theirs.ID); ok {
		t.Fatal("another instance's live run was taken")
	}
	if rec, err := st.ActiveRun(ctx, "s2"); err != nil || rec.Instance != "b" {
		t.Fatalf("b's run: %+v %v", rec, err)
	}
}

// A live instance renews its leases: a run longer than the lease is not taken over.
//
// b's clock runs a second behind, so that a busy machine stalling a for less than that does not
// make b take the run over: the run lasts until a has renewed its lease past where b would take it
// without renewal, a condition, not a duration.
func TestLeaseRenewalKeepsARun(t *testing.T) {
	st := durableStore(t, "s1")
	lease, lag := 300*time.Millisecond, time.Second
	a := durable(t, st, "a", lease)
	b := NewManager(Options{Events: st, Runs: st, Instance: "b", Lease: lease, FlushEvery: time.Millisecond,
		Now: func() time.Time { return time.Now().Add(-lag) }})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	a.Start(nil)
	taken := make(chan string, 1)
	b.Start(func(_ *Run, rec parley.RunRecord) Func {
		taken <- rec.ID
		return nil
	})
	r, err := a.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.ActiveRun(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		// Without renewal b would take the run once the first lease is lag behind it.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			rec, err := st.ActiveRun(ctx, "s1")
			if err == nil && rec.LeaseUntil.After(first.LeaseUntil.Add(lag+lease)) {
				return parley.FinishStop, nil
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return parley.FinishError, nil
	})
	waitDone(t, r)
	if finish, _ := r.Result(); finish != parley.FinishStop {
		t.Fatalf("finish %q, want stop (renewed past where it would be taken)", finish)
	}
	select {
	case id := <-taken:
		t.Fatalf("run %s was taken over from a live instance", id)
	default:
	}
}

// A run whose lease another instance took (this process stalled past it) stops here.
func TestRunTakenOverElsewhereStopsHere(t *testing.T) {
	st := durableStore(t, "s1")
	a := durable(t, st, "a", 300*time.Millisecond)
	a.Start(nil)
	r, err := a.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	// Another instance claims a's runs, as it would after a's lease ran out.
	if recs, err := st.ClaimRuns(context.Background(), "b", "a", time.Now(), time.Now().Add(time.Hour), 10); err != nil || len(recs) != 1 {
		t.Fatalf("claim: %v %v", recs, err)
	}
	waitDone(t, r)
	if finish, _ := r.Result(); finish != parley.FinishAborted {
		t.Fatalf("finish %q, want aborted", finish)
	}
}

// crashableRuns is the run store of a process that can "crash": from then on its writes to run
// records are lost, as a killed process's would be, so Shutdown leaves its runs running.
type crashableRuns struct {
	*sqlite.Store
	crashed atomic.Bool
	claims  atomic.Int32
	// claimGate, when set, holds every ClaimRuns until it is closed.
	claimGate chan struct{}
}

func (c *crashableRuns) ClaimRuns(ctx context.Context, instance, orphanedBy string, now, until time.Time, limit int) ([]parley.RunRecord, error) {
	if c.claimGate != nil {
		select {
		case <-c.claimGate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.claims.Add(1)
	return c.Store.ClaimRuns(ctx, instance, orphanedBy, now, until, limit)
}

func (c *crashableRuns) EndRun(ctx context.Context, id, instance, finish string, at time.Time) error {
	if c.crashed.Load() {
		return nil
	}
	return c.Store.EndRun(ctx, id, instance, finish, at)
}

// Issue 18 point 2: an instance that restarts with many runs open takes each back once (one
// more attempt each, in a number of claims linear in the runs, no conflict logged), does so
// without holding up Start (so that the server listens at once), and a second crash during that
// recovery costs each run one attempt more, not the budget of MaxRecoveries.
func TestRestartTakesManyRunsBackOnce(t *testing.T) {
	const open = 3*claimBatch + 5
	ids := make([]string, open)
	sessions := make([]string, open)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("s%02d", i)
	}
	st := durableStore(t, sessions...)
	ctx := context.Background()
	for i, s := range sessions {
		rec := &parley.RunRecord{ID: parley.NewID(), SessionID: s, Owner: "alice", Instance: "a",
			LeaseUntil: time.Now().Add(time.Hour), CreatedAt: time.Now().Add(-time.Minute)}
		if err := st.CreateRun(ctx, rec); err != nil {
			t.Fatal(err)
		}
		ids[i] = rec.ID
	}
	var logs testlog.Buffer
	restart := func(runs *crashableRuns, body func(ctx context.Context) (string, error)) (*Manager, chan parley.RunRecord) {
		m := NewManager(Options{Events: st, Runs: runs, Instance: "a", Lease: time.Hour, FlushEvery: time.Millisecond,
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			m.Shutdown(ctx)
		})
		got := make(chan parley.RunRecord, 4*open)
		started := make(chan struct{})
		go func() {
			m.Start(func(_ *Run, rec parley.RunRecord) Func {
				got <- rec
				return func(ctx context.Context, emit func(parley.Event)) (string, error) { return body(ctx) }
			})
			close(started)
		}()
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("Start waited for the runs to be taken back")
		}
		return m, got
	}
	collect := func(got chan parley.RunRecord, attempts int) {
		t.Helper()
		seen := map[string]bool{}
		for range open {
			select {
			case rec := <-got:
				if seen[rec.ID] || rec.Attempts != attempts {
					t.Fatalf("run %s taken back again or with attempts %d, want once with %d", rec.ID, rec.Attempts, attempts)
				}
				seen[rec.ID] = true
			case <-time.After(30 * time.Second):
				t.Fatalf("%d of %d runs taken back", len(seen), open)
			}
		}
	}

	// The first restart: its claims wait until Start has returned; then it crashes while every run
	// it took back is still going on.
	first := &crashableRuns{Store: st, claimGate: make(chan struct{})}
	m1, got1 := restart(first, func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() })
	close(first.claimGate)
	collect(got1, 1)
	if n := first.claims.Load(); n > open/claimBatch+1 {
		t.Fatalf("%d claims for %d runs in batches of %d: not linear", n, open, claimBatch)
	}
	first.crashed.Store(true)
	now, cancel := context.WithCancel(ctx)
	cancel() // no grace: every run is cut at once
	m1.Shutdown(now)

	// The second restart takes each back once more, and the runs go on to their end.
	second := &crashableRuns{Store: st}
	m2, got2 := restart(second, func(context.Context) (string, error) { return parley.FinishStop, nil })
	collect(got2, 2)
	for _, id := range ids {
		r, ok := m2.Get(id)
		if !ok {
			t.Fatalf("run %s not held after the second restart", id)
		}
		waitDone(t, r)
	}
	for _, s := range sessions {
		if rec, err := st.ActiveRun(ctx, s); !errors.Is(err, parley.ErrNotFound) {
			t.Fatalf("session %s still has a running run: %+v %v", s, rec, err)
		}
	}
	if n := second.claims.Load(); n > open/claimBatch+1 {
		t.Fatalf("%d claims for %d runs in batches of %d: not linear", n, open, claimBatch)
	}
	select {
	case rec := <-got2:
		t.Fatalf("run %s taken back a second time by the same process", rec.ID)
	default:
	}
	if strings.Contains(logs.String(), "could not take over") {
		t.Fatalf("conflicts logged while taking runs back:\n%s", logs.String())
	}
}

// A run of this instance whose lease ran out before it was renewed (the process stalled) is
// claimed by this instance's own pass: it goes on here, without a conflict logged.
func TestOwnStalledRunIsKeptNotRetaken(t *testing.T) {
	st := durableStore(t, "s1")
	var logs testlog.Buffer
	a := NewManager(Options{Events: st, Runs: st, Instance: "a", Lease: time.Hour, FlushEvery: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Shutdown(ctx)
	})
	r, err := a.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-release
		return parley.FinishStop, nil
	})
	// The lease ran out: a's next pass claims its own run.
	if ids, err := st.RenewRuns(context.Background(), "a", []string{r.ID}, time.Now().Add(-time.Second)); err != nil || len(ids) != 1 {
		t.Fatalf("expiring the lease: %v %v", ids, err)
	}
	recovered := 0
	a.takeOver(func(*Run, parley.RunRecord) Func { recovered++; return nil }, "", time.Now)
	close(release)
	waitDone(t, r)
	if finish, _ := r.Result(); finish != parley.FinishStop || recovered != 0 {
		t.Fatalf("finish %q, recovered %d times: want the run kept, stop", finish, recovered)
	}
	if out := logs.String(); strings.Contains(out, "could not take over") || strings.Contains(out, "taking over a run") {
		t.Fatalf("a stalled run of this instance was taken over as another's:\n%s", out)
	}
}

// endGate holds a run's FinishRun after it committed, until the test lets it return.
type endGate struct {
	*sqlite.Store
	committed, proceed chan struct{}
}

func (g *endGate) FinishRun(ctx context.Context, f parley.RunFinish) error {
	err := g.Store.FinishRun(ctx, f)
	close(g.committed)
	<-g.proceed
	return err
}

// A lease renewal that finds a run's record ended while the run is ending (with group commit
// both may commit in one transaction) is no takeover: the run is not aborted, nothing is logged.
func TestRenewalDuringARunsEndIsNoTakeover(t *testing.T) {
	st := durableStore(t, "s1")
	g := &endGate{Store: st, committed: make(chan struct{}), proceed: make(chan struct{})}
	var logs testlog.Buffer
	m := NewManager(Options{Events: g, Runs: g, Instance: "a", Log: slog.New(slog.NewTextHandler(&logs, nil))})
	defer m.Shutdown(context.Background())
	r, err := m.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil })
	select {
	case <-g.committed:
	case <-time.After(time.Minute):
		t.Fatal("the run never ended its record")
	}
	m.renew() // the record is ended; the run has not finished here yet
	close(g.proceed)
	waitDone(t, r)
	if finish, _ := r.Result(); finish != parley.FinishStop {
		t.Errorf("finish %q, want stop", finish)
	}
	if l := logs.String(); strings.Contains(l, "taken over") {
		t.Errorf("a run ending here was taken for a takeover:\n%s", l)
	}
}
