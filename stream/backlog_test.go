package stream

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// ringBytes returns the bytes the session's ring holds.
func ringBytes(s *session) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring.bytes
}

// heldStore is a memEvents whose writes of a session wait, while the session is held, until
// its hold channel is closed.
type heldStore struct {
	*memEvents
	hmu   sync.Mutex
	holds map[string]chan struct{}
}

func (h *heldStore) AppendEvents(ctx context.Context, s string, at time.Time, evs []parley.Event) error {
	h.hmu.Lock()
	hold := h.holds[s]
	h.hmu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.memEvents.AppendEvents(ctx, s, at, evs)
}

// hold makes the session's next writes wait (next true) or not, and lets the writes waiting
// now go.
func (h *heldStore) hold(s string, next bool) {
	h.hmu.Lock()
	old := h.holds[s]
	if next {
		h.holds[s] = make(chan struct{})
	} else {
		delete(h.holds, s)
	}
	h.hmu.Unlock()
	if old != nil {
		close(old)
	}
}

// The runs writing at once share the Hub's budget for events waiting for the store: with 16 runs
// whose store writes are held and a budget of 128 KiB, a producer waits once its run holds
// 8 KiB of events the store has not taken, though its ring's bound is 64 KiB; once the other
// runs' events are stored, the same producer may hold its ring's bound again. A run whose events
// are all stored takes no share. Nothing is dropped: the store gets every event.
func TestRunsShareTheBudgetForUnstoredEvents(t *testing.T) {
	ev := &heldStore{memEvents: newMemEvents(), holds: map[string]chan struct{}{}}
	const ringBytesBound, budget, runs = 64 << 10, 128 << 10, 16
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: ringBytesBound, BacklogBytes: budget})
	ctx := timeout(t)
	var ws []*Writer
	for i := range runs {
		id := "s" + strconv.Itoa(i)
		ev.hold(id, true)
		w, err := h.Open(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if n := h.writers.Load(); n != 0 {
		t.Fatalf("%d runs counted as writing before any event", n)
	}
	chunk := parley.Event{Type: parley.EventChunk, Content: strings.Repeat("b", 1<<10)}
	for _, o := range ws[1:] {
		o.Append(chunk)
	}
	if n := h.writers.Load(); n != runs-1 {
		t.Fatalf("%d runs counted as writing, want %d", n, runs-1)
	}
	w := ws[0]
	const total = 100
	appended := make(chan int, total)
	go func() {
		for i := range total {
			w.Append(chunk)
			appended <- i + 1
		}
		close(appended)
	}()
	// Each frame is about 2.4 KiB (Frame.size): the fourth takes the run past its share, and its
	// Append waits.
	frame := h.frame(chunk).size()
	share := budget / runs
	n := 0
	for n < share/frame {
		select {
		case n = <-appended:
		case <-ctx.Done():
			t.Fatalf("only %d appends went through before the run held its share", n)
		}
	}
	if got := h.backlogBound(); got != share {
		t.Fatalf("a run's share of the budget is %d bytes with %d runs writing, want %d", got, runs, share)
	}
	select {
	case n = <-appended:
		if n > share/frame+1 {
			t.Fatalf("%d appends went through while the store held nothing: past the run's share of %d bytes", n, share)
		}
	case <-time.After(100 * time.Millisecond):
	}
	select {
	case n = <-appended:
		t.Fatalf("%d appends went through while the store held nothing: past the run's share of %d bytes", n, share)
	case <-time.After(100 * time.Millisecond):
	}
	if held := ringBytes(w.s); held > share+frame {
		t.Fatalf("the run holds %d bytes waiting for the store, want its share %d (and one frame)", held, share)
	}

	// The other runs' events are stored: the one left writing may hold its ring's bound.
	for _, o := range ws[1:] {
		ev.hold(o.s.id, false)
	}
	for h.writers.Load() > 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d runs still counted as writing, want 1", h.writers.Load())
		case <-time.After(time.Millisecond):
		}
	}
	if got := h.backlogBound(); got != ringBytesBound {
		t.Fatalf("the one run writing may hold %d bytes, want its ring's bound %d", got, ringBytesBound)
	}
	ev.hold("s0", true) // the write under way ends; the next ones wait
	for ringBytes(w.s) <= 4*share {
		select {
		case _, ok := <-appended:
			if !ok {
				t.Fatal("every append went through while the store held its write")
			}
		case <-ctx.Done():
			t.Fatalf("the one run writing waited at %d bytes for the store, want up to its ring's bound", ringBytes(w.s))
		}
	}
	ev.hold("s0", false)
	for range appended {
	}
	for _, o := range ws {
		o.Close()
		o.Drop()
	}
	if got := ev.stored("s0"); len(got) != total {
		t.Fatalf("stored %d events, want %d", len(got), total)
	}
	if n := h.writers.Load(); n != 0 {
		t.Fatalf("%d runs counted as writing after every one closed", n)
	}
}

// A run's share of the budget is never below backlogFloor (nor above the ring's bound), and a
// negative budget leaves each run its ring's bound.
func TestBacklogBound(t *testing.T) {
	for _, c := range []struct {
		ring, budget int
		writers      int64
		want         int
	}{
		{64 << 10, 16 << 20, 1, 64 << 10},
		{64 << 10, 16 << 20, 256, 64 << 10},
		{64 << 10, 16 << 20, 1000, 16 << 20 / 1000},
		{64 << 10, 16 << 20, 100_000, backlogFloor},
		{4 << 10, 16 << 20, 100_000, 4 << 10},
		{64 << 10, -1, 100_000, 64 << 10},
		{64 << 10, 0, 1000, DefaultBacklogBytes / 1000},
	} {
		h := New(Options{Store: newMemEvents(), RingBytes: c.ring, BacklogBytes: c.budget})
		h.writers.Store(c.writers)
		if got := h.backlogBound(); got != c.want {
			t.Errorf("ring %d, budget %d, %d writers: a run's share is %d, want %d", c.ring, c.budget, c.writers, got, c.want)
		}
	}
}

// walkUnstored counts, from the ring itself, what session.unstored keeps: the size of the
// frames after stored.
func walkUnstored(s *session) (counted, walked int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.ring.n {
		if f := s.ring.at(i); f.Seq > s.stored {
			walked += f.size()
		}
	}
	return s.unstored, walked
}

// The bytes waiting for the store that the backlog's check reads on every Append are kept as
// the ring changes, not walked: appends while the store holds its writes, the writes let go, a
// reader that keeps read frames, Finish, Close, the session's next run, and the last reference.
func TestUnstoredBytesFollowTheRing(t *testing.T) {
	ev := &heldStore{memEvents: newMemEvents(), holds: map[string]chan struct{}{}}
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: 16 << 10, BacklogBytes: -1})
	ctx := timeout(t)
	check := func(step string) {
		t.Helper()
		if counted, walked := walkUnstored(h.get("s1")); counted != walked {
			t.Fatalf("%s: %d bytes counted as waiting for the store, the ring holds %d", step, counted, walked)
		}
		h.put(h.get("s1")) // the extra reference of get
	}
	sub := h.Subscribe(ctx, "s1", Join) // reads nothing: the ring keeps what it has not read
	defer sub.Close()
	ev.hold("s1", true)
	w, err := h.Open(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	check("opened")
	chunk := parley.Event{Type: parley.EventChunk, Content: strings.Repeat("c", 300)}
	for range 10 {
		w.Append(chunk)
	}
	if counted, _ := walkUnstored(w.s); counted == 0 {
		t.Fatal("nothing counted as waiting for the store while it held every write")
	}
	check("appended, the store holding its writes")
	ev.hold("s1", false)
	for {
		if counted, _ := walkUnstored(w.s); counted == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the store's writes were never counted")
		case <-time.After(time.Millisecond):
		}
	}
	check("stored, the reader keeping what it has not read")
	for range 40 { // past the ring's bound: the producer waits for the store, which takes them
		w.Append(chunk)
		check("appended past the ring's bound")
	}
	finish := func(evs []parley.EncodedEvent) error {
		out := make([]parley.Event, len(evs))
		for i, e := range evs {
			out[i] = *e.Event
		}
		return ev.memEvents.AppendEvents(ctx, "s1", time.Now(), out)
	}
	if _, err := w.Finish([]parley.Event{{Type: parley.EventDone}}, finish); err != nil {
		t.Fatal(err)
	}
	check("finished")
	w.Close()
	w.Drop()
	check("closed")
	w2, err := h.Open(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	w2.Append(chunk)
	check("the next run")
	w2.Close()
	w2.Drop()
	check("the next run closed")
	if n := len(ev.stored("s1")); n != 52 {
		t.Fatalf("stored %d events, want 52", n)
	}
}

// goroutineID returns the calling goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(b), "goroutine "), " ")
	return id
}

// onWhichStore records the goroutine of each write.
type onWhichStore struct {
	*memEvents
	mu sync.Mutex
	on []string
}

func (o *onWhichStore) AppendEvents(ctx context.Context, s string, at time.Time, evs []parley.Event) error {
	o.mu.Lock()
	o.on = append(o.on, goroutineID())
	o.mu.Unlock()
	return o.memEvents.AppendEvents(ctx, s, at, evs)
}

// A producer past its ring's bound, or its share of the budget, of events the store has not
// taken would only wait for the store writer: it writes them itself, so that no goroutine
// holds a stack of its own for the write.
func TestProducerWaitingForTheStoreWritesItself(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"ring", Options{RingBytes: 8 << 10, BacklogBytes: -1}},
		{"share", Options{RingBytes: 64 << 10, BacklogBytes: 1}}, // the floor, 8 KiB
	} {
		ev := &onWhichStore{memEvents: newMemEvents()}
		c.opts.Store, c.opts.FlushEvery = ev, time.Hour // no write before the producer waits
		h := New(c.opts)
		w, err := h.Open(timeout(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		producer := goroutineID()
		chunk := parley.Event{Type: parley.EventChunk, Content: strings.Repeat("p", 500)}
		for range 40 {
			w.Append(chunk)
		}
		ev.mu.Lock()
		on := slices.Clone(ev.on)
		ev.mu.Unlock()
		if len(on) == 0 {
			t.Fatalf("%s: 40 events of 1.3 KiB past an 8 KiB bound and no store write", c.name)
		}
		for i, g := range on {
			if g != producer {
				t.Errorf("%s: write %d ran on goroutine %s, not the producer's (%s)", c.name, i, g, producer)
			}
		}
		w.Close()
		w.Drop()
		if got := ev.stored("s1"); len(got) != 40 {
			t.Fatalf("%s: stored %d events, want 40", c.name, len(got))
		}
	}
}

// While the store is behind (more runs writing than the budget gives each its ring's bound),
// a run's events gather for firstFlush times FlushEvery rather than FlushEvery: its share
// fills first, and its producer writes the whole share at once, instead of the timer writing
// what gathered in FlushEvery, a fraction of it. With the store keeping up, FlushEvery.
func TestEventsGatherLongerWhileTheStoreIsBehind(t *testing.T) {
	const flush = 10 * time.Millisecond
	h := New(Options{Store: newMemEvents(), FlushEvery: flush, RingBytes: 64 << 10, BacklogBytes: 16 << 20})
	w, err := h.Open(timeout(t), "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Drop()
	defer w.Close()
	for _, c := range []struct {
		writers int64
		want    time.Duration
	}{
		{1, flush},
		{256, flush}, // each still gets its ring's bound
		{257, firstFlush * flush},
		{1000, firstFlush * flush},
	} {
		h.writers.Store(c.writers)
		if got := w.flushWait(); got != c.want {
			t.Errorf("%d runs writing: events gather for %v, want %v", c.writers, got, c.want)
		}
	}
	h.writers.Store(0)
	nob := New(Options{Store: newMemEvents(), FlushEvery: flush, BacklogBytes: -1})
	w2, err := nob.Open(timeout(t), "s2")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Drop()
	defer w2.Close()
	nob.writers.Store(100_000)
	if got := w2.flushWait(); got != flush {
		t.Errorf("no budget: events gather for %v, want %v", got, flush)
	}
}
