package stream

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// memEvents is an in-memory parley.EventStore.
type memEvents struct {
	mu       sync.Mutex
	reserves int
	reserved map[string]int64
	events   map[string][]parley.Event
	// hold, while set, makes AppendEvents wait until it is closed.
	hold chan struct{}
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

func (m *memEvents) AppendEvents(ctx context.Context, s string, _ time.Time, evs []parley.Event) error {
	m.mu.Lock()
	hold := m.hold
	m.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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

// take reads sub until it has handed out the event numbered until.
func take(t *testing.T, ctx context.Context, sub *Subscription, until int64) []*Frame {
	t.Helper()
	var got []*Frame
	for {
		select {
		case <-sub.Ready():
			fs, err := sub.Next(ctx)
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

// run writes a run of n chunks between a start and a done to the session, closes it, and returns
// the numbers of its start and its done.
func run(t *testing.T, h *Hub, session string, n int) (first, last int64) {
	t.Helper()
	w, err := h.Open(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	first = w.Append(parley.Event{Type: parley.EventStart}).Seq
	for range n {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "x"})
	}
	last = w.Next()
	w.GiveBack(last)
	w.Append(parley.Event{Type: parley.EventDone, FinishReason: parley.FinishStop})
	w.Close()
	w.Drop()
	return first, last
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Readers joining at every kind of point (the stored history, the live run, Join, the next run)
// each get every event once, in order; the live events reach all of them as the same frames,
// encoded once.
func TestReadersAtEveryPointShareFrames(t *testing.T) {
	ev := newMemEvents()
	// A ring that holds the whole run: every reader reads the live events from it.
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: 16 << 20})
	run(t, h, "s1", 5) // 1..7
	if n := h.Sessions(); n != 0 {
		t.Fatalf("a finished run with a store left %d sessions in memory", n)
	}
	ctx := timeout(t)
	w, _ := h.Open(ctx, "s1")
	w.Append(parley.Event{Type: parley.EventStart}) // 8
	w.Append(parley.Event{Type: parley.EventChunk}) // 9

	starts := []int64{0, 3, 7, 8, 9, Join, Join, 0}
	subs := make([]*Subscription, len(starts))
	for i, a := range starts {
		subs[i] = h.Subscribe(ctx, "s1", a)
	}
	// Every reader first reads up to 9 (9 is the last event so far), so that all of them are in the ring before the run goes
	// on: a reader still reading the store when the others have passed a frame and the store
	// has it would read the rest from the store (its own copies), which is right, but not what
	// this test is about.
	results := make([][]*Frame, len(subs))
	for i, s := range subs {
		if starts[i] < 9 { // the reader after 9 has nothing to read yet, and is at the ring's head
			results[i] = take(t, ctx, s, 9)
		}
	}
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() {
			for _, f := range take(t, ctx, s, 2010) {
				results[i] = append(results[i], f)
			}
		})
	}
	for range 2000 { // 10..2009
		w.Append(parley.Event{Type: parley.EventChunk, Content: "x"})
	}
	w.GiveBack(w.Next())
	w.Append(parley.Event{Type: parley.EventDone}) // 2010
	wg.Wait()
	for i, a := range starts {
		first := a + 1
		if a == Join {
			first = 8
		}
		checkSeqs(t, "reader after "+strconv.FormatInt(a, 10), results[i], first, 2010)
	}
	if t.Failed() {
		return
	}
	for i := range results {
		if results[0][len(results[0])-1] != results[i][len(results[i])-1] {
			t.Errorf("reader %d got its own copy of the last frame: not shared", i)
		}
	}
	w.Close()
	w.Drop()
	// A run begun later reaches them too.
	first, last := run(t, h, "s1", 1)
	for i, s := range subs {
		checkSeqs(t, "next run, reader "+strconv.Itoa(i), take(t, ctx, s, last), first, last)
	}
	for _, s := range subs {
		s.Close()
		s.Close() // twice is harmless
	}
	if n := h.Sessions(); n != 0 {
		t.Fatalf("%d sessions left after every subscription closed", n)
	}
	if n := w.s.ring.n; n != 0 || w.s.ring.buf != nil {
		t.Fatalf("a forgotten session's ring still holds %d frames", n)
	}
	if got := ev.stored("s1"); len(got) != 2013 {
		t.Fatalf("the store holds %d events, want 2013", len(got))
	}
}

// The ring is bounded in bytes: a run of large events keeps at most the bound (plus what the store
// has not taken) in memory, and a reader that falls behind catches up from the store.
func TestRingIsBoundedInBytes(t *testing.T) {
	ev := newMemEvents()
	metrics := &countingMetrics{}
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: 64 << 10, Metrics: metrics})
	ctx := timeout(t)
	slow := h.Subscribe(ctx, "s1", Join)
	defer slow.Close()
	w, _ := h.Open(ctx, "s1")
	big := strings.Repeat("y", 16<<10)
	maxBytes := 0
	for range 200 { // 3.2 MiB
		w.Append(parley.Event{Type: parley.EventChunk, Content: big})
		w.s.mu.Lock()
		maxBytes = max(maxBytes, w.s.ring.bytes)
		w.s.mu.Unlock()
	}
	w.Append(parley.Event{Type: parley.EventDone})
	w.Close()
	// The events waiting for the store count against the bound: past it by one frame at most
	// (the one whose Append then waits).
	if maxBytes > 64<<10+frameOverhead+2*(len(big)+200) {
		t.Fatalf("the ring held %d bytes, bound 64 KiB", maxBytes)
	}
	w.s.mu.Lock()
	held := w.s.ring.bytes
	w.s.mu.Unlock()
	if held > 64<<10 {
		t.Fatalf("the closed run's ring holds %d bytes, want at most 64 KiB", held)
	}
	checkSeqs(t, "slow reader", take(t, ctx, slow, 201), 1, 201)
	w.Drop()
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	if metrics.detached+metrics.caughtUp == 0 && metrics.appends == 0 {
		t.Fatal("no metrics recorded")
	}
}

// The ring never drops an event the store has not taken: a producer that outruns the store waits
// for it (backpressure), and a reader that fell behind still finds every event.
func TestProducerWaitsForTheStore(t *testing.T) {
	ev := newMemEvents()
	ev.hold = make(chan struct{})
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingEvents: 16, RingBytes: 1 << 20})
	ctx := timeout(t)
	w, _ := h.Open(ctx, "s1")
	appended := make(chan int64, 200)
	go func() {
		for range 100 {
			appended <- w.Append(parley.Event{Type: parley.EventChunk, Content: "z"}).Seq
		}
		close(appended)
	}()
	// 16 events fit; the next is held in the ring while its Append waits for the store.
	var n int
	for n < 16 {
		select {
		case <-appended:
			n++
		case <-ctx.Done():
			t.Fatalf("only %d appends went through", n)
		}
	}
	select {
	case <-appended:
		t.Fatal("the producer went past the ring's bound while the store held nothing")
	case <-time.After(50 * time.Millisecond):
	}
	w.s.mu.Lock()
	ringN := w.s.ring.n
	w.s.mu.Unlock()
	if ringN != 17 {
		t.Fatalf("the ring holds %d events, want all 17 unstored", ringN)
	}
	ev.mu.Lock()
	hold := ev.hold
	ev.hold = nil
	ev.mu.Unlock()
	close(hold)
	for range appended {
	}
	w.Close()
	w.Drop()
	if got := ev.stored("s1"); len(got) != 100 {
		t.Fatalf("stored %d events, want 100", len(got))
	}
}

// batchingEvents is a memEvents that notes the size of each batch it is given, as the ring
// counts it (Frame.size).
type batchingEvents struct {
	*memEvents
	bmu     sync.Mutex
	batches [][2]int // events, bytes
}

func (b *batchingEvents) AppendEvents(ctx context.Context, s string, at time.Time, evs []parley.Event) error {
	size := 0
	for i := range evs {
		j, _ := encodeEvent(&evs[i])
		size += newFrame(&evs[i], j).size()
	}
	b.bmu.Lock()
	b.batches = append(b.batches, [2]int{len(evs), size})
	b.bmu.Unlock()
	return b.memEvents.AppendEvents(ctx, s, at, evs)
}

// A store write takes at most half the ring's bound in bytes (or one event): a batch is copied
// while it is written, so a ring full of events waiting for the store goes out in parts rather
// than being held twice.
func TestStoreBatchesAreBoundedInBytes(t *testing.T) {
	ev := &batchingEvents{memEvents: newMemEvents()}
	ev.hold = make(chan struct{})
	const ringBytes = 8 << 10
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: ringBytes})
	ctx := timeout(t)
	w, _ := h.Open(ctx, "s1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			w.Append(parley.Event{Type: parley.EventChunk, Content: strings.Repeat("b", 200)})
		}
	}()
	// Let the ring fill while the store holds the first write, then let the store go.
	for {
		w.s.mu.Lock()
		full := w.s.ring.bytes > ringBytes/2
		w.s.mu.Unlock()
		if full {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the ring never filled")
		case <-time.After(time.Millisecond):
		}
	}
	ev.mu.Lock()
	hold := ev.hold
	ev.hold = nil
	ev.mu.Unlock()
	close(hold)
	<-done
	w.Close()
	w.Drop()
	if got := ev.stored("s1"); len(got) != 100 {
		t.Fatalf("stored %d events, want 100", len(got))
	}
	ev.bmu.Lock()
	defer ev.bmu.Unlock()
	most := 0
	for _, b := range ev.batches {
		if b[0] > 1 && b[1] > ringBytes/2 {
			t.Errorf("a batch of %d events and %d bytes; bound %d", b[0], b[1], ringBytes/2)
		}
		most = max(most, b[0])
	}
	if most < 2 {
		t.Fatalf("no batch had more than one event (%d batches): nothing was bounded", len(ev.batches))
	}
}
