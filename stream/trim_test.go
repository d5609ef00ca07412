package stream

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// ringFrames returns the Seq of the first frame the session's ring holds (0 when empty) and
// how many it holds.
func ringFrames(s *session) (first int64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ring.n > 0 {
		first = s.ring.at(0).Seq
	}
	return first, s.ring.n
}

// waitRing waits until the ring holds nothing up to seq, or fails.
func waitRing(t *testing.T, s *session, seq int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		first, n := ringFrames(s)
		if n == 0 || first > seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ring still holds %d frames from %d; want none up to %d", n, first, seq)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitUpto waits until the store writer has written (or given up on) the run's events up to seq.
func waitUpto(t *testing.T, w *Writer, seq int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		w.s.mu.Lock()
		upto := w.upto
		w.s.mu.Unlock()
		if upto >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store writer reached %d, want %d", upto, seq)
		}
		time.Sleep(time.Millisecond)
	}
}

// The ring lets go of what the store holds and every reader of the ring has read, well within
// its bounds, while the run goes on; what a reader has not read it keeps (that reader reads the
// ring, not the store); and a reader that joins or resumes from before the ring reads those
// events from the store, each once, in order.
func TestRingKeepsOnlyWhatIsUnstoredOrUnread(t *testing.T) {
	ev := newMemEvents()
	counts := &countingMetrics{}
	// Bounds far above the run: without trimming what was read, the ring would keep it all.
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: 16 << 20, Metrics: counts})
	ctx := timeout(t)
	w, _ := h.Open(ctx, "s1")
	defer w.Drop()
	reader := h.Subscribe(ctx, "s1", w.FirstSeq()-1)
	defer reader.Close()
	w.Append(parley.Event{Type: parley.EventStart}) // 1
	for range 99 {                                  // 2..100
		w.Append(parley.Event{Type: parley.EventChunk, Content: "x"})
	}
	checkSeqs(t, "reader", take(t, ctx, reader, 100), 1, 100)
	waitStored(t, ev, "s1", 100)
	waitRing(t, w.s, 100) // the run is still open

	// A reader resuming after 100 reads the ring: what it has not read stays there, even once
	// stored and read by the other reader.
	late := h.Subscribe(ctx, "s1", 100)
	defer late.Close()
	for range 10 { // 101..110
		w.Append(parley.Event{Type: parley.EventChunk, Content: "y"})
	}
	checkSeqs(t, "reader", take(t, ctx, reader, 110), 101, 110)
	waitStored(t, ev, "s1", 110)
	waitUpto(t, w, 110)
	if first, n := ringFrames(w.s); first != 101 || n != 10 {
		t.Fatalf("the ring holds %d frames from %d, want 101..110 (unread by a reader)", n, first)
	}
	checkSeqs(t, "resumed after 100", take(t, ctx, late, 110), 101, 110)
	counts.mu.Lock()
	detached := counts.detached
	counts.mu.Unlock()
	if detached != 0 {
		t.Fatalf("%d readers fell behind the ring; the ring kept what they had not read", detached)
	}

	// Joining the run, or resuming from its middle, reads what the ring let go of from the
	// store, then goes on live.
	joiner := h.Subscribe(ctx, "s1", Join)
	defer joiner.Close()
	resumed := h.Subscribe(ctx, "s1", 42)
	defer resumed.Close()
	var wg sync.WaitGroup
	var joined, resumedGot []*Frame
	wg.Go(func() { joined = take(t, ctx, joiner, 121) })
	wg.Go(func() { resumedGot = take(t, ctx, resumed, 121) })
	for range 10 { // 111..120
		w.Append(parley.Event{Type: parley.EventChunk, Content: "z"})
	}
	w.GiveBack(w.Next())
	w.Append(parley.Event{Type: parley.EventDone}) // 121
	wg.Wait()
	checkSeqs(t, "joined the run", joined, 1, 121)
	checkSeqs(t, "resumed after 42", resumedGot, 43, 121)
	w.Close()
	if got := ev.stored("s1"); len(got) != 121 {
		t.Fatalf("the store holds %d events, want 121", len(got))
	}
}

// appendFailing fails every AppendEvents while fail is set.
type appendFailing struct {
	*memEvents
	mu    sync.Mutex
	fail  bool
	tries int
}

func (f *appendFailing) AppendEvents(ctx context.Context, s string, at time.Time, evs []parley.Event) error {
	f.mu.Lock()
	fail := f.fail
	f.tries++
	f.mu.Unlock()
	if fail {
		return errors.New("store down")
	}
	return f.memEvents.AppendEvents(ctx, s, at, evs)
}

// Once a store write failed, the store may lack events the ring has had read: the ring then
// keeps its events to its bounds, as a ring does without trimming what was read.
func TestRingKeepsReadEventsAfterAFailedStoreWrite(t *testing.T) {
	ev := &appendFailing{memEvents: newMemEvents(), fail: true}
	h := New(Options{Store: ev, FlushEvery: time.Millisecond, RingBytes: 16 << 20})
	ctx := timeout(t)
	w, _ := h.Open(ctx, "s1")
	defer w.Drop()
	reader := h.Subscribe(ctx, "s1", w.FirstSeq()-1)
	defer reader.Close()
	for range 10 { // 1..10
		w.Append(parley.Event{Type: parley.EventChunk, Content: "x"})
	}
	checkSeqs(t, "reader", take(t, ctx, reader, 10), 1, 10)
	waitUpto(t, w, 10) // given up on
	ev.mu.Lock()
	ev.fail = false
	ev.mu.Unlock()
	for range 10 { // 11..20
		w.Append(parley.Event{Type: parley.EventChunk, Content: "y"})
	}
	checkSeqs(t, "reader", take(t, ctx, reader, 20), 11, 20)
	waitStored(t, ev.memEvents, "s1", 10)
	waitUpto(t, w, 20)
	if first, n := ringFrames(w.s); first != 1 || n != 20 {
		t.Fatalf("the ring holds %d frames from %d, want all 20 (a store write failed)", n, first)
	}
	// A reader resuming from the start still gets every event: from the ring.
	again := h.Subscribe(ctx, "s1", 0)
	defer again.Close()
	checkSeqs(t, "resumed from the start", take(t, ctx, again, 20), 1, 20)
	w.Close()
}

// A run's store writer is a goroutine only while it has events to write: none while the events
// gather, none once they are written, while the runs go on.
func TestStoreWriterRunsOnlyWhileItWrites(t *testing.T) {
	const runs = 50
	for _, flush := range []time.Duration{time.Hour, time.Millisecond} {
		ev := newMemEvents()
		h := New(Options{Store: ev, FlushEvery: flush})
		ctx := timeout(t)
		before := runtime.NumGoroutine()
		ws := make([]*Writer, runs)
		for i := range ws {
			ws[i], _ = h.Open(ctx, "s"+strconv.Itoa(i))
			ws[i].Append(parley.Event{Type: parley.EventChunk, Content: "x"})
		}
		if flush == time.Millisecond {
			for i := range ws {
				waitUpto(t, ws[i], ws[i].FirstSeq())
			}
		}
		// A goroutine each would be 50 more; allow for others' (timers, the runtime's), and for
		// store writers that have written but not yet returned.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			grown := runtime.NumGoroutine() - before
			if grown < runs/2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("FlushEvery %v: %d more goroutines for %d open runs with nothing to write", flush, grown, runs)
			}
		}
		for i, w := range ws {
			w.Append(parley.Event{Type: parley.EventDone})
			w.Close()
			w.Drop()
			if got := ev.stored("s" + strconv.Itoa(i)); len(got) != 2 {
				t.Fatalf("FlushEvery %v: run %d stored %d events, want 2", flush, i, len(got))
			}
		}
	}
}
