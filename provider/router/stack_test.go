package router

import (
	"context"
	"io"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/parleyhq/parley"
)

// nextStackBudget is how many bytes of stack the router's stream may hold under the provider's
// Next: its own Next's frame, and this test's stream (~100 bytes). A run's goroutine waits
// there, under the model's read, for a whole streamed answer; its stack comes back to 8 KiB
// after a collection only if it then uses less than 3,296 bytes (a quarter of 16 KiB less the
// 800 the runtime keeps free; issue 25: memory per active stream). Measured: 408 bytes when
// Next kept its copies of the event and priced the usage in its own frame; 320 now.
const nextStackBudget = 380

// TestNextStackUnderTheProvidersNext calls the router's stream on a goroutine of its own and
// measures, in the provider's Next, how deep the stack is under the router's.
func TestNextStackUnderTheProvidersNext(t *testing.T) {
	// No collection while the stack is measured: a collection may move it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	used := 0
	for range 5 {
		inner := &depthStream{evs: []parley.StreamEvent{{Type: parley.StreamContent, Content: "Hi"},
			{Type: parley.StreamUsage, Usage: &parley.Usage{PromptTokens: 1_000_000}}}}
		s := &stream{Stream: inner, ctx: context.Background(), model: "up/m", price: Price{Input: 2}, priced: true}
		var last *parley.Usage
		done := make(chan error, 1)
		go func() {
			deepen(64) // grows the stack past what the read needs: it is not moved while it runs
			inner.top = stackHere()
			for {
				ev, err := s.Next()
				if err != nil {
					done <- err
					return
				}
				if ev.Usage != nil {
					last = ev.Usage
				}
			}
		}()
		if err := <-done; err != io.EOF {
			t.Fatalf("the stream ended with %v, not io.EOF", err)
		}
		if last == nil || last.Cost != 2 {
			t.Fatalf("usage %+v, want a cost of 2", last)
		}
		if used = inner.depth(); used > 0 {
			break
		}
	}
	if used <= 0 {
		t.Fatal("the provider's Next was not called on the stream's goroutine, in 5 tries")
	}
	t.Logf("the router's stream uses %d bytes of stack under the provider's Next (budget %d)", used, nextStackBudget)
	if raceOn {
		return // the race detector's frames are larger: the budget is for real builds
	}
	if used > nextStackBudget {
		t.Fatalf("the router's stream uses %d bytes of stack under the provider's Next, more than %d: a run's stack, once grown, would not shrink to 8 KiB while it streams", used, nextStackBudget)
	}
}

// depthStream is a provider's stream that notes how deep the stack is when Next is called. Only
// the reading goroutine touches it until the stream has ended.
type depthStream struct {
	top     uintptr
	evs     []parley.StreamEvent
	deepest uintptr
}

func (s *depthStream) Next() (parley.StreamEvent, error) {
	sp := stackHere()
	// Only a call on the reading goroutine, under top, counts.
	if sp < s.top && s.top-sp < 1<<20 && (s.deepest == 0 || sp < s.deepest) {
		s.deepest = sp
	}
	if len(s.evs) == 0 {
		return parley.StreamEvent{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func (s *depthStream) Close() error { return nil }

func (s *depthStream) depth() int {
	if s.deepest == 0 {
		return 0
	}
	return int(s.top - s.deepest)
}

// stackHere returns an address in its caller's stack frame, about.
//
//go:noinline
func stackHere() uintptr {
	var x [8]byte
	return uintptr(unsafe.Pointer(&x))
}

// deepen recurses n times with a 1 KiB frame each.
//
//go:noinline
func deepen(n int) int {
	var pad [1024]byte
	pad[n%len(pad)] = 1
	if n == 0 {
		return int(pad[0]) + 1
	}
	return deepen(n-1) + int(pad[n%len(pad)])
}
