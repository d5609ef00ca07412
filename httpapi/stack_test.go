package httpapi_test

import (
	"context"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/internal/stackdepth"
)

// restingStackBudget bounds the stack a streamed chat's handler uses, from the handler chain's
// top to the response's Flush: see TestStreamedChatStackUnderThePump. At rest under net/http
// that is about 1,200 bytes more (net/http's frames under the handler, and the pump's select
// instead of the flush path), and the runtime counts 800 more: under 3,296 + 800 = 4,096, a
// quarter of 16 KiB, leaves about 2,100 here.
const restingStackBudget = 2100

// A streamed chat's handler goroutine spends the whole answer under the server's layers
// (observe, recoverer, cors, the mux, the pipeline) in its pump, and each layer's frame stays on
// its stack all that time. The collector halves a goroutine's stack when it uses less than a
// quarter of it (with 800 bytes the runtime keeps free below the frames), so a handler whose
// stack grew to 32 KiB while it started the chat (on SQLite, leading a group commit runs the
// database's deep code) comes back to 8 KiB only if, at rest, it uses less than 3,296 bytes;
// otherwise it keeps 16 KiB for the whole answer (issue 25: memory per active stream). This
// test calls the handler on a goroutine of its own and measures, in the response's Flush, how
// deep the stack is: the layers, the pump and the flush path (3,320 bytes before observe, cors
// and the pipeline did their work in functions of their own, 1,784 after). Under net/http the
// goroutine also holds net/http's connection frame (1,104 bytes) and its own under the handler,
// and at rest the pump waits in a select (the runtime's frames, ~340 bytes) where here it
// flushes (~300).
func TestStreamedChatStackUnderThePump(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.Heartbeat = time.Hour })
	release := make(chan struct{})
	defer close(release)
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, context.Canceled
	}
	// One measurement: the handler called on a goroutine of its own, stopped after its first
	// flush. It reads 0 if the goroutine's stack was moved meanwhile (its top then points into
	// the old stack): seen under -race now and then, though no collection runs; it is measured
	// again then.
	measure := func() int {
		req, _ := http.NewRequest("POST", "/api/v1/chat/stream", strings.NewReader(`{"message":"Hi"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = "192.0.2.1:1234"
		e.authorize(t, req)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req = req.WithContext(ctx)
		w := &depthWriter{header: http.Header{}, flushed: make(chan struct{})}
		done := make(chan struct{})
		go func() {
			defer close(done)
			stackdepth.Deepen(64) // grows the stack past what the handler needs: it is not moved while it runs
			w.g.Top(stackdepth.Here())
			e.handler.ServeHTTP(w, req)
		}()
		select {
		case <-w.flushed:
		case <-time.After(10 * time.Second):
			t.Fatal("the chat's stream was never flushed")
		}
		cancel()
		<-done
		return w.depth()
	}
	// No collection while the stack is measured: a collection may move it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	used := 0
	for range 5 {
		if used = measure(); used > 0 {
			break
		}
	}
	stackdepth.Within(t, "a streamed chat's handler, under its pump's flush", used, restingStackBudget, raceOn)
}

// depthWriter is a ResponseWriter that notes how deep the stack is when it is flushed.
type depthWriter struct {
	header  http.Header
	g       stackdepth.Gauge
	once    sync.Once
	flushed chan struct{}
}

func (w *depthWriter) Header() http.Header         { return w.header }
func (w *depthWriter) WriteHeader(int)             {}
func (w *depthWriter) Write(p []byte) (int, error) { return len(p), nil }

func (w *depthWriter) Flush() {
	w.g.Note(stackdepth.Here()) // only a flush on the handler's own goroutine counts
	w.once.Do(func() { close(w.flushed) })
}

func (w *depthWriter) depth() int { return w.g.Depth() }
