package runs

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/stackdepth"
)

// runStackBudget is how many bytes of stack a run's goroutine may hold under its body: run's
// and safeCall's frames, and this test's body (~100 bytes). A run waits in its body, under the
// model's read, for a whole streamed answer; its stack comes back to 8 KiB after a collection
// only if it then uses less than 3,296 bytes (a quarter of 16 KiB less the 800 the runtime
// keeps free), of which ~1,400 are net/http's and bufio's read and ~1,500 the provider's, the
// agent's and chat's frames (issue 25: memory per active stream). Measured: 1,000 bytes when
// run did its end in its own frame, 264 now that afterBody does (280 read through
// internal/stackdepth, whose gauge the body calls).
const runStackBudget = 500

// TestRunStackUnderTheBody runs a run's goroutine function on a goroutine of the test's and
// measures, in the body, how deep the stack is under run. (Go does what this test does, on a
// goroutine of its own.)
func TestRunStackUnderTheBody(t *testing.T) {
	// No collection while the stack is measured: a collection may move it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	m := NewManager(Options{})
	used := 0
	for i := range 5 {
		r, err := m.Begin(context.Background(), Spec{Session: "s" + string(rune('a'+i)), Model: "mock"})
		if err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		r.started = true
		m.wg.Add(1)
		m.mu.Unlock()
		r.announce()
		var g stackdepth.Gauge
		go func() {
			stackdepth.Deepen(64) // grows the stack past what the run needs: it is not moved while it runs
			g.Top(stackdepth.Here())
			r.run(func(ctx context.Context, emit func(parley.Event)) (string, error) {
				g.Note(stackdepth.Here())
				return parley.FinishStop, nil
			}, r.emit)
		}()
		select {
		case <-r.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the run did not end")
		}
		if used = g.Depth(); used > 0 {
			break
		}
	}
	stackdepth.Within(t, "a run, under its body", used, runStackBudget, raceOn)
}
