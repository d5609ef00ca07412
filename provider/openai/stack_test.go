package openai

import (
	"io"
	"runtime/debug"
	"testing"

	"github.com/parleyhq/parley/internal/stackdepth"
)

// streamStackBudget is how many bytes of stack a Chat Completions stream may hold under its
// body's Read: the stream's Next, its framer, the SSE reader and bufio's Scanner (216 bytes),
// and this test's body (~100). A run's goroutine waits there, under the model's read, for a
// whole streamed answer; its stack comes back to 8 KiB after a collection only if it then uses
// less than 3,296 bytes (a quarter of 16 KiB less the 800 the runtime keeps free), of which
// ~1,200 are net/http's read and ~1,100 the agent's, runs' and chat's frames (issue 25: memory
// per active stream). Measured: 1,248 bytes when the framer and the SSE reader did their
// decoding in the frames that stay under the read; 768 now.
const streamStackBudget = 900

// TestStreamStackUnderTheBodyRead reads a stream on a goroutine of its own and measures, in the
// body's Read, how deep the stack is under Next.
func TestStreamStackUnderTheBodyRead(t *testing.T) {
	// No collection while the stack is measured: a collection may move it.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	used := 0
	for range 5 {
		body := &depthBody{data: []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")}
		s := NewStream(body)
		done := make(chan error, 1)
		go func() {
			stackdepth.Deepen(64) // grows the stack past what the read needs: it is not moved while it runs
			body.g.Top(stackdepth.Here())
			var err error
			for err == nil {
				_, err = s.Next()
			}
			done <- err
		}()
		if err := <-done; err != io.EOF {
			t.Fatalf("the stream ended with %v, not io.EOF", err)
		}
		if used = body.depth(); used > 0 {
			break
		}
	}
	stackdepth.Within(t, "a stream, under its body's Read", used, streamStackBudget, raceOn)
}

// depthBody is a body read a few bytes at a time that notes how deep the stack is in Read. Only
// the reading goroutine touches it until the stream has ended.
type depthBody struct {
	g    stackdepth.Gauge
	data []byte
}

func (b *depthBody) Read(p []byte) (int, error) {
	b.g.Note(stackdepth.Here()) // only a read on the stream's goroutine counts
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 16)], b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *depthBody) Close() error { return nil }

func (b *depthBody) depth() int { return b.g.Depth() }
