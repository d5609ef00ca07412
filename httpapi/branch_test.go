package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// waitRun waits, within a generous bound, for the run id to end.
func (e *env) waitRun(t *testing.T, id any) {
	t.Helper()
	run, ok := e.runs.Get(fmt.Sprint(id))
	if !ok {
		t.Fatalf("no run %v", id)
	}
	select {
	case <-run.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %v did not end", id)
	}
}

// texts are the contents of the messages of a GET …/messages answer.
func texts(out map[string]any) string {
	var s []string
	for _, m := range out["messages"].([]any) {
		s = append(s, fmt.Sprint(m.(map[string]any)["content"]))
	}
	return strings.Join(s, " | ")
}

// TestBranchRoutes: edit and regenerate start runs whose messages land on a new branch (and whose
// events carry their parents); GET …/messages follows the active branch or ?leaf=; the tree;
// switching the branch; forking; bad input; 409 while a run is in progress.
func TestBranchRoutes(t *testing.T) { bothStores(t, testBranchRoutes) }

func testBranchRoutes(t *testing.T, e *env) {
	ctx := context.Background()
	for _, q := range []string{"q1", "q2"} {
		if code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"`+q+`","session_id":"`+sessionOf(t, e)+`"}`); code != 200 {
			t.Fatalf("chat %s: %d %v", q, code, out)
		}
	}
	sid := sessionOf(t, e)
	h, _ := e.store.History(ctx, sid)
	if len(h) != 4 {
		t.Fatalf("history %+v", h)
	}
	q1, a1, q2, a2 := h[0], h[1], h[2], h[3]
	base := "/api/v1/sessions/" + sid

	// Edit q2, streamed: the run's messages are on the new branch, and their events say so.
	e.agent.run = answer(e.store, "edited answer")
	req, _ := http.NewRequest("POST", e.url+base+"/messages/"+q2.ID+"/edit", strings.NewReader(`{"message":"q2 edited"}`))
	e.authorize(t, req, "Accept", "text/event-stream", "Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := readEvents(t, resp.Body, func(ev event) bool { return ev.data.Type == parley.EventDone })
	resp.Body.Close()
	var records []*parley.Message
	for _, ev := range evs {
		if ev.data.Type == parley.EventRecord {
			records = append(records, ev.data.Message)
			if !strings.Contains(ev.raw, `"parent_id":"`) {
				t.Fatalf("a record event without parent_id: %s", ev.raw)
			}
		}
	}
	if resp.StatusCode != 200 || len(records) != 2 || records[0].Content.String() != "q2 edited" || records[0].ParentID != a1.ID ||
		records[1].ParentID != records[0].ID {
		t.Fatalf("the edit's stream: %d %+v", resp.StatusCode, records)
	}
	q2e, a2e := records[0], records[1]
	if code, out := e.do(t, "GET", base+"/messages", ""); code != 200 || texts(out) != "q1 | Hello there | q2 edited | edited answer" {
		t.Fatalf("the active branch after the edit: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", base+"/messages?leaf="+a2.ID, ""); code != 200 || texts(out) != "q1 | Hello there | q2 | Hello there" {
		t.Fatalf("the old branch by ?leaf=: %d %v", code, out)
	}
	code, out := e.do(t, "GET", base+"/messages?leaf="+a2.ID+"&limit=3", "")
	if code != 200 || texts(out) != "q1 | Hello there | q2" || out["next_after"] != float64(q2.Seq) {
		t.Fatalf("a page of the old branch: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", base+fmt.Sprintf("/messages?leaf=%s&after=%d", a2.ID, q2.Seq), ""); code != 200 || texts(out) != "Hello there" {
		t.Fatalf("the next page: %d %v", code, out)
	}

	// Regenerate a2e, not streamed: 202, and the run answers q2e again, a sibling of a2e.
	e.agent.run = answer(e.store, "regenerated")
	code, out = e.do(t, "POST", base+"/messages/"+a2e.ID+"/regenerate", "")
	if code != 202 || out["action"] != "regenerate" || out["message_id"] != q2e.ID || out["model"] != "mock" || out["parent_id"] != a1.ID {
		t.Fatalf("regenerate: %d %v", code, out)
	}
	e.waitRun(t, out["run_id"])
	if code, out := e.do(t, "GET", base+"/messages", ""); code != 200 || texts(out) != "q1 | Hello there | q2 edited | regenerated" {
		t.Fatalf("the active branch after regenerating: %d %v", code, out)
	}
	// Edit, not streamed: 202 with the new message.
	e.agent.run = answer(e.store, "root answer")
	code, out = e.do(t, "POST", base+"/messages/"+q1.ID+"/edit", `{"message":"q1 edited"}`)
	if code != 202 || out["action"] != "edit" || out["message_id"] == "" || out["parent_id"] != nil {
		t.Fatalf("edit of the first message: %d %v", code, out)
	}
	e.waitRun(t, out["run_id"])
	if code, out := e.do(t, "GET", base+"/messages", ""); code != 200 || texts(out) != "q1 edited | root answer" {
		t.Fatalf("the active branch after editing the first message: %d %v", code, out)
	}

	// The tree: every message, the active leaf, q2's two versions under a1.
	code, out = e.do(t, "GET", base+"/tree", "")
	nodes, _ := out["nodes"].([]any)
	if code != 200 || len(nodes) != 9 || out["leaf_id"] == "" {
		t.Fatalf("tree: %d %v", code, out)
	}
	children := map[string]int{}
	for _, n := range nodes {
		nm := n.(map[string]any)
		children[nm["parent_id"].(string)]++
		if nm["id"] == "" || nm["role"] == "" || nm["created_at"] == "" {
			t.Fatalf("node %v", nm)
		}
	}
	if children[a1.ID] != 2 || children[q2e.ID] != 2 || children[""] != 2 {
		t.Fatalf("siblings: %v", children)
	}

	// Switch back to q2's branch: the newest leaf under it.
	if code, out := e.do(t, "PUT", base+"/leaf", `{"message_id":"`+q2.ID+`"}`); code != 200 || out["leaf_id"] != a2.ID {
		t.Fatalf("switch: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", base+"/messages", ""); code != 200 || texts(out) != "q1 | Hello there | q2 | Hello there" {
		t.Fatalf("after the switch: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", base, ""); code != 200 || out["leaf_id"] != a2.ID {
		t.Fatalf("the session's leaf: %d %v", code, out)
	}

	// Fork at a1: a new session of alice's with copies of q1 and a1.
	code, out = e.do(t, "POST", base+"/fork", `{"message_id":"`+a1.ID+`"}`)
	fork, _ := out["session"].(map[string]any)
	if code != 201 || fork == nil || fork["id"] == sid || fork["owner"] != "alice" {
		t.Fatalf("fork: %d %v", code, out)
	}
	code, out = e.do(t, "GET", "/api/v1/sessions/"+fork["id"].(string)+"/messages", "")
	if code != 200 || texts(out) != "q1 | Hello there" || strings.Contains(fmt.Sprint(out), q1.ID) {
		t.Fatalf("the fork's messages: %d %v", code, out)
	}

	// Bad input: a reason, nothing changed.
	beforeLeaf, beforeNodes, _ := e.store.Tree(ctx, sid)
	for _, c := range []struct {
		method, path, body string
		status             int
		reason             string
	}{
		{"GET", base + "/messages?leaf=not%20an%20id", "", 400, "leaf"},
		{"GET", base + "/messages?leaf=" + parley.NewID(), "", 404, "not found"},
		{"PUT", base + "/leaf", `{}`, 400, "message_id"},
		{"PUT", base + "/leaf", `{"message_id":"a b"}`, 400, "message_id"},
		{"PUT", base + "/leaf", `{"message_id":"` + parley.NewID() + `"}`, 404, "not found"},
		{"PUT", base + "/leaf", `{"message_id":"` + q1.ID + `","extra":1}`, 400, "extra"},
		{"POST", base + "/fork", `{"message_id":""}`, 400, "message_id"},
		{"POST", base + "/fork", `{"message_id":"` + parley.NewID() + `"}`, 404, "not found"},
		{"POST", base + "/messages/" + a1.ID + "/edit", `{"message":"x"}`, 400, "only a user message"},
		{"POST", base + "/messages/" + q1.ID + "/edit", `{"message":" "}`, 400, "message"},
		{"POST", base + "/messages/" + q1.ID + "/edit", `{"message":"x","session_id":"` + sid + `"}`, 400, "session_id"},
		{"POST", base + "/messages/" + q1.ID + "/edit", `{"message":"x","model":"nope"}`, 400, "model"},
		{"POST", base + "/messages/" + parley.NewID() + "/edit", `{"message":"x"}`, 404, "not found"},
		{"POST", base + "/messages/" + parley.NewID() + "/regenerate", ``, 404, "not found"},
		{"POST", base + "/messages/" + a1.ID + "/regenerate", `{"model":"nope"}`, 400, "model"},
		{"POST", "/api/v1/chat", `{"message":"x","parent_id":"` + a1.ID + `"}`, 400, "parent_id"},
		{"POST", "/api/v1/chat", `{"message":"x","session_id":"` + sid + `","parent_id":"` + parley.NewID() + `"}`, 400, "parent_id"},
	} {
		code, out := e.do(t, c.method, c.path, c.body)
		if code != c.status || !strings.Contains(errMsg(out), c.reason) {
			t.Errorf("%s %s %s: %d %v, want %d with %q", c.method, c.path, c.body, code, out, c.status, c.reason)
		}
	}
	if leaf, nodes, _ := e.store.Tree(ctx, sid); leaf != beforeLeaf || len(nodes) != len(beforeNodes) {
		t.Fatalf("bad requests changed the tree: leaf %q (was %q), %d messages (were %d)", leaf, beforeLeaf, len(nodes), len(beforeNodes))
	}

	// A run in progress: no switch, no edit, no regeneration.
	release := e.blockRuns(t)
	code, out = e.do(t, "POST", base+"/messages/"+q2.ID+"/regenerate", "{}")
	if code != 202 {
		t.Fatalf("regenerate: %d %v", code, out)
	}
	for _, c := range []struct{ method, path, body string }{
		{"PUT", base + "/leaf", `{"message_id":"` + q1.ID + `"}`},
		{"POST", base + "/messages/" + q2.ID + "/edit", `{"message":"x"}`},
		{"POST", base + "/messages/" + a1.ID + "/regenerate", ``},
	} {
		if code, out := e.do(t, c.method, c.path, c.body); code != 409 {
			t.Errorf("%s %s during a run: %d %v, want 409", c.method, c.path, code, out)
		}
	}
	release()
	e.waitRun(t, out["run_id"])
	if code, out := e.do(t, "PUT", base+"/leaf", `{"message_id":"`+q1.ID+`"}`); code != 200 {
		t.Fatalf("switch after the run: %d %v", code, out)
	}
}

// sessionOf returns alice's one session, made on first use.
func sessionOf(t *testing.T, e *env) string {
	t.Helper()
	list, _, err := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) > 0 {
		return list[len(list)-1].ID
	}
	return e.newSession(t, "alice")
}

// TestBranchOverWebSocket: a user_message with parent_id starts a new branch; a regenerate frame
// answers a question again; both answer like the other frames that start a run.
func TestBranchOverWebSocket(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	if code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"q1","session_id":"`+sid+`"}`); code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	h, _ := e.store.History(ctx, sid)
	q1 := h[0]
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	c.send(`{"type":"regenerate","id":"g1","data":{"message_id":"` + h[1].ID + `"}}`)
	f := waitFor(t, c, "control_response")
	if f.ID != "g1" || f.field(t, "action") != "regenerate" || f.field(t, "message_id") != q1.ID {
		t.Fatalf("regenerate response: %s", f.Data)
	}
	c.untilDone()
	c.send(`{"type":"user_message","id":"u1","data":{"text":"q1 again","parent_id":"root"}}`)
	if f := waitFor(t, c, "control_response"); f.ID != "u1" || f.field(t, "action") != "user_message" {
		t.Fatalf("user_message response: %s", f.Data)
	}
	c.untilDone()
	_, nodes, _ := e.store.Tree(ctx, sid)
	roots, answersOfQ1 := 0, 0
	for _, n := range nodes {
		if n.ParentID == "" {
			roots++
		}
		if n.ParentID == q1.ID {
			answersOfQ1++
		}
	}
	if roots != 2 || answersOfQ1 != 2 || len(nodes) != 5 {
		t.Fatalf("tree after the frames: %+v", nodes)
	}
	for _, bad := range []struct{ frame, code string }{
		{`{"type":"regenerate","id":"b1","data":{}}`, "invalid"},
		{`{"type":"regenerate","id":"b2","data":{"message_id":"` + parley.NewID() + `"}}`, "not_found"},
		{`{"type":"regenerate","id":"b3","data":{"message_id":"` + q1.ID + `","session_id":"` + parley.NewID() + `"}}`, "invalid"},
		{`{"type":"user_message","id":"b4","data":{"text":"x","parent_id":"` + parley.NewID() + `"}}`, "invalid"},
	} {
		c.send(bad.frame)
		if f := waitFor(t, c, "error"); f.field(t, "code") != bad.code {
			t.Fatalf("%s: %s, want %s", bad.frame, f.Data, bad.code)
		}
	}
}
