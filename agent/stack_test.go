package agent

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/stackdepth"
)

// loopStackBudget is how many bytes of stack the loop may hold under a model stream's Next: Run,
// loop and callModel's frames, and this test's stream (~100 bytes). A run's goroutine waits in
// Next, under the model's read, for a whole streamed answer; its stack comes back to 8 KiB
// after a collection only if it then uses less than 3,296 bytes (a quarter of 16 KiB less the
// 800 the runtime keeps free), of which ~1,400 are net/http's and bufio's read, ~750 the
// provider's stream, ~460 runs' and chat's frames (issue 25: memory per active stream).
// Measured: 2,144 bytes when loop and callModel did all their work in their own frames; 600
// now that nextCall, answered, openModel and took do what comes before and after the read
// (584 read through internal/stackdepth).
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
		s := &stackdepth.Stream{Events: []parley.StreamEvent{{Type: parley.StreamContent, Content: "Hi"}, {Type: parley.StreamFinish, FinishReason: "stop"}}}
		f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){nil}
		a.cfg.Resolve = func(string) (parley.Provider, string, error) { return depthProvider{s}, "m1", nil }
		u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Hi"), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := f.store.AppendMessages(context.Background(), f.sess, u); err != nil {
			t.Fatal(err)
		}
		in := Input{SessionID: f.sess, RunID: parley.NewID()}
		done := make(chan error, 1)
		go func() {
			stackdepth.Deepen(64) // grows the stack past what the run needs: it is not moved while it runs
			s.Top(stackdepth.Here())
			_, err := a.Run(context.Background(), in, func(parley.Event) {})
			done <- err
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if used = s.Depth(); used > 0 {
			break
		}
	}
	stackdepth.Within(t, "the agent's loop, under the model stream's Next", used, loopStackBudget, raceOn)
}

type depthProvider struct{ s *stackdepth.Stream }

func (p depthProvider) Stream(context.Context, *parley.ChatRequest) (parley.Stream, error) {
	return p.s, nil
}
