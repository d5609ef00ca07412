package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/httpapi"
)

// slowBody starts a request whose body declares length bytes but sends only what the test writes
// to the returned writer; the response arrives on the channel.
func (e *env) slowBody(t *testing.T, method, path string, length int64, hdr ...string) (io.WriteCloser, <-chan *http.Response) {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(method, e.url+path, pr)
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	out := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- nil
			return
		}
		out <- resp
	}()
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	return pw, out
}

func await(t *testing.T, ch <-chan *http.Response, what string) *http.Response {
	t.Helper()
	select {
	case resp := <-ch:
		if resp == nil {
			t.Fatalf("%s: no response", what)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer in 20s", what)
		return nil
	}
}

// Issue 18 §1: no body is read before the caller is known, and the bytes being read and decoded
// at once are bounded server-wide. Small bounds: a budget of one 4 KiB body.
func TestBodyBudget(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) {
		d.MaxBodyBytes = 4096
		d.BodyBudget = 4096
		d.BodyWait = 200 * time.Millisecond
		d.BodyTimeout = time.Minute
	})
	alice := "Bearer " + e.key(t, "alice")

	// A keyless request that declares a body and never sends it is answered at once: its body is
	// not read (reading it would wait for the body time limit of a minute).
	_, anon := e.slowBody(t, "POST", "/api/v1/chat", 4000)
	if resp := await(t, anon, "keyless request"); resp.StatusCode != 401 {
		t.Fatalf("keyless request with an unsent body: %d, want 401", resp.StatusCode)
	}
	// A declared length over the limit is refused unread.
	_, big := e.slowBody(t, "POST", "/api/v1/chat", 5000, "Authorization", alice)
	if resp := await(t, big, "oversized request"); resp.StatusCode != 400 {
		t.Fatalf("declared 5000 bytes: %d, want 400", resp.StatusCode)
	}

	// Alice's slow 4096-byte body holds the whole budget while it arrives.
	w, first := e.slowBody(t, "POST", "/api/v1/sessions", 4096, "Authorization", alice)
	body := `{"title":"` + strings.Repeat("t", 100) + `"}`
	body += strings.Repeat(" ", 4096-len(body))
	io.WriteString(w, body[:10])
	// Meanwhile another body waits for its share, up to BodyWait, then gets 503 + Retry-After.
	// (Until the server has started reading the first body, the second may still get through.)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, out := e.raw(t, "POST", "/api/v1/sessions", `{"title":"b"}`, "Authorization", alice, "Content-Type", "application/json")
		if resp.StatusCode == 503 {
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(out, "busy reading other requests") {
				t.Fatalf("503 without Retry-After or reason: %v %s", resp.Header, out)
			}
			break
		}
		if resp.StatusCode != 201 || time.Now().After(deadline) {
			t.Fatalf("second body while the budget is held: %d %s", resp.StatusCode, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A keyless request is refused (401) however full the budget: it never waits for it.
	if resp, _ := e.raw(t, "POST", "/api/v1/chat", `{"message":"hi"}`, "Content-Type", "application/json"); resp.StatusCode != 401 {
		t.Fatalf("keyless request while the budget is held: %d", resp.StatusCode)
	}
	// The first body completes; its share is given back and the next body is read.
	io.WriteString(w, body[10:])
	w.Close()
	if resp := await(t, first, "slow body"); resp.StatusCode != 201 {
		t.Fatalf("slow body: %d", resp.StatusCode)
	}
	if resp, out := e.raw(t, "POST", "/api/v1/sessions", `{"title":"c"}`, "Authorization", alice, "Content-Type", "application/json"); resp.StatusCode != 201 {
		t.Fatalf("after the budget is free: %d %s", resp.StatusCode, out)
	}
}

// Issue 18 §5: a body has a time limit; the streams that follow a body are not cut by it.
func TestBodyTimeout(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.BodyTimeout = 300 * time.Millisecond })
	alice := "Bearer " + e.key(t, "alice")
	w, slow := e.slowBody(t, "POST", "/api/v1/sessions", 100, "Authorization", alice)
	io.WriteString(w, `{"title":`)
	resp := await(t, slow, "slow body")
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != 400 || !strings.Contains(errMsg(out), "not received within 300ms") {
		t.Fatalf("slow body: %d %v", resp.StatusCode, out)
	}
	if list, _, _ := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 10}); len(list) != 0 {
		t.Fatalf("a session was created from a body that never arrived: %v", list)
	}

	// A chat whose run takes longer than the body time limit streams to its end, and a batch chat
	// gets its answer: the deadline ended with the body.
	release := e.blockRuns(t)
	streamDone := make(chan []event, 1)
	sresp := e.stream(t, context.Background(), `{"message":"slow"}`)
	go func() {
		defer sresp.Body.Close()
		evs, _ := readEvents(t, sresp.Body, func(ev event) bool { return ev.name == "done" })
		streamDone <- evs
	}()
	time.Sleep(3 * 300 * time.Millisecond) // past the body deadline, on purpose
	release()
	select {
	case evs := <-streamDone:
		if len(evs) == 0 || evs[len(evs)-1].name != "done" {
			t.Fatalf("stream ended without done: %+v", evs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("stream did not end")
	}
	e.agent.run = answer(e.store, "done")
	code, res := e.do(t, "POST", "/api/v1/chat", `{"message":"batch"}`)
	if code != 200 || res["response"] != "done" {
		t.Fatalf("batch chat: %d %v", code, res)
	}
}

// Issue 18 §1: a large WebSocket frame takes a share of the same body budget as a request body;
// without one it is dropped with an unavailable error, and the connection goes on.
func TestWebSocketFramesShareTheBodyBudget(t *testing.T) {
	const limit = 256 << 10
	e := newEnv(t, func(d *httpapi.Deps) {
		d.MaxBodyBytes = limit
		d.BodyBudget = limit
		d.BodyWait = 200 * time.Millisecond
		d.BodyTimeout = time.Minute
	})
	alice := "Bearer " + e.key(t, "alice")
	sid := e.newSession(t, "alice")
	ws := e.ws(t, "alice", "?convId="+sid)
	ws.expect("status", "")
	big := `{"type":"user_message","id":"big","data":{"text":"` + strings.Repeat("x", 100<<10) + `"}}`

	// A slow request body holds the whole budget.
	w, first := e.slowBody(t, "POST", "/api/v1/sessions", limit, "Authorization", alice)
	body := `{"title":"slow"}` + strings.Repeat(" ", limit-len(`{"title":"slow"}`))
	io.WriteString(w, body[:10])
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, out := e.raw(t, "POST", "/api/v1/sessions", `{"title":"b"}`, "Authorization", alice, "Content-Type", "application/json")
		if resp.StatusCode == 503 {
			break
		}
		if resp.StatusCode != 201 || time.Now().After(deadline) {
			t.Fatalf("second body while the budget is held: %d %s", resp.StatusCode, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ws.send(big)
	if f := ws.expect("error", ""); f.field(t, "code") != "unavailable" {
		t.Fatalf("large frame without budget: %s", f.Data)
	}
	ws.send(`{"type":"ping","id":"p"}`) // small frames need no share; the connection is in step
	ws.expect("pong", "p")

	io.WriteString(w, body[10:])
	w.Close()
	if resp := await(t, first, "slow body"); resp.StatusCode != 201 {
		t.Fatalf("slow body: %d", resp.StatusCode)
	}
	// With the budget free, the frame is read and decoded (and refused for its length).
	ws.send(big)
	if f := ws.expect("error", "big"); f.field(t, "code") != "invalid" {
		t.Fatalf("large frame with budget: %s", f.Data)
	}
}
