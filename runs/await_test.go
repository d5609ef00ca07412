package runs

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// A run waiting for approval says so, is woken by the approval control action (not only by its
// poll: the poll here is an hour), outlasts the pause timeout, and says when it goes on.
func TestAwaitApprovalWakesOnControl(t *testing.T) {
	m := NewManager(Options{ApprovalPoll: time.Hour, PauseTimeout: time.Millisecond})
	r, err := m.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var decided atomic.Bool
	checks := make(chan struct{}, 10)
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		err := r.AwaitApproval(ctx, time.Now().Add(time.Hour), func(context.Context) (bool, error) {
			checks <- struct{}{}
			return decided.Load(), nil
		})
		return parley.FinishStop, err
	})
	<-checks // the first look, at once
	waitUntil(t, r.Awaiting)
	if _, state, err := m.Control(context.Background(), "s1", ActionApproval); err != nil || state != parley.RunAwaitingApproval {
		t.Fatalf("control while nothing was decided: %q %v", state, err)
	}
	<-checks
	decided.Store(true)
	if _, _, err := m.Control(context.Background(), "s1", ActionApproval); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if finish, err := r.Result(); finish != parley.FinishStop || err != nil {
		t.Fatalf("result %q %v", finish, err)
	}
	var states []string
	for _, ev := range events(t, r) {
		if ev.Type == parley.EventStatus {
			states = append(states, ev.State)
		}
	}
	if len(states) != 2 || states[0] != parley.RunAwaitingApproval || states[1] != parley.RunResumed {
		t.Fatalf("status events %v", states)
	}
}

// An aborted run stops waiting with the context's error.
func TestAwaitApprovalEndsOnAbort(t *testing.T) {
	m := NewManager(Options{ApprovalPoll: time.Hour})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		return "", r.AwaitApproval(ctx, time.Now().Add(time.Hour), func(context.Context) (bool, error) { return false, nil })
	})
	waitUntil(t, r.Awaiting)
	r.Abort()
	<-r.Done()
	if finish, _ := r.Result(); finish != parley.FinishAborted {
		t.Fatalf("finish %q", finish)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// A run waiting for approval holds what a paused run holds: its own goroutine, blocked. Many
// waiting runs cost as many goroutines as as many paused ones.
func TestAwaitingCostsWhatPausingCosts(t *testing.T) {
	const n = 40
	count := func(wait func(r *Run, ctx context.Context) error, waiting func(r *Run) bool) int {
		m := NewManager(Options{ApprovalPoll: time.Hour, PauseTimeout: time.Hour})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m.Shutdown(ctx)
		}()
		before := runtime.NumGoroutine()
		var rs []*Run
		for i := range n {
			r, err := m.Begin(context.Background(), Spec{Session: "s" + strconv.Itoa(i)})
			if err != nil {
				t.Fatal(err)
			}
			r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return "", wait(r, ctx) })
			rs = append(rs, r)
		}
		for _, r := range rs {
			waitUntil(t, func() bool { return waiting(r) })
		}
		got := runtime.NumGoroutine() - before
		for _, r := range rs {
			r.Abort()
			<-r.Done()
		}
		return got
	}
	awaiting := count(func(r *Run, ctx context.Context) error {
		return r.AwaitApproval(ctx, time.Now().Add(time.Hour), func(context.Context) (bool, error) { return false, nil })
	}, (*Run).Awaiting)
	var gated sync.Map
	paused := count(func(r *Run, ctx context.Context) error {
		if err := r.Pause(); err != nil {
			return err
		}
		gated.Store(r, true)
		return r.Gate(ctx)
	}, func(r *Run) bool { _, ok := gated.Load(r); return ok && r.Paused() })
	t.Logf("goroutines held by %d runs: waiting for approval %d, paused %d", n, awaiting, paused)
	// A little slack for goroutines of earlier tests that end while one side is counted: a
	// goroutine per waiting run beyond what a paused one holds would be n more.
	const slack = n / 4
	if awaiting > paused+slack || awaiting > n+slack {
		t.Fatalf("%d runs waiting for approval hold %d goroutines; %d paused runs hold %d", n, awaiting, n, paused)
	}
}

// At shutdown a run waiting for approval is not waited for, nor ended: it is handed over (its
// body sees parley.ErrHandedOver), its record stays running, and no done event is stored. The
// same instance, started again, takes it back at once. A run not waiting is left its grace.
func TestShutdownHandsOverAWaitingRun(t *testing.T) {
	st := durableStore(t, "s1")
	m := NewManager(Options{Events: st, Runs: st, Instance: "a", Lease: time.Minute, FlushEvery: time.Millisecond, ApprovalPoll: time.Hour})
	r, err := m.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	cause := make(chan error, 1)
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		err := r.AwaitApproval(ctx, time.Now().Add(time.Hour), func(context.Context) (bool, error) { return false, nil })
		cause <- context.Cause(ctx)
		return "", err
	})
	waitUntil(t, r.Awaiting)
	// A grace far longer than the test's deadline: only the handover lets Shutdown return.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if c := <-cause; !errors.Is(c, parley.ErrHandedOver) {
		t.Fatalf("the body's cause: %v", c)
	}
	rec, err := st.ActiveRun(context.Background(), "s1")
	if err != nil || rec.ID != r.ID || rec.State != parley.RunStateRunning {
		t.Fatalf("record after the shutdown: %+v %v", rec, err)
	}
	evs, _ := st.ListEvents(context.Background(), "s1", 0, 100)
	for _, ev := range evs {
		if ev.Type == parley.EventDone {
			t.Fatalf("a done event was stored: %+v", evs)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].State != parley.RunAwaitingApproval {
		t.Fatalf("stored events: %+v", evs)
	}
	// Restarted under its name, the instance takes the run back.
	m2 := durable(t, st, "a", time.Minute)
	taken := make(chan parley.RunRecord, 1)
	m2.Start(func(run *Run, rec parley.RunRecord) Func {
		taken <- rec
		return func(context.Context, func(parley.Event)) (string, error) { return parley.FinishStop, nil }
	})
	select {
	case rec := <-taken:
		if rec.ID != r.ID {
			t.Fatalf("took over %s, want %s", rec.ID, r.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run was not taken back")
	}
}

// A run waiting for approval whose lease another instance took (this one stalled) is handed over
// here, not aborted: its approvals stay pending for the new owner.
func TestTakenOverWhileWaitingIsHandedOver(t *testing.T) {
	st := durableStore(t, "s1")
	a := durable(t, st, "a", 300*time.Millisecond)
	a.Start(nil)
	r, err := a.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	cause := make(chan error, 1)
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		err := r.AwaitApproval(ctx, time.Now().Add(time.Hour), func(context.Context) (bool, error) { return false, nil })
		cause <- context.Cause(ctx)
		return "", err
	})
	waitUntil(t, r.Awaiting)
	if recs, err := st.ClaimRuns(context.Background(), "b", "a", time.Now(), time.Now().Add(time.Hour), 10); err != nil || len(recs) != 1 {
		t.Fatalf("claim: %v %v", recs, err)
	}
	waitDone(t, r)
	if c := <-cause; !errors.Is(c, parley.ErrHandedOver) {
		t.Fatalf("cause %v, want handed over", c)
	}
	if rec, err := st.ActiveRun(context.Background(), "s1"); err != nil || rec.Instance != "b" {
		t.Fatalf("record %+v %v: b's, running", rec, err)
	}
}
