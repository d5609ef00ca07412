package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
)

// failTurn stores a failed turn in session sid as a run whose model call failed leaves it: the
// user's question, then what was streamed, marked with the error's code.
func failTurn(t *testing.T, e *env, sid, question string) *parley.Message {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(question), RunID: "r0", CreatedAt: now}
	f := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("The ans"), RunID: "r0",
		Model: "mock", Error: parley.ECUpstream, CreatedAt: now}
	if err := e.store.AppendMessages(context.Background(), sid, u, f); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestRetryOverHTTPAndWebSocket: a failed last turn is answered again by a new run, over REST and
// over a WebSocket control frame, with the run pipeline's checks; 409 when the last turn did not
// fail or a run is active.
func TestRetryOverHTTPAndWebSocket(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var inputs []agent.Input
	answerFn := answer(e.store, "Hello there")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		mu.Lock()
		inputs = append(inputs, in)
		mu.Unlock()
		return answerFn(ctx, in, emit)
	}
	sid := e.newSession(t, "alice")

	// Nothing failed yet: nothing to retry.
	if code, out := e.do(t, "POST", "/api/v1/sessions/"+sid+"/retry", ""); code != 409 || !strings.Contains(errMsg(out), "did not fail") {
		t.Fatalf("retry of an empty session: %d %v", code, out)
	}
	u := failTurn(t, e, sid, "Q1")
	// Another user's session is not theirs to retry.
	if code, _ := e.do(t, "POST", "/api/v1/sessions/"+sid+"/retry", "", "X-Test-User", "bob"); code != 403 {
		t.Fatalf("bob retried alice's turn: %d", code)
	}
	if code, out := e.do(t, "POST", "/api/v1/sessions/"+sid+"/retry", `{"model":"other"}`); code != 400 {
		t.Fatalf("retry with an unknown model: %d %v", code, out)
	}
	// Over REST, streamed.
	req, _ := http.NewRequest("POST", e.url+"/api/v1/sessions/"+sid+"/retry", nil)
	e.authorize(t, req, "Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("streamed retry: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs, _ := readEvents(t, resp.Body, func(ev event) bool { return ev.data.Type == parley.EventDone })
	resp.Body.Close()
	if len(evs) == 0 || evs[0].data.Type != parley.EventStart || evs[len(evs)-1].data.FinishReason != parley.FinishStop {
		t.Fatalf("retry stream: %+v", evs)
	}
	mu.Lock()
	if len(inputs) != 1 || inputs[0].SessionID != sid || inputs[0].Model != "mock" {
		t.Fatalf("agent inputs %+v", inputs)
	}
	mu.Unlock()
	msgs, _ := e.store.History(context.Background(), sid)
	if len(msgs) != 3 || msgs[0].ID != u.ID || !msgs[1].Failed() || msgs[2].Content.String() != "Hello there" {
		t.Fatalf("history after the retry: %+v", msgs)
	}
	// Answered now: no second retry.
	if code, _ := e.do(t, "POST", "/api/v1/sessions/"+sid+"/retry", ""); code != 409 {
		t.Fatalf("second retry: %d", code)
	}

	// Over the WebSocket.
	u2 := failTurn(t, e, sid, "Q2")
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	c.send(`{"type":"control","id":"r1","data":{"action":"retry"}}`)
	f := waitFor(t, c, "control_response")
	if f.ID != "r1" || f.field(t, "action") != "retry" || f.field(t, "message_id") != u2.ID || f.field(t, "run_id") == "" {
		t.Fatalf("retry control response: %s", f.Data)
	}
	wsEvs, _ := c.untilDone()
	if last := wsEvs[len(wsEvs)-1].event(t); last.FinishReason != parley.FinishStop {
		t.Fatalf("retry over WebSocket ended %s", wsEvs[len(wsEvs)-1].Data)
	}
	c.send(`{"type":"control","id":"r2","data":{"action":"retry"}}`)
	if f := waitFor(t, c, "error"); f.ID != "r2" || f.field(t, "code") != "conflict" {
		t.Fatalf("retry of an answered turn over WebSocket: %s", f.Data)
	}

	// A run is active: 409, and the run is left alone.
	failTurn(t, e, sid, "Q3")
	step := make(chan struct{})
	stepAgent(e, step)
	c.send(`{"type":"control","id":"r3","data":{"action":"retry"}}`)
	waitFor(t, c, "llm_chunk")
	if code, out := e.do(t, "POST", "/api/v1/sessions/"+sid+"/retry", ""); code != 409 || !strings.Contains(errMsg(out), "already active") {
		t.Fatalf("retry during a run: %d %v", code, out)
	}
	close(step)
	c.untilDone()
	if msgs, _ := e.store.History(context.Background(), sid); msgs[len(msgs)-1].Content.String() != "onetwo" {
		t.Fatalf("the retried turn's answer: %+v", msgs[len(msgs)-1])
	}

	// Over REST without streaming: 202 with the run, whose events the session's stream carries.
	u4 := failTurn(t, e, sid, "Q4")
	code, out := e.do(t, "POST", "/api/v1/sessions/"+sid+"/retry", "{}")
	if code != 202 || out["action"] != "retry" || out["message_id"] != u4.ID || out["run_id"] == "" || out["model"] != "mock" {
		t.Fatalf("retry: %d %v", code, out)
	}
	restEvs, _ := c.untilDone()
	if ev := restEvs[len(restEvs)-1].event(t); ev.RunID != out["run_id"] || ev.FinishReason != parley.FinishStop {
		t.Fatalf("the retry's run: %s", restEvs[len(restEvs)-1].Data)
	}
}
