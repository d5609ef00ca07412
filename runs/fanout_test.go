package runs

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
)

// take reads s until it has handed out the event numbered until, and checks that every frame's
// JSON is its event's.
func take(t *testing.T, ctx context.Context, s *stream.Subscription, until int64) []*stream.Frame {
	t.Helper()
	var got []*stream.Frame
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
func checkSeqs(t *testing.T, name string, frames []*stream.Frame, first, last int64) {
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

// Subscribers joining a session at every kind of point (the stored history, the live run, the
// next run) each get every event once, in order; the live events reach all of them as the same
// frames, encoded once; the session's stream leaves memory with its last subscriber.
func TestSubscribersShareOneStream(t *testing.T) {
	ev := newMemEvents()
	// A ring that holds the whole run: the live events all come from it.
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond, MaxBytes: 16 << 20})
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
		for range 2000 { // 10..2009
			emit(parley.Event{Type: parley.EventChunk, Content: "x"})
		}
		return parley.FinishStop, nil // done: 2010
	})
	<-step

	starts := []int64{0, 3, 7, 8, 9, Join, Join, 0}
	subs := make([]*stream.Subscription, len(starts))
	for i, a := range starts {
		subs[i] = m.Subscribe(ctx, "s1", a)
	}
	if n := m.Streams(); n != 1 {
		t.Fatalf("%d streams for one session, want 1", n)
	}
	// Each subscriber first reads what is there (to 9), some of it from the store. Only then does
	// the run go on: from there on every subscriber reads the ring, and the ring keeps what one
	// of them has not read. (A subscriber still catching up from the store does not hold the
	// ring's frames: had the run gone on meanwhile, it could read its last frames from the store
	// too, as copies.)
	results := make([][]*stream.Frame, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		if starts[i] != 9 {
			wg.Go(func() { results[i] = take(t, ctx, s, 9) })
		}
	}
	wg.Wait()
	close(release)
	for i, s := range subs {
		wg.Go(func() { results[i] = append(results[i], take(t, ctx, s, 2010)...) })
	}
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
	// The last events came from the ring: every subscriber holds the same frame, not a copy.
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
	<-r3.Done()
	if n := m.Streams(); n != 0 {
		t.Fatalf("%d streams left in memory after every subscription closed and the runs ended", n)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A subscriber that does not read while a run emits far more than the ring holds is never waited
// on: the run and the other subscribers go on. It then catches up from the store, misses nothing
// and reads the ring again.
func TestSlowSubscriberCatchesUp(t *testing.T) {
	ev := newMemEvents()
	counts := &countingMetrics{}
	m := NewManager(Options{Events: ev, FlushEvery: time.Millisecond, Metrics: counts, MaxEvents: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow := m.Subscribe(ctx, "s1", Join)
	fast := m.Subscribe(ctx, "s1", Join)
	defer slow.Close()
	defer fast.Close()

	const n = 3000
	r, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r.Go(chunks(n)) // 1..n+2
	last := int64(n + 2)
	slowGot := take(t, ctx, slow, 1) // it reads the ring once, then no more for a while
	slowGot = append([]*stream.Frame(nil), slowGot...)
	checkSeqs(t, "fast subscriber", take(t, ctx, fast, last), 1, last)
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("the run waited for a subscriber that does not read")
	}
	if slowGot[len(slowGot)-1].Seq < last {
		slowGot = append(slowGot, take(t, ctx, slow, last)...)
	}
	checkSeqs(t, "slow subscriber", slowGot, 1, last)
	// Caught up, it gets the next run from the ring.
	r2, _ := m.Begin(context.Background(), Spec{Session: "s1"})
	r2.Go(chunks(0))
	checkSeqs(t, "slow subscriber, next run", take(t, ctx, slow, last+2), last+1, last+2)
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if counts.appends == 0 {
		t.Error("metrics: no store append timed")
	}
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
