package stream

import (
	"strconv"
	"strings"
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

// swapHold makes the store's next writes wait on a new channel, returned, and lets the write
// waiting on the old one (if any) go.
func swapHold(ev *memEvents) chan struct{} {
	next := make(chan struct{})
	ev.mu.Lock()
	old := ev.hold
	ev.hold = next
	ev.mu.Unlock()
	if old != nil {
		close(old)
	}
	return next
}

// The runs writing at once share the Hub's budget for events waiting for the store: with 16 runs
// and a budget of 128 KiB, a producer whose store holds its writes waits once its run holds
// 8 KiB of them, though its ring's bound is 64 KiB; once the other runs have closed, the same
// producer may hold its ring's bound again. Nothing is dropped: the store gets every event.
func TestRunsShareTheBudgetForUnstoredEvents(t *testing.T) {
	ev := newMemEvents()
	hold := swapHold(ev)
	const ringBytesBound, budget, runs = 64 << 10, 128 << 10, 16
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: ringBytesBound, BacklogBytes: budget})
	ctx := timeout(t)
	var ws []*Writer
	for i := range runs {
		w, err := h.Open(ctx, "s"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if got := h.backlogBound(); got != budget/runs {
		t.Fatalf("a run's share of the budget is %d bytes with %d runs writing, want %d", got, runs, budget/runs)
	}
	w := ws[0]
	chunk := parley.Event{Type: parley.EventChunk, Content: strings.Repeat("b", 1<<10)}
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
	frame := (&Frame{JSON: make([]byte, len(chunk.Content)+100)}).size()
	share := budget / runs
	n := 0
	for n < share/frame {
		select {
		case n = <-appended:
		case <-ctx.Done():
			t.Fatalf("only %d appends went through before the run held its share", n)
		}
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

	// The other runs end: the one left may hold its ring's bound of events for the store.
	for _, o := range ws[1:] {
		o.Close()
		o.Drop()
	}
	if got := h.backlogBound(); got != ringBytesBound {
		t.Fatalf("the one run writing may hold %d bytes, want its ring's bound %d", got, ringBytesBound)
	}
	hold = swapHold(ev) // the write under way ends; the next ones wait
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
	ev.mu.Lock()
	ev.hold = nil
	ev.mu.Unlock()
	close(hold)
	for range appended {
	}
	w.Close()
	w.Drop()
	if got := ev.stored("s0"); len(got) != total {
		t.Fatalf("stored %d events, want %d", len(got), total)
	}
	if n := h.writers.Load(); n != 0 {
		t.Fatalf("%d writers counted after every one closed", n)
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
