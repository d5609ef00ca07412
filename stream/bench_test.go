package stream

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// BenchmarkAppendAtBound appends to a session whose ring is full (no store, no reader): each
// append drops the oldest frame, at a cost that does not depend on the bound.
func BenchmarkAppendAtBound(b *testing.B) {
	for _, bound := range []int{1_000, 100_000} {
		b.Run("events="+strconv.Itoa(bound), func(b *testing.B) {
			h := New(Options{RingEvents: bound, RingBytes: 1 << 40})
			w, _ := h.Open(context.Background(), "s1")
			ev := parley.Event{Type: parley.EventChunk, Content: "a token"}
			for range bound {
				w.Append(ev)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w.Append(ev)
			}
			b.StopTimer()
			if w.s.ring.n != bound {
				b.Fatalf("the ring holds %d frames, want %d", w.s.ring.n, bound)
			}
			w.Close()
		})
	}
}

// BenchmarkFanOut appends events read by n subscribers, each in its own goroutine as a
// connection's pump: ns/op is per event delivered to all of them.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run("subscribers="+strconv.Itoa(n), func(b *testing.B) {
			fanOut(b, Options{RingEvents: 1 << 16, RingBytes: 1 << 30}, n)
		})
	}
}

// BenchmarkFanOutStored is BenchmarkFanOut with a store (in memory) taking the events in batches
// as a server's does: what the ring's trimming after each store write costs beside the readers.
func BenchmarkFanOutStored(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run("subscribers="+strconv.Itoa(n), func(b *testing.B) {
			fanOut(b, Options{Store: newMemEvents(), FlushEvery: time.Millisecond}, n)
		})
	}
}

// fanOut appends b.N events to a hub made with opts, read by n subscribers in goroutines of
// their own, and waits until each has read them all.
func fanOut(b *testing.B, opts Options, n int) {
	h := New(opts)
	ctx := context.Background()
	w, _ := h.Open(ctx, "s1")
	total := int64(b.N)
	var wg sync.WaitGroup
	for range n {
		sub := h.Subscribe(ctx, "s1", Join)
		wg.Go(func() {
			defer sub.Close()
			var got int64
			for got < total {
				<-sub.Ready()
				fs, err := sub.Next(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				got += int64(len(fs))
			}
		})
	}
	ev := parley.Event{Type: parley.EventChunk, Content: "a token"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w.Append(ev)
	}
	wg.Wait()
	b.StopTimer()
	w.Close()
}
