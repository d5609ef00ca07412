package runs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func events(t *testing.T, r *Run) []parley.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []parley.Event
	for f, err := range r.m.After(ctx, r.SessionID, r.FirstSeq()-1) {
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		out = append(out, f.Event())
		if f.Type == parley.EventDone {
			return out
		}
	}
	return out
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
	r, err := m.Begin(context.Background(), Spec{Session: "s1", Model: "mock"})
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
	r, err := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Begin(context.Background(), Spec{Session: "s1", Model: ""}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Begin: %v, want ErrBusy", err)
	}
	if _, err := m.Begin(context.Background(), Spec{Session: "s2", Model: ""}); err != nil {
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
	if _, err := m.Begin(context.Background(), Spec{Session: "s1", Model: ""}); err != nil {
		t.Fatalf("Begin after the run ended: %v", err)
	}
	if got, ok := m.Get(r.ID); !ok || got != r {
		t.Fatal("finished run not retained for resume")
	}
}

func TestReleaseFreesSession(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r.Release()
	if _, err := m.Begin(context.Background(), Spec{Session: "s1", Model: ""}); err != nil {
		t.Fatalf("Begin after Release: %v", err)
	}
	if _, ok := m.Get(r.ID); ok {
		t.Fatal("released run still listed")
	}
}

func TestErrorAndPanicBecomeEvents(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
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
	r3, _ := m.Begin(context.Background(), Spec{Session: "s3", Model: ""})
	r3.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		return "", parley.Errorf(parley.ECUpstream, "the provider refused the key sk-proj-abcdefghijklmnop of ops@example.com")
	})
	if evs := events(t, r3); evs[1].Error.Message != "the provider refused the key sk-[redacted] of [email]" {
		t.Fatalf("error event %+v", evs[1].Error)
	}

	r2, _ := m.Begin(context.Background(), Spec{Session: "s2", Model: ""})
	r2.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { panic("boom") })
	evs = events(t, r2)
	if evs[1].Type != parley.EventError || evs[1].Error.Code != parley.ECInternal || evs[1].Error.Message != "internal error" {
		t.Fatalf("panic events %+v", evs)
	}
}

func TestAbortEndsRunAsAborted(t *testing.T) {
	m := NewManager(Options{})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
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
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
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
	if _, err := m.Begin(context.Background(), Spec{Session: "s2", Model: ""}); !errors.Is(err, ErrClosing) {
		t.Fatalf("Begin after shutdown: %v", err)
	}
}

func TestFinishedRunsArePruned(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewManager(Options{Retain: time.Minute, Now: func() time.Time { return now }})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil })
	<-r.Done()
	now = now.Add(2 * time.Minute)
	m.Begin(context.Background(), Spec{Session: "s2", Model: ""})
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
	r, err := m.Begin(context.Background(), Spec{Session: "s1", Model: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for f, err := range m.After(ctx, "s1", r.FirstSeq()-1) {
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == parley.EventDone {
			break
		}
	}
	next, err := m.Begin(context.Background(), Spec{Session: "s1", Model: "mock"})
	if err != nil {
		t.Fatalf("the next run after done: %v", err)
	}
	next.Release()
}

func TestBudgetOfConcurrentRuns(t *testing.T) {
	m := NewManager(Options{MaxActive: 2})
	a, err := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	if err != nil {
		t.Fatal(err)
	}
	if m.Full() {
		t.Fatal("Full with 1 of 2 runs")
	}
	b, err := m.Begin(context.Background(), Spec{Session: "s2", Model: ""})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Full() {
		t.Fatal("not Full with 2 of 2 runs")
	}
	_, err = m.Begin(context.Background(), Spec{Session: "s3", Model: ""})
	if !errors.Is(err, ErrOverloaded) || parley.CodeOf(err) != parley.ECUnavailable || parley.RetryAfterOf(err) <= 0 {
		t.Fatalf("third Begin: %v, want ErrOverloaded with a Retry-After", err)
	}
	// A busy session is still a conflict, not an overload.
	if _, err := m.Begin(context.Background(), Spec{Session: "s1", Model: ""}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Begin on a busy session: %v, want ErrBusy", err)
	}
	a.Release()
	if m.Full() {
		t.Fatal("Full after a release")
	}
	if _, err := m.Begin(context.Background(), Spec{Session: "s3", Model: ""}); err != nil {
		t.Fatalf("Begin after a release: %v", err)
	}
	b.Release()
}

// memEvents is an in-memory parley.EventStore for the manager's tests.
type memEvents struct {
	mu       sync.Mutex
	reserved map[string]int64
	events   map[string][]parley.Event
	reserves int
}

func newMemEvents() *memEvents {
	return &memEvents{reserved: map[string]int64{}, events: map[string][]parley.Event{}}
}

func (m *memEvents) ReserveEventSeqs(_ context.Context, s string, n int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reserves++
	m.reserved[s] += n
	return m.reserved[s] - n + 1, nil
}

func (m *memEvents) ReleaseEventSeqs(_ context.Context, s string, limit, last int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved[s] == limit {
		m.reserved[s] = last
	}
	return nil
}

func (m *memEvents) AppendEvents(_ context.Context, s string, _ time.Time, evs []parley.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range evs {
		if l := m.events[s]; len(l) == 0 || l[len(l)-1].Seq < ev.Seq {
			m.events[s] = append(m.events[s], ev)
		}
	}
	return nil
}

func (m *memEvents) ListEvents(_ context.Context, s string, after int64, limit int) ([]parley.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []parley.Event
	for _, ev := range m.events[s] {
		if ev.Seq > after && len(out) < limit {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (m *memEvents) DeleteEventsBefore(context.Context, time.Time) (int64, error) { return 0, nil }

func (m *memEvents) stored(s string) []parley.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]parley.Event(nil), m.events[s]...)
}

// chunks is a run body that emits n chunks.
func chunks(n int) Func {
	return func(ctx context.Context, emit func(parley.Event)) (string, error) {
		for range n {
			emit(parley.Event{Type: parley.EventChunk, Content: "x"})
		}
		return parley.FinishStop, nil
	}
}

// The session's runs number their events as one stream: the second run goes on where the first
// stopped, a run longer than one reservation reserves more, and every event reaches the store.
func TestSessionEventNumbersAcrossRuns(t *testing.T) {
	ev := newMemEvents()
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond})
	var all []parley.Event
	for _, n := range []int{3, seqBlock + 500, 0} {
		r, err := m.Begin(context.Background(), Spec{Session: "s1", Model: "mock"})
		if err != nil {
			t.Fatal(err)
		}
		r.Go(chunks(n))
		all = append(all, events(t, r)...)
		<-r.Done()
	}
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d of the session has seq %d", i, e.Seq)
		}
	}
	if ev.reserves != 4 { // one per run, one more for the long run
		t.Fatalf("%d reservations, want 4", ev.reserves)
	}
	if got := ev.stored("s1"); len(got) != len(all) || got[len(got)-1].Seq != all[len(all)-1].Seq {
		t.Fatalf("stored %d events, want %d", len(got), len(all))
	}
	// A run begun and released uses no numbers.
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r.Release()
	r, _ = m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	if r.FirstSeq() != int64(len(all)+1) {
		t.Fatalf("after a released run the next starts at %d, want %d", r.FirstSeq(), len(all)+1)
	}
	r.Release()
}

// After gives each event once, in order: from the store for runs no longer in memory, then the
// live run, then the runs begun later; Join starts at the active run's first event.
func TestAfter(t *testing.T) {
	ev := newMemEvents()
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond})
	r1, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r1.Go(chunks(5)) // seqs 1..7
	<-r1.Done()

	// A second manager on the same store holds nothing in memory (a restart).
	m2 := NewManager(Options{Events: ev, FlushEvery: time.Millisecond})
	release := make(chan struct{})
	r2, _ := m2.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r2.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		emit(parley.Event{Type: parley.EventChunk, Content: "live"})
		<-release
		return parley.FinishStop, nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	follow := func(after int64, until int64) []parley.Event {
		var got []parley.Event
		for f, err := range m2.After(ctx, "s1", after) {
			if err != nil {
				t.Errorf("After %d: %v (got %d events)", after, err, len(got))
				return got
			}
			got = append(got, f.Event())
			if f.Seq >= until {
				break
			}
		}
		return got
	}
	check := func(name string, got []parley.Event, first, last int64) {
		t.Helper()
		if len(got) != int(last-first+1) {
			t.Fatalf("%s: %d events, want %d..%d", name, len(got), first, last)
		}
		for i, e := range got {
			if e.Seq != first+int64(i) {
				t.Fatalf("%s: event %d has seq %d", name, i, e.Seq)
			}
		}
	}
	// Stored run 1, then live run 2 (start 8, chunk 9).
	check("from the store into the live run", follow(3, 9), 4, 9)
	check("join the active run", follow(Join, 9), 8, 9)

	// A follower waiting at the end gets the rest of run 2 and the whole of run 3.
	done := make(chan []parley.Event, 1)
	go func() { done <- follow(9, 12) }()
	close(release)
	<-r2.Done()
	r3, _ := m2.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r3.Go(chunks(0)) // 11 start, 12 done
	check("on into the next run", <-done, 10, 12)
	<-r3.Done()
}

// Pause holds the run at its next gate until Resume; both are announced as status events.
func TestPauseHoldsTheRunAtItsGate(t *testing.T) {
	m := NewManager(Options{PauseTimeout: time.Minute})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	atGate := make(chan struct{})
	passed := make(chan struct{})
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-atGate
		if err := r.Gate(ctx); err != nil {
			return "", err
		}
		close(passed)
		return parley.FinishStop, nil
	})
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil || !r.Paused() {
		t.Fatalf("pausing twice: %v", err)
	}
	close(atGate)
	select {
	case <-passed:
		t.Fatal("a paused run passed its gate")
	case <-time.After(50 * time.Millisecond):
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	<-passed
	evs := events(t, r)
	if got := fmt.Sprint(types(evs)); got != "[start status status done]" || evs[1].State != parley.RunPaused || evs[2].State != parley.RunResumed {
		t.Fatalf("events %s %+v", got, evs)
	}
	if err := r.Pause(); !errors.Is(err, ErrEnded) {
		t.Fatalf("pausing an ended run: %v", err)
	}
}

// A pause longer than PauseTimeout aborts the run; an abort during a pause ends it at once.
func TestPauseTimeoutAndAbortWhilePaused(t *testing.T) {
	m := NewManager(Options{PauseTimeout: 30 * time.Millisecond})
	gated := func(r **Run) Func {
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			if err := (*r).Gate(ctx); err != nil {
				return "", err
			}
			return parley.FinishStop, nil
		}
	}
	var r *Run
	r, _ = m.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r.Pause()
	r.Go(gated(&r))
	evs := events(t, r)
	if last := evs[len(evs)-1]; last.FinishReason != parley.FinishAborted || evs[len(evs)-2].Error == nil || evs[len(evs)-2].Error.Code != parley.ECTimeout {
		t.Fatalf("a long pause: %+v", evs)
	}

	m2 := NewManager(Options{PauseTimeout: time.Hour})
	var r2 *Run
	r2, _ = m2.Begin(context.Background(), Spec{Session: "s1", Model: ""})
	r2.Pause()
	r2.Go(gated(&r2))
	r2.Abort()
	evs = events(t, r2)
	if last := evs[len(evs)-1]; last.FinishReason != parley.FinishAborted {
		t.Fatalf("abort while paused: %+v", last)
	}
}

// Pruning forgets the runs that ended before Retain, oldest first, and keeps the rest; what it
// keeps to find them does not grow with the runs forgotten.
func TestPruningForgetsOnlyTheOldest(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m := NewManager(Options{Retain: time.Minute, Now: clock})
	var ended []*Run
	for i, gap := range []time.Duration{0, 30 * time.Second, 60 * time.Second} {
		advance(gap)
		r, err := m.Begin(context.Background(), Spec{Session: fmt.Sprintf("s%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil })
		<-r.Done()
		ended = append(ended, r)
	}
	advance(20 * time.Second) // ended at 0 s, 30 s and 90 s; now 110 s: the first two are older than 1 min
	if _, err := m.Begin(context.Background(), Spec{Session: "s9"}); err != nil {
		t.Fatal(err)
	}
	for i, r := range ended {
		_, kept := m.Get(r.ID)
		if want := i == 2; kept != want {
			t.Fatalf("run %d: kept %v, want %v", i, kept, want)
		}
	}
	m.mu.Lock()
	n := len(m.finished)
	m.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d finished runs queued for pruning, want 1", n)
	}
}

// BenchmarkBeginWithRunsRetained: a run begun and ended while many finished runs are retained
// (Retain is 5 minutes by default: at 1,000 chats/s, 300,000 runs). Before pruning kept its runs
// in the order they ended, every Begin scanned them all.
func BenchmarkBeginWithRunsRetained(b *testing.B) {
	for _, retained := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("retained=%d", retained), func(b *testing.B) {
			m := NewManager(Options{})
			defer m.Shutdown(context.Background())
			body := func(ctx context.Context, emit func(parley.Event)) (string, error) { return parley.FinishStop, nil }
			for i := range retained {
				r, err := m.Begin(context.Background(), Spec{Session: fmt.Sprintf("old%d", i)})
				if err != nil {
					b.Fatal(err)
				}
				r.Go(body)
				<-r.Done()
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r, err := m.Begin(context.Background(), Spec{Session: fmt.Sprintf("s%d", i)})
				if err != nil {
					b.Fatal(err)
				}
				r.Go(body)
				<-r.Done()
			}
		})
	}
}
