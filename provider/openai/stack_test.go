package openai

import (
	"io"
	"runtime/debug"
	"testing"
	"unsafe"
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
			deepen(64) // grows the stack past what the read needs: it is not moved while it runs
			body.top = stackHere()
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
	if used <= 0 {
		t.Fatal("the body was not read on the stream's goroutine, in 5 tries")
	}
	t.Logf("a stream uses %d bytes of stack under its body's Read (budget %d)", used, streamStackBudget)
	if raceOn {
		return // the race detector's frames are larger: the budget is for real builds
	}
	if used > streamStackBudget {
		t.Fatalf("a stream uses %d bytes of stack under its body's Read, more than %d: a run's stack, once grown, would not shrink to 8 KiB while it streams", used, streamStackBudget)
	}
}

// depthBody is a body read a few bytes at a time that notes how deep the stack is in Read. Only
// the reading goroutine touches it until the stream has ended.
type depthBody struct {
	top     uintptr
	data    []byte
	deepest uintptr
}

func (b *depthBody) Read(p []byte) (int, error) {
	sp := stackHere()
	// Only a read on the stream's goroutine, under top, counts.
	if sp < b.top && b.top-sp < 1<<20 && (b.deepest == 0 || sp < b.deepest) {
		b.deepest = sp
	}
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 16)], b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *depthBody) Close() error { return nil }

func (b *depthBody) depth() int {
	if b.deepest == 0 {
		return 0
	}
	return int(b.top - b.deepest)
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
