package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/parleyhq/parley/httpapi"
)

// A session's SSE stream is detached from its handler: its response is still chunked and ends
// with the stream (Connection: close), it carries the run's events, and when its client leaves,
// its slot of the user's streams comes free.
func TestDetachedSSEStream(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.MaxStreamsPerUser = 1 })
	sid := e.newSession(t, "alice")
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream?until=done")
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || !resp.Close {
		t.Fatalf("transfer encoding %v, close %v; want chunked and close", resp.TransferEncoding, resp.Close)
	}
	if code, body := e.do(t, "POST", "/api/v1/chat", `{"message":"hi","session_id":"`+sid+`"}`, "Authorization", "Bearer "+e.key(t, "alice")); code != 200 {
		t.Fatalf("chat: %d %v", code, body)
	}
	evs, _ := readEvents(t, resp.Body, nil) // until the stream ends, after done
	resp.Body.Close()
	if len(evs) < 2 || evs[0].name != "start" || evs[len(evs)-1].name != "done" {
		t.Fatalf("the stream carried %d events, want start … done", len(evs))
	}
	// Open, then left by its client: the next stream gets the slot.
	held, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
	held.Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest("GET", e.url+"/api/v1/sessions/"+sid+"/stream", nil)
		req.Header.Set("Authorization", "Bearer "+e.key(t, "alice"))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode == 200 {
			break
		}
		if r.StatusCode != 429 || time.Now().After(deadline) {
			t.Fatalf("after the client left: %d, want the slot back", r.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// At shutdown a detached SSE stream ends (its chunked response complete).
func TestDetachedSSEStreamEndsAtShutdown(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
	defer resp.Body.Close()
	e.shutdown()
	done := make(chan struct{})
	go func() {
		defer close(done)
		readEvents(t, resp.Body, nil)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream is still open after shutdown")
	}
}
