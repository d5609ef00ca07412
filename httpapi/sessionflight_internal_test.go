package httpapi

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// leaderStore holds its first read until that read's context ends; later reads answer at once.
type leaderStore struct {
	parley.Store
	reads   atomic.Int32
	entered chan struct{}
}

func (l *leaderStore) GetSession(ctx context.Context, id string) (*parley.Session, error) {
	if l.reads.Add(1) == 1 {
		close(l.entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &parley.Session{ID: id, Owner: "u"}, nil
}

// A request waiting for another's read of the session reads for itself when that read ends with
// its own request (the client left): it does not answer with the other request's cancellation.
func TestSessionFlightOutlivesItsLeader(t *testing.T) {
	st := &leaderStore{entered: make(chan struct{})}
	var f sessionFlights
	joined := make(chan struct{}, 1)
	defer func() { onSessionJoin.Store(nil) }()
	hook := func() { joined <- struct{}{} }
	onSessionJoin.Store(&hook)

	leaderCtx, leave := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := f.get(leaderCtx, st, "s")
		leaderErr <- err
	}()
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	wait(st.entered, "the first read did not start")
	type result struct {
		sess *parley.Session
		err  error
	}
	follower := make(chan result, 1)
	go func() {
		sess, err := f.get(context.Background(), st, "s")
		follower <- result{sess, err}
	}()
	wait(joined, "the second request did not wait for the first read")
	leave()
	if err := <-leaderErr; err != context.Canceled {
		t.Errorf("the leaving request's read: %v, want context.Canceled", err)
	}
	r := <-follower
	if r.err != nil || r.sess == nil || r.sess.ID != "s" {
		t.Errorf("the waiting request: %+v, %v; want session s", r.sess, r.err)
	}
	if n := st.reads.Load(); n != 2 {
		t.Errorf("reads: %d, want 2 (the leaver's, then the waiter's own)", n)
	}
	f.mu.Lock()
	left := len(f.m)
	f.mu.Unlock()
	if left != 0 {
		t.Errorf("%d reads still registered after both ended", left)
	}
}
