package stream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// countingMetrics counts what a Hub reports.
type countingMetrics struct {
	mu                 sync.Mutex
	detached, caughtUp int
	appends, publishes int
}

func (c *countingMetrics) StoreAppend(time.Duration, bool) { c.mu.Lock(); c.appends++; c.mu.Unlock() }
func (c *countingMetrics) RelayPublish(time.Duration, bool) {
	c.mu.Lock()
	c.publishes++
	c.mu.Unlock()
}
func (c *countingMetrics) SubscriberDetached() { c.mu.Lock(); c.detached++; c.mu.Unlock() }
func (c *countingMetrics) SubscriberCaughtUp() { c.mu.Lock(); c.caughtUp++; c.mu.Unlock() }

// A reader that does not read while a run goes far past the ring is never waited on: the run and
// the other readers go on. It then catches up from the store, misses nothing, and reads the ring
// again.
func TestSlowReaderCatchesUp(t *testing.T) {
	ev := newMemEvents()
	counts := &countingMetrics{}
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingEvents: 64, Metrics: counts})
	ctx := timeout(t)
	slow := h.Subscribe(ctx, "s1", Join)
	fast := h.Subscribe(ctx, "s1", Join)
	defer slow.Close()
	defer fast.Close()
	// The slow one reads the ring once, then falls behind.
	w, _ := h.Open(ctx, "s1")
	w.Append(parley.Event{Type: parley.EventStart})
	checkSeqs(t, "slow reader's first", take(t, ctx, slow, 1), 1, 1)
	var fastGot []*Frame
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, f := range take(t, ctx, fast, 1002) {
			fastGot = append(fastGot, f)
		}
	}()
	for range 1000 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "x"})
	}
	w.GiveBack(w.Next())
	w.Append(parley.Event{Type: parley.EventDone})
	<-done
	checkSeqs(t, "fast reader", fastGot, 1, 1002)
	w.Close()
	w.Drop()
	checkSeqs(t, "slow reader", take(t, ctx, slow, 1002), 2, 1002)
	first, last := run(t, h, "s1", 0)
	checkSeqs(t, "slow reader, next run", take(t, ctx, slow, last), first, last)
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if counts.detached < 1 || counts.caughtUp < 1 || counts.caughtUp > counts.detached || counts.appends == 0 {
		t.Fatalf("metrics: %d detached, %d caught up, %d appends; want ≥1, ≥1 (no more than detached), >0", counts.detached, counts.caughtUp, counts.appends)
	}
}

// failingEvents fails ListEvents while fail is set.
type failingEvents struct {
	*memEvents
	mu    sync.Mutex
	fail  bool
	fails int
}

func (f *failingEvents) ListEvents(ctx context.Context, s string, after int64, limit int) ([]parley.Event, error) {
	f.mu.Lock()
	fail := f.fail
	if fail {
		f.fails++
	}
	f.mu.Unlock()
	if fail {
		return nil, errors.New("store down")
	}
	return f.memEvents.ListEvents(ctx, s, after, limit)
}

// A reader whose store read fails stays connected, reads again a moment later, and misses nothing.
func TestReaderReadsAgainAfterAFailedRead(t *testing.T) {
	ev := &failingEvents{memEvents: newMemEvents()}
	h := New(Options{Store: ev, FlushEvery: time.Millisecond})
	run(t, h, "s1", 1) // 1..3
	ev.mu.Lock()
	ev.fail = true
	ev.mu.Unlock()
	ctx := timeout(t)
	s := h.Subscribe(ctx, "s1", 0)
	defer s.Close()
	for {
		select {
		case <-s.Ready():
		case <-ctx.Done():
			t.Fatal("the reader did not read again")
		}
		fs, err := s.Next(ctx)
		if err != nil || len(fs) > 0 {
			t.Fatalf("while the store fails: %d frames, %v; want none and no error", len(fs), err)
		}
		ev.mu.Lock()
		fails := ev.fails
		ev.mu.Unlock()
		if fails >= 2 {
			break
		}
	}
	ev.mu.Lock()
	ev.fail = false
	ev.mu.Unlock()
	checkSeqs(t, "after the store came back", take(t, ctx, s, 3), 1, 3)
}

// heldEvents holds ListEvents, once armed, until released, and reports whether the read's context
// ended while it was held.
type heldEvents struct {
	*memEvents
	mu        sync.Mutex
	armed     bool
	entered   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
}

func (h *heldEvents) ListEvents(ctx context.Context, s string, after int64, limit int) ([]parley.Event, error) {
	h.mu.Lock()
	armed := h.armed
	h.armed = false
	h.mu.Unlock()
	if armed {
		close(h.entered)
		select {
		case <-h.release:
		case <-ctx.Done():
			close(h.cancelled)
			return nil, ctx.Err()
		}
	}
	return h.memEvents.ListEvents(ctx, s, after, limit)
}

// A reader whose client leaves while it reads the store does not cancel the read mid-flight (on
// PostgreSQL, pgx closes a connection whose query was cancelled): the read finishes, then Next
// returns the context's error.
func TestLeavingDoesNotCancelAStoreRead(t *testing.T) {
	ev := &heldEvents{memEvents: newMemEvents(), entered: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
	h := New(Options{Store: ev, FlushEvery: time.Millisecond})
	run(t, h, "s1", 1)
	ev.mu.Lock()
	ev.armed = true
	ev.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	s := h.Subscribe(ctx, "s1", 0)
	defer s.Close()
	type result struct {
		n   int
		err error
	}
	out := make(chan result, 1)
	go func() {
		fs, err := s.Next(ctx)
		out <- result{len(fs), err}
	}()
	select {
	case <-ev.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not read the store")
	}
	cancel()
	select {
	case <-ev.cancelled:
		t.Fatal("the store read was cancelled when the reader's client left")
	case r := <-out:
		t.Fatalf("Next returned (%d frames, %v) while its store read was held", r.n, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(ev.release)
	select {
	case r := <-out:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Next after the client left: %d frames, %v; want context.Canceled", r.n, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return after the read finished")
	}
}

// Numbers are reserved a block at a time; a run longer than a block reserves another, and the
// numbers a run did not use go back, so the session's next run goes on without a gap.
func TestNumbersAreReservedInBlocks(t *testing.T) {
	ev := newMemEvents()
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, Block: 16})
	_, last := run(t, h, "s1", 40) // 1..42: three blocks
	if last != 42 || ev.reserves != 3 {
		t.Fatalf("done is %d after %d reservations, want 42 after 3", last, ev.reserves)
	}
	w, _ := h.Open(context.Background(), "s1")
	if w.FirstSeq() != 43 {
		t.Fatalf("the next run starts at %d, want 43", w.FirstSeq())
	}
	w.Abandon()
	w.Drop()
	w, _ = h.Open(context.Background(), "s1")
	if w.FirstSeq() != 43 {
		t.Fatalf("after an abandoned run the next starts at %d, want 43", w.FirstSeq())
	}
	w.Abandon()
	w.Drop()
	// Without a store, numbers are kept in memory the same way.
	m := New(Options{Block: 16})
	_, last = run(t, m, "s1", 20)
	w, _ = m.Open(context.Background(), "s1")
	if w.FirstSeq() != last+1 {
		t.Fatalf("in memory: the next run starts at %d, want %d", w.FirstSeq(), last+1)
	}
	w.Abandon()
	w.Drop()
}

// memRelay is an in-memory Relay shared by hubs standing for instances.
type memRelay struct {
	mu       sync.Mutex
	events   map[string][]parley.Event
	watchers map[chan struct{}]string
}

func newMemRelay() *memRelay {
	return &memRelay{events: map[string][]parley.Event{}, watchers: map[chan struct{}]string{}}
}

func (r *memRelay) Publish(_ context.Context, s string, evs []parley.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[s] = append(r.events[s], evs...)
	for c, ws := range r.watchers {
		if ws == s {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

func (r *memRelay) Range(_ context.Context, s string, after int64, max int) ([]parley.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []parley.Event
	for _, ev := range r.events[s] {
		if ev.Seq > after && len(out) < max {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (r *memRelay) Watch(s string) (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	c <- struct{}{}
	r.mu.Lock()
	r.watchers[c] = s
	r.mu.Unlock()
	return c, func() { r.mu.Lock(); delete(r.watchers, c); r.mu.Unlock() }
}

// A reader on one instance follows a run on another live, through the relay: one feeder per
// session brings the events into its ring, and a reader joining finds the remote run's start.
func TestReadersFollowARunOnAnotherInstance(t *testing.T) {
	ev := newMemEvents()
	relay := newMemRelay()
	counts := &countingMetrics{}
	a := New(Options{Store: ev, Relay: relay, FlushEvery: time.Hour, Metrics: counts}) // runs the run; stores late
	var remoteFirst sync.Map
	b := New(Options{Store: ev, Relay: relay, FlushEvery: time.Hour, RemoteRun: func(_ context.Context, s string) int64 {
		v, ok := remoteFirst.Load(s)
		if !ok {
			return 0
		}
		return v.(int64)
	}})
	ctx := timeout(t)
	waiting := b.Subscribe(ctx, "s1", Join) // before the run: joins the next one
	defer waiting.Close()
	w, _ := a.Open(ctx, "s1")
	remoteFirst.Store("s1", w.FirstSeq())
	w.Append(parley.Event{Type: parley.EventStart})
	w.Append(parley.Event{Type: parley.EventChunk, Content: "a"})
	joined := b.Subscribe(ctx, "s1", Join)
	defer joined.Close()
	for range 10 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "b"})
	}
	w.Append(parley.Event{Type: parley.EventDone}) // 13
	checkSeqs(t, "reader waiting for the run", take(t, ctx, waiting, 13), 1, 13)
	checkSeqs(t, "reader joining the run", take(t, ctx, joined, 13), 1, 13)
	w.Close()
	w.Drop()
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if counts.publishes == 0 {
		t.Fatal("the relay publishes were not timed")
	}
}

// A consumer that parks with Notify holds no goroutine: it is called when the subscription has
// news (at once when it already has), once per Notify.
func TestNotifyWakesAParkedConsumer(t *testing.T) {
	h := New(Options{})
	ctx := timeout(t)
	sub := h.Subscribe(ctx, "s1", Join)
	defer sub.Close()
	calls := make(chan struct{}, 4)
	notify := func() { calls <- struct{}{} }
	sub.Notify(notify)
	select {
	case <-calls:
		t.Fatal("notified with nothing to read")
	default:
	}
	w, _ := h.Open(ctx, "s1")
	w.Append(parley.Event{Type: parley.EventStart})
	w.Append(parley.Event{Type: parley.EventChunk})
	select {
	case <-calls:
	case <-ctx.Done():
		t.Fatal("not notified of an append")
	}
	if len(calls) != 0 {
		t.Fatalf("notified %d more times for one Notify", len(calls))
	}
	// Something to read already: at once.
	sub.Notify(notify)
	if len(calls) != 1 {
		t.Fatal("Notify with frames waiting did not call at once")
	}
	<-calls
	checkSeqs(t, "after the notice", take(t, ctx, sub, 2), 1, 2)
	sub.Notify(notify)
	sub.Close()
	w.Append(parley.Event{Type: parley.EventDone})
	if len(calls) != 0 {
		t.Fatal("a closed subscription was notified")
	}
	w.Close()
	w.Drop()
}

// A run whose numbers its caller reserved (with its other writes) numbers its events from them,
// reserves the next block itself, and its caller may give back the rest itself too.
func TestOpenReserved(t *testing.T) {
	ev := newMemEvents()
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, Block: 4})
	first, _ := ev.ReserveEventSeqs(context.Background(), "s1", 4) // as the caller's transaction does
	w := h.OpenReserved("s1", first, 4)
	for range 6 {
		w.Append(parley.Event{Type: parley.EventChunk})
	}
	if w.Next() != 7 || w.Limit() != 8 || ev.reserves != 2 {
		t.Fatalf("next %d, limit %d after %d reservations; want 7, 8 after 2", w.Next(), w.Limit(), ev.reserves)
	}
	ev.ReleaseEventSeqs(context.Background(), "s1", w.Limit(), 6) // the caller's end of the run
	w.GaveBack(6)
	w.Close()
	w.Drop()
	if got := ev.stored("s1"); len(got) != 6 || w.Limit() != 6 {
		t.Fatalf("stored %d events, limit %d; want 6 and 6", len(got), w.Limit())
	}
	w2, _ := h.Open(context.Background(), "s1")
	if w2.FirstSeq() != 7 {
		t.Fatalf("the next run starts at %d, want 7", w2.FirstSeq())
	}
	w2.Abandon()
	w2.Drop()
}

// A reader's batch from the ring is one allocation however many frames it holds (append's
// doubling from one frame made five for a chat's twelve).
func TestReaderBatchGrowsOnce(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates too")
	}
	h := New(Options{Store: newMemEvents(), FlushEvery: time.Millisecond, RingEvents: 64})
	ctx := timeout(t)
	sub := h.Subscribe(ctx, "s1", Join)
	defer sub.Close()
	w, _ := h.Open(ctx, "s1")
	defer w.Close()
	w.Append(parley.Event{Type: parley.EventStart})
	for range 20 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "x"})
	}
	take(t, ctx, sub, 21) // placed, and the ring holds all 21
	allocs := testing.AllocsPerRun(20, func() {
		sub.buf, sub.after = nil, 0
		fs, err := sub.Next(ctx)
		if err != nil || len(fs) != 21 {
			t.Fatalf("Next: %d frames, %v; want 21", len(fs), err)
		}
	})
	if allocs > 1 {
		t.Fatalf("a batch of 21 frames allocated %.0f times, want 1", allocs)
	}
}
