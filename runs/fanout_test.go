package runs

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// take reads s until it has handed out the event numbered until, and checks that every frame's
// JSON is its event's.
func take(t *testing.T, ctx context.Context, s *Subscription, until int64) []*Frame {
	t.Helper()
	var got []*Frame
	for {
		select {
		case <-s.Ready():
			fs, err := s.Next(ctx)
			if err != nil {
				t.Errorf("Next: %v", err)
				return got
			}
			got = append(got, fs...)
			if len(got) > 0 && got[len(got)-1].Seq >= until {
				return got
			}
		case <-ctx.Done():
			last := int64(-1)
			if len(got) > 0 {
				last = got[len(got)-1].Seq
			}
			t.Errorf("subscription stalled at seq %d, want %d", last, until)
			return got
		}
	}
}

// checkSeqs fails unless frames are numbered first..last with no gap and no repeat, each with the
// JSON of its own event.
func checkSeqs(t *testing.T, name string, frames []*Frame, first, last int64) {
	t.Helper()
	if len(frames) != int(last-first+1) {
		t.Errorf("%s: %d frames, want %d..%d", name, len(frames), first, last)
		return
	}
	for i, f := range frames {
		if f.Seq != first+int64(i) {
			t.Errorf("%s: frame %d has seq %d, want %d", name, i, f.Seq, first+int64(i))
			return
		}
		var ev parley.Event
		if err := json.Unmarshal(f.JSON, &ev); err != nil || ev.Seq != f.Seq || ev.Type != f.Type {
			t.Errorf("%s: frame %d's JSON %s is not its event (%v)", name, f.Seq, f.JSON, err)
			return
		}
	}
}

func hubsOf(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.hubs)
}

// Subscribers joining a session at every kind of point (the stored history, the live run, the
// next run) each get every event once, in order; the live events reach all of them from one
// hub, encoded once; the hub stops with its last subscriber.
func TestSubscribersShareOneHub(t *testing.T) {
	ev := newMemEvents()
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond})
	r1, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r1.Go(chunks(5)) // seqs 1..7
	<-r1.Done()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release := make(chan struct{})
	step := make(chan struct{})
	r2, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r2.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		emit(parley.Event{Type: parley.EventChunk, Content: "first"}) // 9
		close(step)
		<-release
		for range 2000 { // 10..2009: more than a hub's ring and a subscriber's queue
			emit(parley.Event{Type: parley.EventChunk, Content: "x"})
		}
		return parley.FinishStop, nil // done: 2010
	})
	<-step

	starts := []int64{0, 3, 7, 8, 9, Join, Join, 0}
	subs := make([]*Subscription, len(starts))
	for i, a := range starts {
		subs[i] = m.Subscribe(ctx, "s1", a)
	}
	if n := hubsOf(m); n != 1 {
		t.Fatalf("%d hubs for one session, want 1", n)
	}
	results := make([][]*Frame, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() { results[i] = take(t, ctx, s, 2010) })
	}
	close(release)
	wg.Wait()
	for i, a := range starts {
		first := a + 1
		if a == Join {
			first = 8 // the active run's start
		}
		checkSeqs(t, "subscriber after "+itoa(a), results[i], first, 2010)
	}
	if t.Failed() {
		return
	}
	// The last events came from the hub: every subscriber holds the same frame, not a copy.
	for i := range results {
		if a, b := results[0][len(results[0])-1], results[i][len(results[i])-1]; a != b {
			t.Errorf("subscriber %d got its own copy of the last frame: not shared", i)
		}
	}

	// A run begun later reaches them too.
	r3, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r3.Go(chunks(1)) // 2011..2013
	for i, s := range subs {
		checkSeqs(t, "next run, subscriber "+itoa(int64(i)), take(t, ctx, s, 2013), 2011, 2013)
	}
	for _, s := range subs {
		s.Close()
		s.Close() // twice is harmless
	}
	if n := hubsOf(m); n != 0 {
		t.Fatalf("%d hubs left after every subscription closed", n)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A subscriber that does not read while a run emits more than its queue holds is detached and
// never waited on: the run and the other subscribers go on. It then catches up on its own, from
// memory and store, misses nothing and joins the hub again.
func TestSlowSubscriberCatchesUp(t *testing.T) {
	ev := newMemEvents()
	counts := &countingMetrics{}
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond, Metrics: counts})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow := m.Subscribe(ctx, "s1", Join)
	fast := m.Subscribe(ctx, "s1", Join)
	defer slow.Close()
	defer fast.Close()

	const n = 3 * subQueue
	r, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r.Go(chunks(n)) // 1..n+2
	last := int64(n + 2)
	checkSeqs(t, "fast subscriber", take(t, ctx, fast, last), 1, last)
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("the run waited for a subscriber that does not read")
	}
	slow.mu.Lock()
	attached, queued := slow.attached, len(slow.queue)
	slow.mu.Unlock()
	if attached || queued > subQueue {
		t.Fatalf("slow subscriber: attached %v with %d frames queued, want detached within %d", attached, queued, subQueue)
	}
	checkSeqs(t, "slow subscriber", take(t, ctx, slow, last), 1, last)
	// Caught up, it is attached again and gets the next run from the hub.
	r2, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r2.Go(chunks(0))
	checkSeqs(t, "slow subscriber, next run", take(t, ctx, slow, last+2), last+1, last+2)
	slow.mu.Lock()
	attached = slow.attached
	slow.mu.Unlock()
	if !attached {
		t.Fatal("a subscriber that caught up is not attached to the hub again")
	}
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if counts.appends == 0 {
		t.Error("metrics: no store append timed")
	}
	// The slow subscriber was detached and caught up; on a busy machine the fast one may have
	// been too.
	if counts.detached < 1 || counts.caughtUp < 1 || counts.caughtUp > counts.detached || counts.started != 2 || counts.finished[parley.FinishStop] != 2 {
		t.Fatalf("metrics: %d detached, %d caught up, %d runs started, finished %v; want at least 1 and 1 (no more caught up than detached), 2 and 2 stop",
			counts.detached, counts.caughtUp, counts.started, counts.finished)
	}
}

// countingMetrics counts what a Manager reports.
type countingMetrics struct {
	mu                          sync.Mutex
	started, detached, caughtUp int
	appends, publishes          int
	finished                    map[string]int
}

func (c *countingMetrics) StoreAppend(time.Duration, bool) { c.mu.Lock(); c.appends++; c.mu.Unlock() }
func (c *countingMetrics) RelayPublish(time.Duration, bool) {
	c.mu.Lock()
	c.publishes++
	c.mu.Unlock()
}

func (c *countingMetrics) RunStarted() { c.mu.Lock(); c.started++; c.mu.Unlock() }
func (c *countingMetrics) RunFinished(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished == nil {
		c.finished = map[string]int{}
	}
	c.finished[reason]++
}
func (c *countingMetrics) SubscriberDetached() { c.mu.Lock(); c.detached++; c.mu.Unlock() }
func (c *countingMetrics) SubscriberCaughtUp() { c.mu.Lock(); c.caughtUp++; c.mu.Unlock() }

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
	f.mu.Unlock()
	if fail {
		f.mu.Lock()
		f.fails++
		f.mu.Unlock()
		return nil, errors.New("store down")
	}
	return f.memEvents.ListEvents(ctx, s, after, limit)
}

// A hub whose read fails (the store is down) follows again from where it stopped: its subscribers
// stay connected and miss nothing.
func TestHubFollowsAgainAfterAFailedRead(t *testing.T) {
	ev := &failingEvents{memEvents: newMemEvents()}
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond})
	r1, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r1.Go(chunks(1)) // 1..3
	<-r1.Done()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev.mu.Lock()
	ev.fail = true
	ev.mu.Unlock()
	// The hub starts after the ended run, which memory holds, and asks the store for more.
	s := m.Subscribe(ctx, "s1", 3)
	defer s.Close()
	for {
		ev.mu.Lock()
		fails := ev.fails
		ev.mu.Unlock()
		if fails >= 2 {
			break // it failed, and tried again
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the hub read the store %d times, want a retry", fails)
		case <-time.After(10 * time.Millisecond):
		}
	}
	ev.mu.Lock()
	ev.fail = false
	ev.mu.Unlock()
	r2, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r2.Go(chunks(1)) // 4..6
	checkSeqs(t, "after the store came back", take(t, ctx, s, 6), 4, 6)
}

// Large events bound the hub's ring and a subscriber's queue by their size as well as their
// number: a subscriber that does not read while 12 MiB go by is detached, and catches up.
func TestLargeEventsBoundTheQueues(t *testing.T) {
	m := NewManager(Options{Events: newMemEvents(), FlushEvery: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow := m.Subscribe(ctx, "s1", Join)
	defer slow.Close()
	big := strings.Repeat("x", 1<<20)
	r, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		for range 12 {
			emit(parley.Event{Type: parley.EventChunk, Content: big})
		}
		return parley.FinishStop, nil
	}) // 1..14
	<-r.Done()
	// The hub has pushed the run's end once its ring holds the done event.
	for {
		h := slow.h
		h.mu.Lock()
		pos, ringBytes, ringLen := h.pos, h.ringBytes, len(h.ring)
		h.mu.Unlock()
		if pos == 14 {
			if ringBytes > hubRingBytes || ringLen >= 14 {
				t.Fatalf("the hub's ring holds %d frames, %d bytes: more than %d bytes", ringLen, ringBytes, hubRingBytes)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the hub stopped at %d", pos)
		case <-time.After(5 * time.Millisecond):
		}
	}
	slow.mu.Lock()
	attached, queued := slow.attached, slow.queued
	slow.mu.Unlock()
	if attached || queued > subQueueBytes {
		t.Fatalf("slow subscriber: attached %v with %d bytes queued, want detached within %d", attached, queued, subQueueBytes)
	}
	checkSeqs(t, "slow subscriber", take(t, ctx, slow, 14), 1, 14)
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

// A subscriber that leaves while its hub reads the store (as every chat's stream does, just after
// the run's done) does not cancel the read mid-flight: on PostgreSQL, pgx closes a connection
// whose query was cancelled, and the pool has to dial a new one. The read finishes; Close waits
// for it.
func TestLeavingDoesNotCancelAStoreRead(t *testing.T) {
	ev := &heldEvents{memEvents: newMemEvents(), entered: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond})
	r1, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r1.Go(chunks(1)) // 1..3
	<-r1.Done()

	ev.mu.Lock()
	ev.armed = true
	ev.mu.Unlock()
	// The hub starts after the ended run and asks the store for more.
	s := m.Subscribe(context.Background(), "s1", 3)
	select {
	case <-ev.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub did not read the store")
	}
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	// Close ends the hub's context at once (the hub is gone from the manager just before). Give a
	// read that would be cancelled ample time to see it.
	deadline := time.Now().Add(10 * time.Second)
	for hubsOf(m) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-ev.cancelled:
		t.Fatal("the store read was cancelled when the last subscriber left")
	case <-closed:
		t.Fatal("Close returned while the hub's store read was still running")
	case <-time.After(500 * time.Millisecond):
	}
	close(ev.release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the read finished")
	}
}

// publishRelay is a Relay that only takes what is published.
type publishRelay struct{}

func (publishRelay) Publish(context.Context, string, []parley.Event) error { return nil }
func (publishRelay) Range(context.Context, string, int64, int) ([]parley.Event, error) {
	return nil, nil
}
func (publishRelay) Watch(string) (<-chan struct{}, func()) { return nil, func() {} }

// A run's batches to the store and the relay are timed for the metrics.
func TestStoreAndRelayBatchesAreTimed(t *testing.T) {
	counts := &countingMetrics{}
	m := NewManager(Options{Events: newMemEvents(), FlushEvery: time.Millisecond, Relay: publishRelay{}, Metrics: counts})
	r, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r.Go(chunks(3))
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end")
	}
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if counts.appends == 0 || counts.publishes == 0 {
		t.Fatalf("timed %d store appends and %d relay publishes, want some of each", counts.appends, counts.publishes)
	}
}
