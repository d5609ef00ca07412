package runs

import (
	"context"
	"runtime/debug"
	"testing"
	"time"
	"unsafe"

	parley "github.com/parleyhq/parley"
)

// runStackBudget is how many bytes of stack a run's goroutine may hold under its body: run's
// and safeCall's frames, and this test's body (~100 bytes). A run waits in its body, under the
// model's read, for a whole streamed answer; its stack comes back to 8 KiB after a collection
// only if it then uses less than 3,296 bytes (a quarter of 16 KiB less the 800 the runtime
// keeps free), of which ~1,400 are net/http's and bufio's read and ~1,500 the provider's, the
// agent's and chat's frames (issue 25: memory per active stream). Measured: 1,000 bytes when
// run did its end in its own frame, 264 now that afterBody does.
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
		var top, deepest uintptr
		go func() {
			deepen(64) // grows the stack past what the run needs: it is not moved while it runs
			top = stackHere()
			r.run(func(ctx context.Context, emit func(parley.Event)) (string, error) {
				deepest = stackHere()
				return parley.FinishStop, nil
			}, r.emit)
		}()
		select {
		case <-r.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the run did not end")
		}
		if deepest < top && top-deepest < 1<<20 {
			used = int(top - deepest)
			break
		}
	}
	if used <= 0 {
		t.Fatal("the body was not called on the run's goroutine, in 5 tries")
	}
	t.Logf("a run uses %d bytes of stack under its body (budget %d)", used, runStackBudget)
	if raceOn {
		return // the race detector's frames are larger: the budget is for real builds
	}
	if used > runStackBudget {
		t.Fatalf("a run uses %d bytes of stack under its body, more than %d: its stack, once grown, would not shrink to 8 KiB while it streams", used, runStackBudget)
	}
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
