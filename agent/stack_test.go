package agent

import (
	"context"
	"io"
	"runtime/debug"
	"sync"
	"testing"
	"time"
	"unsafe"

	parley "github.com/parleyhq/parley"
)

// loopStackBudget is how many bytes of stack the loop may hold under a model stream's Next: Run,
// loop and callModel's frames, and this test's stream (~100 bytes). A run's goroutine waits in
// Next, under the model's read, for a whole streamed answer; its stack comes back to 8 KiB
// after a collection only if it then uses less than 3,296 bytes (a quarter of 16 KiB less the
// 800 the runtime keeps free), of which ~1,400 are net/http's and bufio's read, ~750 the
// provider's stream, ~460 runs' and chat's frames (issue 25: memory per active stream).
// Measured: 2,144 bytes when loop and callModel did all their work in their own frames; 600
// now that nextCall, answered, openModel and took do what comes before and after the read.
const loopStackBudget = 700

// TestLoopStackUnderTheModelRead runs the agent on a goroutine of its own and measures, in the
// model stream's Next, how deep the stack is under Run.
func TestLoopStackUnderTheModelRead(t *testing.T) {
	f := newFixture(t)
	a := f.agent(nil)
	// No collection while the stack is measured: a collection may move it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	used := 0
	for range 5 {
		s := &depthStream{evs: []parley.StreamEvent{{Type: parley.StreamContent, Content: "Hi"}, {Type: parley.StreamFinish, FinishReason: "stop"}}}
		f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){nil}
		a.cfg.Resolve = func(string) (parley.Provider, string, error) { return depthProvider{s}, "m1", nil }
		u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Hi"), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := f.store.AppendMessages(context.Background(), f.sess, u); err != nil {
			t.Fatal(err)
		}
		in := Input{SessionID: f.sess, RunID: parley.NewID()}
		done := make(chan error, 1)
		go func() {
			deepen(64) // grows the stack past what the run needs: it is not moved while it runs
			s.top = stackHere()
			_, err := a.Run(context.Background(), in, func(parley.Event) {})
			done <- err
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if used = s.depth(); used > 0 {
			break
		}
	}
	if used <= 0 {
		t.Fatal("the model stream's Next was not called on the run's goroutine, in 5 tries")
	}
	t.Logf("the agent's loop uses %d bytes of stack under the model stream's Next (budget %d)", used, loopStackBudget)
	if raceOn {
		return // the race detector's frames are larger: the budget is for real builds
	}
	if used > loopStackBudget {
		t.Fatalf("the agent's loop uses %d bytes of stack under the model stream's Next, more than %d: a run's stack, once grown, would not shrink to 8 KiB while it streams", used, loopStackBudget)
	}
}

type depthProvider struct{ s *depthStream }

func (p depthProvider) Stream(context.Context, *parley.ChatRequest) (parley.Stream, error) {
	return p.s, nil
}

// depthStream is a model stream that notes how deep the stack is when Next is called.
type depthStream struct {
	top uintptr
	evs []parley.StreamEvent

	mu      sync.Mutex
	deepest uintptr
}

func (s *depthStream) Next() (parley.StreamEvent, error) {
	sp := stackHere()
	s.mu.Lock()
	// Only a call on the run's own goroutine, under top, counts.
	if sp < s.top && s.top-sp < 1<<20 && (s.deepest == 0 || sp < s.deepest) {
		s.deepest = sp
	}
	s.mu.Unlock()
	if len(s.evs) == 0 {
		return parley.StreamEvent{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func (s *depthStream) Close() error { return nil }

func (s *depthStream) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
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
