package httpapi_test

import (
	"bufio"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/httpapi"
)

// serverGoroutines counts the goroutines running code of package httpapi (this test's own
// clients run none), apart from the one that watches idle connections (idlePoller.loop).
func serverGoroutines() (n int, poller bool) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "httpapi.(*idlePoller).loop"):
			poller = true
		case strings.Contains(g, "parley/httpapi."):
			n++
		}
	}
	return n, poller
}

// waitGoroutines waits until at most max server goroutines are left (as well as the poller's,
// if poller), and fails if that takes more than 20 seconds.
func waitGoroutines(t *testing.T, max int, poller bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, p := serverGoroutines()
		if n <= max && p == poller {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d server goroutines (poller %v), want at most %d (poller %v)", n, p, max, poller)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Idle SSE streams hold no goroutine of the server's: not their handler's, not their pump's
// (parked), not one reading the connection (the idle poller watches it). They still get a run's
// events, and once their clients leave nothing of theirs is left, the poller's goroutine
// included.
func TestIdleSSEStreamsHoldNoGoroutine(t *testing.T) {
	const n = 40
	e := newEnv(t, func(d *httpapi.Deps) { d.MaxStreamsPerUser = n + 1; d.Heartbeat = time.Hour })
	sid := e.newSession(t, "alice")
	var resps []*http.Response
	for range n {
		resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
		defer resp.Body.Close()
		resps = append(resps, resp)
	}
	// Each would hold at least one goroutine if the connections were read by goroutines.
	waitGoroutines(t, 2, true)

	if code, body := e.do(t, "POST", "/api/v1/chat", `{"message":"hi","session_id":"`+sid+`"}`, "Authorization", "Bearer "+e.key(t, "alice")); code != 200 {
		t.Fatalf("chat: %d %v", code, body)
	}
	var wg sync.WaitGroup
	got := make([][]event, n)
	for i, resp := range resps {
		wg.Go(func() { got[i], _ = readEvents(t, resp.Body, func(ev event) bool { return ev.name == "done" }) })
	}
	wg.Wait()
	for i, evs := range got {
		if len(evs) < 2 || evs[0].name != "start" || evs[len(evs)-1].name != "done" {
			t.Fatalf("stream %d carried %d events, want start … done", i, len(evs))
		}
	}
	waitGoroutines(t, 2, true) // parked again

	for _, resp := range resps {
		resp.Body.Close()
	}
	waitGoroutines(t, 0, false)
}

// An idle SSE stream whose connection is watched by the poller gets its heartbeats.
func TestIdleSSEStreamHeartbeats(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.Heartbeat = 1500 * time.Millisecond })
	sid := e.newSession(t, "alice")
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	pings := 0
	for pings < 2 && sc.Scan() {
		if sc.Text() == ": ping" {
			pings++
		}
	}
	if pings < 2 {
		t.Fatalf("the stream ended after %d pings: %v", pings, sc.Err())
	}
}
