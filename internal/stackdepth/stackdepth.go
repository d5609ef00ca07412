// Package stackdepth lets a test measure how many bytes of a goroutine's stack the frames
// between two points of its code hold: a goroutine that waits deep in a call (a run reading its
// model's answer, a handler flushing a stream) keeps the stack that depth needs for as long as
// it waits, and the runtime halves a grown stack only when under a quarter of it is in use
// (issue 25: memory per active stream).
//
// The goroutine to measure first calls Deepen, which grows its stack past what the code under
// test needs (so that the runtime does not move the stack while it is measured), then marks its
// top with Gauge.Top(Here()); the code under test calls Gauge.Note(Here()) where the depth
// matters. Both calls of Here are made the same way, so their frames cancel out.
package stackdepth

import (
	"io"
	"sync"
	"testing"
	"unsafe"

	parley "github.com/parleyhq/parley"
)

// Here returns the address of a variable of its own frame: where its caller's stack stands.
//
//go:noinline
func Here() uintptr {
	var x [8]byte
	return uintptr(unsafe.Pointer(&x))
}

// Deepen recurses n times with a 1 KiB frame each, growing the calling goroutine's stack.
//
//go:noinline
func Deepen(n int) int {
	var pad [1024]byte
	pad[n%len(pad)] = 1
	if n == 0 {
		return int(pad[0]) + 1
	}
	return Deepen(n-1) + int(pad[n%len(pad)])
}

// Gauge keeps the deepest point noted below a top mark. Its zero value is ready.
type Gauge struct {
	mu      sync.Mutex
	top     uintptr
	deepest uintptr
}

// Top marks where the measured goroutine's stack starts.
func (g *Gauge) Top(sp uintptr) {
	g.mu.Lock()
	g.top = sp
	g.mu.Unlock()
}

// Note records sp if it lies below the top mark on the same stack (within 1 MiB under it) and
// deeper than what was noted before: a call on another goroutine does not count.
func (g *Gauge) Note(sp uintptr) {
	g.mu.Lock()
	if sp < g.top && g.top-sp < 1<<20 && (g.deepest == 0 || sp < g.deepest) {
		g.deepest = sp
	}
	g.mu.Unlock()
}

// Depth returns the bytes between the top mark and the deepest point noted, or 0 if none was
// (or if the stack was moved in between).
func (g *Gauge) Depth() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.deepest == 0 {
		return 0
	}
	return int(g.top - g.deepest)
}

// Within reports used, the bytes of stack measured under what, and fails t when none was
// measured or, in a build without the race detector (race false; its frames are larger, and
// budgets are for real builds), when it is over budget: a goroutine that waits there would keep
// a stack twice the size it needs, since the runtime halves a stack only when under a quarter
// of it is in use.
func Within(t testing.TB, what string, used, budget int, race bool) {
	t.Helper()
	if used <= 0 {
		t.Fatalf("%s: the point measured was not reached on the measured goroutine, in every try", what)
	}
	t.Logf("%s: %d bytes of stack (budget %d)", what, used, budget)
	if !race && used > budget {
		t.Fatalf("%s: %d bytes of stack, more than %d: the goroutine's stack, once grown, would not shrink back while it waits there", what, used, budget)
	}
}

// Stream is a model stream (parley.Stream) that gives Events in order, then io.EOF, and notes in
// each Next how deep its caller's stack is. Only the reading goroutine may call Next.
type Stream struct {
	Gauge
	Events []parley.StreamEvent
}

func (s *Stream) Next() (parley.StreamEvent, error) {
	s.Note(Here()) // only a call on the measured goroutine counts
	if len(s.Events) == 0 {
		return parley.StreamEvent{}, io.EOF
	}
	ev := s.Events[0]
	s.Events = s.Events[1:]
	return ev, nil
}

func (s *Stream) Close() error { return nil }
