package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/tools"
)

// askingModel asks for the tool "wipe" once, then answers "ok".
type askingModel struct {
	mu    sync.Mutex
	calls int
}

func (m *askingModel) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.calls == 1 {
		return &evStream{evs: []parley.StreamEvent{{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{ID: "call_wipe", Name: "wipe", Arguments: `{"what":"disk"}`}}}}, nil
	}
	return &evStream{evs: []parley.StreamEvent{{Type: parley.StreamContent, Content: "ok"}}}, nil
}

type evStream struct{ evs []parley.StreamEvent }

func (s *evStream) Next() (parley.StreamEvent, error) {
	if len(s.evs) == 0 {
		return parley.StreamEvent{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}
func (s *evStream) Close() error { return nil }

// withApprovals makes e's runs real agent loops whose tool "wipe" asks for approval (the
// server's policy), and returns the count of wipes run.
func withApprovals(t *testing.T, e *env) *int {
	t.Helper()
	reg := tools.NewRegistry()
	wiped := new(int)
	var mu sync.Mutex
	if err := reg.Register(&tools.Func{
		Def: parley.ToolSpec{Name: "wipe", Description: "Wipes.", Parameters: json.RawMessage(`{"type":"object","properties":{"what":{"type":"string"}}}`)},
		Fn: func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
			mu.Lock()
			*wiped++
			mu.Unlock()
			return &parley.ToolResult{Content: parley.Text("wiped")}, nil
		},
	}); err != nil {
		t.Fatal(err)
	}
	policy, _ := approval.Parse("wipe=ask")
	ag := agent.New(agent.Config{Store: e.store, Tools: reg, Approvals: &approval.Resolver{Server: policy, Store: e.store},
		Resolve: func(string) (parley.Provider, string, error) { return &askingModel{}, "m", nil }})
	e.agent.run = ag.Run
	return wiped
}

// waitPending waits until the session has n pending approvals.
func waitPending(t *testing.T, e *env, session string, n int) []parley.ApprovalRecord {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := e.store.ListApprovals(context.Background(), session, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == n {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pending approvals, want %d", len(list), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestApprovalOnlyOwner: bob can neither see nor answer the call waiting in alice's session, over
// HTTP or the WebSocket; the call stays pending, and alice's answer then runs it.
func TestApprovalOnlyOwner(t *testing.T) {
	e := newEnv(t, nil)
	wiped := withApprovals(t, e)
	sid := e.newSession(t, "alice")
	// The batch chat answers when the run ends: after alice's approval, below.
	chatDone := make(chan int, 1)
	go func() {
		code, _ := e.do(t, "POST", "/api/v1/chat", `{"message":"wipe it","session_id":"`+sid+`"}`)
		chatDone <- code
	}()
	waitPending(t, e, sid, 1)
	if code, _ := e.do(t, "POST", "/api/v1/sessions/"+sid+"/approvals/call_wipe", `{"decision":"approve"}`, "X-Test-User", "bob"); code != 403 {
		t.Fatalf("bob answers: %d, want 403", code)
	}
	if code, _ := e.do(t, "GET", "/api/v1/sessions/"+sid+"/approvals", "", "X-Test-User", "bob"); code != 403 {
		t.Fatalf("bob lists: %d, want 403", code)
	}
	bob := e.ws(t, "bob", "")
	bob.expect("status", "")
	bob.send(`{"type":"approval","id":"b1","data":{"session_id":"` + sid + `","call_id":"call_wipe","decision":"always"}}`)
	f := bob.expect("error", "b1")
	if errorCode(t, f) != parley.ECForbidden {
		t.Fatalf("bob's approval frame: %s", f.Data)
	}
	if list := waitPending(t, e, sid, 1); list[0].CallID != "call_wipe" || *wiped != 0 {
		t.Fatalf("after bob: %+v, wiped %d", list, *wiped)
	}
	code, out := e.do(t, "GET", "/api/v1/sessions/"+sid+"/approvals", "")
	if l, _ := out["approvals"].([]any); code != 200 || len(l) != 1 || l[0].(map[string]any)["call_id"] != "call_wipe" {
		t.Fatalf("alice lists: %d %v", code, out)
	}
	code, out = e.do(t, "POST", "/api/v1/sessions/"+sid+"/approvals/call_wipe", `{"decision":"approve","reason":"why not"}`)
	if code != 400 {
		t.Fatalf("a reason with approve: %d %v", code, out)
	}
	code, out = e.do(t, "POST", "/api/v1/sessions/"+sid+"/approvals/call_wipe", `{"decision":"approve","arguments":{"bad":1}}`)
	if code != 400 {
		t.Fatalf("arguments the schema refuses: %d %v", code, out)
	}
	waitPending(t, e, sid, 1)
	code, out = e.do(t, "POST", "/api/v1/sessions/"+sid+"/approvals/call_wipe", `{"decision":"approve"}`)
	if code != 200 || out["approval"].(map[string]any)["decision"] != "approved" {
		t.Fatalf("alice approves: %d %v", code, out)
	}
	if code := <-chatDone; code != 200 {
		t.Fatalf("chat: %d", code)
	}
	if *wiped != 1 {
		t.Fatalf("wiped %d times", *wiped)
	}
}

// waitIdleRun waits until the session has no active run.
func waitIdleRun(t *testing.T, e *env, sid string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := e.runs.Active(sid); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestApprovalTwoClients: two WebSockets on one session see the same approval_required (same
// seq, same bytes) and the status awaiting_approval; one answers with an approval frame, and both
// see the same approval_resolved, then the run's end.
func TestApprovalTwoClients(t *testing.T) {
	e := newEnv(t, nil)
	withApprovals(t, e)
	sid := e.newSession(t, "alice")
	c1 := e.ws(t, "alice", "?convId="+sid)
	c2 := e.ws(t, "alice", "?convId="+sid)
	c1.expect("status", "")
	c2.expect("status", "")
	c1.send(`{"type":"user_message","id":"m1","data":{"text":"wipe the disk"}}`)
	r1, r2 := waitFor(t, c1, "approval_required"), waitFor(t, c2, "approval_required")
	if r1.Seq != r2.Seq || string(r1.Data) != string(r2.Data) {
		t.Fatalf("approval_required differs: %d %s / %d %s", r1.Seq, r1.Data, r2.Seq, r2.Data)
	}
	ev := r1.event(t)
	if a := ev.Approval; a == nil || a.CallID != "call_wipe" || a.Tool != "wipe" || a.Arguments != `{"what":"disk"}` || a.Reason == "" || a.ExpiresAt == nil {
		t.Fatalf("approval_required: %s", r1.Data)
	}
	for _, c := range []*wsClient{c1, c2} {
		if st := waitFor(t, c, "status").event(t); st.State != parley.RunAwaitingApproval {
			t.Fatalf("status: %+v", st)
		}
	}
	c2.send(`{"type":"approval","id":"a1","data":{"call_id":"call_wipe","decision":"deny","reason":"not the disk"}}`)
	// The answer to the frame and the run's approval_resolved reach c2 in either order: the
	// run may emit the event before the handler writes its reply.
	var resp, s2 frame
	for resp.Type == "" || s2.Type == "" {
		switch f := c2.read(); f.Type {
		case "control_response":
			resp = f
		case "approval_resolved":
			s2 = f
		}
	}
	var out struct {
		Action   string          `json:"action"`
		Approval parley.Approval `json:"approval"`
	}
	if err := json.Unmarshal(resp.Data, &out); err != nil || resp.ID != "a1" || out.Action != "approval" || out.Approval.Decision != parley.ApprovalDenied {
		t.Fatalf("control_response: %s %v", resp.Data, err)
	}
	s1 := waitFor(t, c1, "approval_resolved")
	if s1.Seq != s2.Seq || string(s1.Data) != string(s2.Data) {
		t.Fatalf("approval_resolved differs: %s / %s", s1.Data, s2.Data)
	}
	if a := s1.event(t).Approval; a.Decision != parley.ApprovalDenied || a.Reason != "not the disk" || a.CallID != "call_wipe" {
		t.Fatalf("approval_resolved: %s", s1.Data)
	}
	for _, c := range []*wsClient{c1, c2} {
		for {
			f := waitFor(t, c, "status")
			if ev := f.event(t); ev.Type == parley.EventDone {
				if ev.FinishReason != parley.FinishStop {
					t.Fatalf("done: %s", f.Data)
				}
				break
			}
		}
	}
	// The same frame written flat (its fields beside "type") is read too: here a conflict.
	c1.send(`{"type":"approval","id":"a3","session_id":"` + sid + `","call_id":"call_wipe","decision":"approve"}`)
	if f := c1.expect("error", "a3"); errorCode(t, f) != parley.ECConflict {
		t.Fatalf("flat frame: %s", f.Data)
	}
	// Answering again is a conflict, as an error frame.
	c1.send(`{"type":"approval","id":"a2","data":{"call_id":"call_wipe","decision":"approve"}}`)
	if f := c1.expect("error", "a2"); errorCode(t, f) != parley.ECConflict {
		t.Fatalf("second answer: %s", f.Data)
	}
}

// errorCode is the code of an error frame.
func errorCode(t *testing.T, f frame) parley.ErrorCode {
	t.Helper()
	var b parley.ErrorBody
	if err := json.Unmarshal(f.Data, &b); err != nil {
		t.Fatalf("error frame %s: %v", f.Data, err)
	}
	return b.Code
}

// A project's tool_policy is set, checked and cleared through the projects routes.
func TestProjectToolPolicyRoutes(t *testing.T) {
	e := newEnv(t, nil)
	code, out := e.do(t, "POST", "/api/v1/projects", `{"name":"ops","tool_policy":{"mcp_fs_*":"sometimes"}}`)
	if e, _ := out["error"].(map[string]any); code != 400 || e == nil || !strings.Contains(e["message"].(string), "tool_policy") {
		t.Fatalf("bad mode: %d %v", code, out)
	}
	code, out = e.do(t, "POST", "/api/v1/projects", `{"name":"ops","tool_policy":{"mcp_fs_*":"ask","mcp_fs_read*":"auto"}}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["id"].(string)
	if p, _ := out["tool_policy"].(map[string]any); p["mcp_fs_*"] != "ask" || p["mcp_fs_read*"] != "auto" {
		t.Fatalf("created: %v", out)
	}
	if code, out := e.do(t, "PATCH", "/api/v1/projects/"+id, `{"tool_policy":{"[":"ask"}}`); code != 400 {
		t.Fatalf("bad pattern: %d %v", code, out)
	}
	code, out = e.do(t, "PATCH", "/api/v1/projects/"+id, `{"tool_policy":{}}`)
	if _, has := out["tool_policy"]; code != 200 || has {
		t.Fatalf("cleared: %d %v", code, out)
	}
	code, out = e.do(t, "PATCH", "/api/v1/projects/"+id, `{"tool_policy":{"calculator":"deny"}}`)
	if p, _ := out["tool_policy"].(map[string]any); code != 200 || p["calculator"] != "deny" || out["name"] != "ops" {
		t.Fatalf("patched: %d %v", code, out)
	}
}
