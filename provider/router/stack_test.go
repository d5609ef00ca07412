package router

import (
	"context"
	"io"
	"runtime/debug"
	"testing"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/stackdepth"
)

// nextStackBudget is how many bytes of stack the router's stream may hold under the provider's
// Next: its own Next's frame, and this test's stream (~100 bytes). A run's goroutine waits
// there, under the model's read, for a whole streamed answer; its stack comes back to 8 KiB
// after a collection only if it then uses less than 3,296 bytes (a quarter of 16 KiB less the
// 800 the runtime keeps free; issue 25: memory per active stream). Measured: 408 bytes when
// Next kept its copies of the event and priced the usage in its own frame; 320 now (336
// read through internal/stackdepth).
const nextStackBudget = 380

// TestNextStackUnderTheProvidersNext calls the router's stream on a goroutine of its own and
// measures, in the provider's Next, how deep the stack is under the router's.
func TestNextStackUnderTheProvidersNext(t *testing.T) {
	// No collection while the stack is measured: a collection may move it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	used := 0
	for range 5 {
		inner := &stackdepth.Stream{Events: []parley.StreamEvent{{Type: parley.StreamContent, Content: "Hi"},
			{Type: parley.StreamUsage, Usage: &parley.Usage{PromptTokens: 1_000_000}}}}
		s := &stream{Stream: inner, ctx: context.Background(), model: "up/m", price: Price{Input: 2}, priced: true}
		var last *parley.Usage
		done := make(chan error, 1)
		go func() {
			stackdepth.Deepen(64) // grows the stack past what the read needs: it is not moved while it runs
			inner.Top(stackdepth.Here())
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
		if used = inner.Depth(); used > 0 {
			break
		}
	}
	stackdepth.Within(t, "the router's stream, under the provider's Next", used, nextStackBudget, raceOn)
}
