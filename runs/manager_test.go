package runs

import (
	"context"
	"errors"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func events(t *testing.T, r *Run) []parley.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []parley.Event
	var after int64
	for {
		evs, done, err := r.Log.Read(ctx, after, 100)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		out = append(out, evs...)
		if len(evs) > 0 {
			after = evs[len(evs)-1].Seq
		}
		if done {
			return out
		}
	}
}

func types(evs []parley.Event) []parley.EventType {
	var ts []parley.EventType
	for _, e := range evs {
		ts = append(ts, e.Type)
	}
	return ts
}

func TestRunEventsAreStampedAndFramed(t *testing.T) {
	m := NewManager(Options{})
	r, err := m.Begin(context.Background(), "s1", "mock")
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		emit(parley.Event{Type: parley.EventChunk, Content: "hi"})
		return parley.FinishStop, nil
	})
	evs := events(t, r)
	want := []parley.EventType{parley.EventStart, parley.EventChunk, parley.EventDone}
	if got := types(evs); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || e.RunID != r.ID || e.SessionID != "s1" {
			t.Fatalf("event %d not stamped: %+v", i, e)
		}
	}
	if evs[0].Model != "mock" || evs[2].FinishReason != parley.FinishStop {
		t.Fatalf("start/done payload: %+v / %+v", evs[0], evs[2])
	}
}

func TestOneActiveRunPerSession(t *testing.T) {
	m := NewManager(Options{})
	r, err := m.Begin(context.Background(), "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Begin(context.Background(), "s1", ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Begin: %v, want ErrBusy", err)
	}
	if _, err := m.Begin(context.Background(), "s2", ""); err != nil {
		t.Fatalf("other session: %v", err)
	}
	release := make(chan struct{})
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-release
		return parley.FinishStop, nil
	})
	if got, ok := m.Active("s1"); !ok || got != r {
		t.Fatal("Active does not return the running run")
	}
	close(release)
	<-r.Done()
	if _, ok := m.Active("s1"); ok {
		t.Fatal("finished run still active")
	}
	if _, err := m.Begin(context.Background(), "s1", ""); err != nil {
		t.Fatalf("Begin after the run ended: %v", err)
	}
	if got, ok := m.Get(r.ID); !ok || got != r {
		t.Fatal("finished run not retained for resume")
	}
}

func TestReleaseFreesSession(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), "s1", "")
	r.Release()
	if _, err := m.Begin(context.Background(), "s1", ""); err != nil {
		t.Fatalf("Begin after Release: %v", err)
	}
	if _, ok := m.Get(r.ID); ok {
		t.Fatal("released run still listed")
	}
}

func TestErrorAndPanicBecomeEvents(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), "s1", "")
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		return "", parley.WrapError(parley.ECUpstream, errors.New("secret sk-123 body"), "provider returned HTTP 500")
	})
	evs := events(t, r)
	if len(evs) != 3 || evs[1].Type != parley.EventError || evs[2].FinishReason != parley.FinishError {
		t.Fatalf("events %v", types(evs))
	}
	if evs[1].Error.Code != parley.ECUpstream || evs[1].Error.Message != "provider returned HTTP 500" {
		t.Fatalf("error event %+v", evs[1].Error)
	}

	// A client-visible message that carries a secret (here one a provider echoed) is redacted.
	r3, _ := m.Begin(context.Background(), "s3", "")
	r3.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		return "", parley.Errorf(parley.ECUpstream, "the provider refused the key sk-proj-abcdefghijklmnop of ops@example.com")
	})
	if evs := events(t, r3); evs[1].Error.Message != "the provider refused the key sk-[redacted] of [email]" {
		t.Fatalf("error event %+v", evs[1].Error)
	}

	r2, _ := m.Begin(context.Background(), "s2", "")
	r2.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { panic("boom") })
	evs = events(t, r2)
	if evs[1].Type != parley.EventError || evs[1].Error.Code != parley.ECInternal || evs[1].Error.Message != "internal error" {
		t.Fatalf("panic events %+v", evs)
	}
}

func TestAbortEndsRunAsAborted(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), "s1", "")
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-ctx.Done()
		return "", parley.WrapError(parley.ECCanceled, ctx.Err(), "aborted")
	})
	r.Abort()
	evs := events(t, r)
	if last := evs[len(evs)-1]; last.Type != parley.EventDone || last.FinishReason != parley.FinishAborted {
		t.Fatalf("last event %+v", last)
	}
	for _, e := range evs {
		if e.Type == parley.EventError {
			t.Fatal("abort must not produce an error event")
		}
	}
}

func TestShutdownWaitsThenAborts(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), "s1", "")
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-ctx.Done()
		return "", parley.WrapError(parley.ECCanceled, ctx.Err(), "aborted")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := m.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("run still going after Shutdown returned")
	}
	if _, err := m.Begin(context.Background(), "s2", ""); !errors.Is(err, ErrClosing) {
		t.Fatalf("Begin after shutdown: %v", err)
	}
}

func TestFinishedRunsArePruned(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewManager(Options{Retain: time.Minute, Now: func() time.Time { return now }})
	r, _ := m.Begin(context.Background(), "s1", "")
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil })
	<-r.Done()
	now = now.Add(2 * time.Minute)
	m.Begin(context.Background(), "s2", "")
	if _, ok := m.Get(r.ID); ok {
		t.Fatal("old finished run not pruned")
	}
	if _, ok := m.Latest("s1"); ok {
		t.Fatal("old finished run still latest of its session")
	}
}

// TestSessionIsFreeOnceDoneIsSeen: a subscriber that reads the done event can begin the session's
// next run at once, even while the finished run is still winding down.
func TestSessionIsFreeOnceDoneIsSeen(t *testing.T) {
	m := NewManager(Options{})
	release := make(chan struct{})
	m.afterDone = func() { <-release } // hold the finished run between its done event and its end
	defer close(release)
	r, err := m.Begin(context.Background(), "s1", "mock")
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var after int64
	for seen := false; !seen; {
		evs, _, err := r.Log.Read(ctx, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			after = e.Seq
			seen = seen || e.Type == parley.EventDone
		}
	}
	next, err := m.Begin(context.Background(), "s1", "mock")
	if err != nil {
		t.Fatalf("the next run after done: %v", err)
	}
	next.Release()
}

func TestBudgetOfConcurrentRuns(t *testing.T) {
	m := NewManager(Options{MaxActive: 2})
	a, err := m.Begin(context.Background(), "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Full() {
		t.Fatal("Full with 1 of 2 runs")
	}
	b, err := m.Begin(context.Background(), "s2", "")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Full() {
		t.Fatal("not Full with 2 of 2 runs")
	}
	_, err = m.Begin(context.Background(), "s3", "")
	if !errors.Is(err, ErrOverloaded) || parley.CodeOf(err) != parley.ECUnavailable || parley.RetryAfterOf(err) <= 0 {
		t.Fatalf("third Begin: %v, want ErrOverloaded with a Retry-After", err)
	}
	// A busy session is still a conflict, not an overload.
	if _, err := m.Begin(context.Background(), "s1", ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("Begin on a busy session: %v, want ErrBusy", err)
	}
	a.Release()
	if m.Full() {
		t.Fatal("Full after a release")
	}
	if _, err := m.Begin(context.Background(), "s3", ""); err != nil {
		t.Fatalf("Begin after a release: %v", err)
	}
	b.Release()
}
