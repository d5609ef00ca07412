package runs

import (
	"context"
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
