package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func readAll(t *testing.T, l *Log, after int64) []parley.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []parley.Event
	for {
		evs, done, err := l.Read(ctx, after, 7)
		if err != nil {
			t.Fatalf("Read after %d: %v", after, err)
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

func TestLogSequenceAndResume(t *testing.T) {
	l := NewLog(0)
	for i := 0; i < 20; i++ {
		ev := l.Append(parley.Event{Type: parley.EventChunk})
		if ev.Seq != int64(i+1) {
			t.Fatalf("append %d got seq %d", i, ev.Seq)
		}
	}
	l.Close()
	if got := l.Append(parley.Event{}); got.Seq != 0 {
		t.Fatalf("append after close got seq %d", got.Seq)
	}
	for _, after := range []int64{0, 1, 13, 19, 20} {
		evs := readAll(t, l, after)
		if want := 20 - int(after); len(evs) != want {
			t.Fatalf("after %d: %d events, want %d", after, len(evs), want)
		}
		for i, ev := range evs {
			if ev.Seq != after+int64(i)+1 {
				t.Fatalf("after %d: event %d has seq %d", after, i, ev.Seq)
			}
		}
	}
}

// Many concurrent readers joining at different points each see every event once, in order,
// while the producer appends without waiting for any of them.
func TestLogConcurrentReadersNoGapNoDuplicate(t *testing.T) {
	l := NewLog(0)
	const n = 2000
	var wg sync.WaitGroup
	results := make([][]parley.Event, 8)
	for r := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[r] = readAll(t, l, 0)
		}()
	}
	for i := 0; i < n; i++ {
		l.Append(parley.Event{Type: parley.EventChunk})
	}
	l.Close()
	wg.Wait()
	for r, evs := range results {
		if len(evs) != n {
			t.Fatalf("reader %d saw %d events, want %d", r, len(evs), n)
		}
		for i, ev := range evs {
			if ev.Seq != int64(i+1) {
				t.Fatalf("reader %d: event %d has seq %d", r, i, ev.Seq)
			}
		}
	}
}

func TestLogReadWaitsAndHonoursContext(t *testing.T) {
	l := NewLog(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, err := l.Read(ctx, 0, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read on empty log: %v, want deadline exceeded", err)
	}
	got := make(chan []parley.Event, 1)
	go func() {
		evs, _, _ := l.Read(context.Background(), 0, 10)
		got <- evs
	}()
	l.Append(parley.Event{Type: parley.EventDone})
	select {
	case evs := <-got:
		if len(evs) != 1 || evs[0].Type != parley.EventDone {
			t.Fatalf("woken reader got %+v", evs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader was not woken by Append")
	}
}

func TestLogTrimsOldest(t *testing.T) {
	l := NewLog(10)
	for i := 0; i < 25; i++ {
		l.Append(parley.Event{})
	}
	if _, _, err := l.Read(context.Background(), 5, 10); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("read before the window: %v, want ErrTrimmed", err)
	}
	evs, _, err := l.Read(context.Background(), 15, 100)
	if err != nil || len(evs) != 10 || evs[0].Seq != 16 || evs[9].Seq != 25 {
		t.Fatalf("read in window: %d events, err %v", len(evs), err)
	}
	if l.LastSeq() != 25 {
		t.Fatalf("LastSeq = %d", l.LastSeq())
	}
}

func TestStateReadsLastAndClosedTogether(t *testing.T) {
	l := NewLogFrom(10, 5)
	if last, closed := l.State(); last != 4 || closed {
		t.Fatalf("empty log: %d %v, want 4 false", last, closed)
	}
	l.Append(parley.Event{Type: parley.EventChunk})
	l.Append(parley.Event{Type: parley.EventDone})
	l.Close()
	if last, closed := l.State(); last != 6 || !closed {
		t.Fatalf("closed log: %d %v, want 6 true", last, closed)
	}
}

// TestLogRingWraps reads every window of logs of several bounds, after every number of appends,
// and checks each read returns exactly the expected events, across the ring's wrap.
func TestLogRingWraps(t *testing.T) {
	ctx := context.Background()
	for _, bound := range []int{1, 2, 3, 7} {
		l := NewLogFrom(bound, 4)
		for n := 1; n <= 3*bound+2; n++ {
			l.Append(parley.Event{Content: fmt.Sprint(n + 3)})
			last := int64(n + 3)
			oldest := max(4, last-int64(bound)+1)
			for after := int64(0); after < last; after++ {
				for limit := 1; limit <= bound+1; limit++ {
					evs, _, err := l.Read(ctx, after, limit)
					if after+1 < oldest {
						if !errors.Is(err, ErrTrimmed) {
							t.Fatalf("bound %d, %d appended: read after %d = %v, want ErrTrimmed", bound, n, after, err)
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					want := min(int64(limit), last-after)
					if int64(len(evs)) != want {
						t.Fatalf("bound %d, %d appended: read after %d limit %d gave %d events, want %d", bound, n, after, limit, len(evs), want)
					}
					for k, ev := range evs {
						if s := after + 1 + int64(k); ev.Seq != s || ev.Content != fmt.Sprint(s) {
							t.Fatalf("bound %d: event %d is %d %q, want %d", bound, k, ev.Seq, ev.Content, s)
						}
					}
				}
			}
		}
	}
}

// TestAppendToAFullLogDoesNotAllocate: trimming overwrites the oldest slot instead of copying.
func TestAppendToAFullLogDoesNotAllocate(t *testing.T) {
	l := NewLog(1000)
	for range 1000 {
		l.Append(parley.Event{})
	}
	if n := testing.AllocsPerRun(100, func() { l.Append(parley.Event{Type: parley.EventChunk}) }); n > 1 {
		t.Fatalf("%v allocations per append to a full log, want at most 1 (the wake channel)", n)
	}
}
