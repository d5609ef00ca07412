package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/redistest"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// Tool approval (issue 23), end to end on real server processes: the mcptest server's erase tool
// is marked destructive (destructiveHint), so its calls wait for the session owner's approval.

func eraseCall(id, key string) parley.ToolCall {
	return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: "t__erase", Arguments: `{"key":"` + key + `"}`}}
}

// answerApproval posts a decision and returns the status and the decoded answer.
func answerApproval(t *testing.T, url, session, call, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/api/v1/sessions/"+session+"/approvals/"+call, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("approval answer %d: not JSON: %q", resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// pendingApprovals lists the session's pending approvals.
func pendingApprovals(t *testing.T, url, session string) []parley.Approval {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/sessions/" + session + "/approvals")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Approvals []parley.Approval `json:"approvals"`
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET approvals: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Approvals
}

// nextEvent reads ch until an event satisfies pred; the events read are appended to seen.
func nextEvent(t *testing.T, ctx context.Context, ch <-chan parley.Event, seen *[]parley.Event, pred func(parley.Event) bool) parley.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before the event looked for; seen: %s", render(*seen))
			}
			*seen = append(*seen, ev)
			if pred(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no such event in time; seen: %s", render(*seen))
		}
	}
}

func ofType(typ parley.EventType) func(parley.Event) bool {
	return func(ev parley.Event) bool { return ev.Type == typ }
}

// startChat posts a chat and returns its events.
func startChat(t *testing.T, ctx context.Context, url, text string) <-chan parley.Event {
	t.Helper()
	resp := postStream(t, ctx, url, map[string]any{"message": text, "model": "oa/gpt-4o"})
	out := make(chan parley.Event, 1000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		scanSSE(resp.Body, func(ev sseEvent) bool { out <- ev.Data; return true })
	}()
	return out
}

// toolMessageSent returns the content of the tool message answering callID in the last request
// the fake model received, and checks that the request's raw body holds it as sent.
func toolMessageSent(t *testing.T, fake *llmtest.Server, callID string) string {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	last := reqs[len(reqs)-1]
	for _, m := range last.Messages {
		if m.Role == parley.RoleTool && m.ToolCallID == callID {
			b, _ := json.Marshal(m.Content.String())
			if !bytes.Contains(last.Raw, b) {
				t.Fatalf("the raw request does not hold %s: %s", b, last.Raw)
			}
			return m.Content.String()
		}
	}
	t.Fatalf("no tool message for %s in the model's last request: %s", callID, last.Raw)
	return ""
}

// TestApprovalSurvivesSIGKILL: a call waits for approval; the server is killed (SIGKILL) and
// restarted on the same SQLite file. The restarted server lists the pending approval, takes the
// run back, and an approve runs the tool once; the run ends with the model's answer.
func TestApprovalSurvivesSIGKILL(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	args := []string{"--db", filepath.Join(t.TempDir(), "parley.db"), "--instance-id", "approval-kill",
		"--config", mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})}
	srv := startChild(t, args...)
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_erase", "precious")}},
		llmtest.Turn{Content: "Erased it."})

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	evs := startChat(t, ctx, srv.url, "Erase precious.")
	var seen []parley.Event
	req := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	a := req.Approval
	if a == nil || a.CallID != "call_erase" || a.Tool != "t__erase" || a.Server != "t" || a.Arguments != `{"key":"precious"}` ||
		!strings.Contains(a.Reason, "destructive") || a.ExpiresAt == nil || !a.ExpiresAt.After(time.Now()) {
		t.Fatalf("approval_required: %+v", a)
	}
	status := nextEvent(t, ctx, evs, &seen, ofType(parley.EventStatus))
	if status.State != parley.RunAwaitingApproval {
		t.Fatalf("status after approval_required: %+v", status)
	}
	session, runID, lastSeq := req.SessionID, req.RunID, status.Seq
	// The approval is stored before its event goes out; the event itself reaches the database
	// within the event writer's flush.
	srv.kill(t)
	if got := mcptest.Journal(journal); len(got) != 0 {
		t.Fatalf("the tool ran before anyone approved: %v", got)
	}

	srv = startChild(t, args...)
	pend := pendingApprovals(t, srv.url, session)
	if len(pend) != 1 || pend[0].CallID != "call_erase" || pend[0].Arguments != `{"key":"precious"}` {
		t.Fatalf("pending approvals after the restart: %+v", pend)
	}
	waitLog(t, srv.logs, "taking over a run")
	// The whole stream, from its start: the run taken over waits again and says so, and the
	// request is in it once (sent again only if the kill lost it before it was stored).
	after := followSSE(t, ctx, srv.url, session, "0")
	var seen2 []parley.Event
	nextEvent(t, ctx, after, &seen2, func(ev parley.Event) bool {
		return ev.Type == parley.EventStatus && ev.State == parley.RunAwaitingApproval && ev.Seq > lastSeq
	})
	var reqs []parley.Event
	for _, ev := range seen2 {
		if ev.Type == parley.EventApprovalRequired {
			reqs = append(reqs, ev)
		}
	}
	if len(reqs) != 1 || reqs[0].RunID != runID || reqs[0].Approval.CallID != "call_erase" || !reqs[0].Approval.ExpiresAt.Equal(*a.ExpiresAt) {
		t.Fatalf("approval_required in the stream after the takeover: %+v; want the one request once", reqs)
	}
	code, out := answerApproval(t, srv.url, session, "call_erase", `{"decision":"approve"}`)
	if code != 200 {
		t.Fatalf("approve: %d %v", code, out)
	}
	resolved := nextEvent(t, ctx, after, &seen2, ofType(parley.EventApprovalResolved))
	if r := resolved.Approval; r.Decision != parley.ApprovalApproved || r.Edited || r.Arguments != `{"key":"precious"}` {
		t.Fatalf("approval_resolved: %+v", r)
	}
	done := nextEvent(t, ctx, after, &seen2, ofType(parley.EventDone))
	if done.FinishReason != parley.FinishStop || done.RunID != runID {
		t.Fatalf("done: %+v", done)
	}
	if j := mcptest.Journal(journal); !slices.Equal(j, []string{"start:precious", "end", "precious"}) {
		t.Fatalf("journal: %v; want the erase to run once", j)
	}
	if got := toolMessageSent(t, fake, "call_erase"); got != "erased precious" {
		t.Fatalf("tool result sent to the model: %q", got)
	}
	if pend := pendingApprovals(t, srv.url, session); len(pend) != 0 {
		t.Fatalf("still pending: %+v", pend)
	}
	checkStoredHistory(t, srv.url, session)
}

// checkStoredHistory checks that the session's stored history is valid for the OpenAI API.
func checkStoredHistory(t *testing.T, url, session string) []parley.Message {
	t.Helper()
	msgs := getAllMessages(t, url, session)
	view := make([]parley.Message, len(msgs))
	for i, m := range msgs {
		view[i] = m.OpenAI()
	}
	if err := parley.CheckHistory(view); err != nil {
		t.Fatalf("stored history: %v", err)
	}
	return msgs
}

// TestApprovalAcrossInstances: two instances on one SQLite file. A call waits on A; its owner
// answers on B, and A's run learns of it: without Redis by polling the store, with Redis by the
// control B sends it (the poll is then an hour: only the control can wake it). A second call then
// waits on A; A is killed, B takes the run over when its lease ends, finds the pending approval,
// and an approve on B runs the tool once.
func TestApprovalAcrossInstances(t *testing.T) {
	t.Run("poll", func(t *testing.T) { approvalAcrossInstances(t, "--approval-poll", "200ms") })
	t.Run("redis", func(t *testing.T) {
		redistest.Client(t) // skips, or fails where Redis is required, when none answers
		approvalAcrossInstances(t, "--approval-poll", "1h", "--redis-url", redistest.URL())
	})
}

func approvalAcrossInstances(t *testing.T, extra ...string) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	cfg := mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})
	common := append([]string{"--db", filepath.Join(t.TempDir(), "shared.db"), "--config", cfg, "--run-lease", "3s"}, extra...)
	a := startChild(t, append(common, "--instance-id", "approval-a")...)
	b := startChild(t, append(common, "--instance-id", "approval-b")...)
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_one", "one")}},
		llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_two", "two")}},
		llmtest.Turn{Content: "Both erased."})

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	evs := startChat(t, ctx, a.url, "Erase one, then two.")
	var seen []parley.Event
	first := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	session, runID := first.SessionID, first.RunID
	if code, out := answerApproval(t, b.url, session, "call_one", `{"decision":"approve"}`); code != 200 {
		t.Fatalf("approve on B: %d %v", code, out)
	}
	resolved := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalResolved))
	if resolved.Approval.CallID != "call_one" || resolved.Approval.Decision != parley.ApprovalApproved {
		t.Fatalf("approval_resolved on A: %+v", resolved.Approval)
	}
	second := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	if second.Approval.CallID != "call_two" {
		t.Fatalf("second approval_required: %+v", second.Approval)
	}
	lastSeq := nextEvent(t, ctx, evs, &seen, ofType(parley.EventStatus)).Seq
	a.kill(t)

	waitLog(t, b.logs, "taking over a run")
	if pend := pendingApprovals(t, b.url, session); len(pend) != 1 || pend[0].CallID != "call_two" {
		t.Fatalf("pending on B: %+v", pend)
	}
	after := followSSE(t, ctx, b.url, session, itoa(int(lastSeq)))
	var seen2 []parley.Event
	nextEvent(t, ctx, after, &seen2, func(ev parley.Event) bool {
		return ev.Type == parley.EventStatus && ev.State == parley.RunRecovered && ev.RunID == runID
	})
	if code, out := answerApproval(t, b.url, session, "call_two", `{"decision":"approve"}`); code != 200 {
		t.Fatalf("approve on B after the takeover: %d %v", code, out)
	}
	nextEvent(t, ctx, after, &seen2, func(ev parley.Event) bool {
		return ev.Type == parley.EventApprovalResolved && ev.Approval.CallID == "call_two"
	})
	done := nextEvent(t, ctx, after, &seen2, ofType(parley.EventDone))
	if done.FinishReason != parley.FinishStop {
		t.Fatalf("done: %+v", done)
	}
	starts := map[string]int{}
	for _, line := range mcptest.Journal(journal) {
		if k, ok := strings.CutPrefix(line, "start:"); ok {
			starts[k]++
		}
	}
	if starts["one"] != 1 || starts["two"] != 1 || len(starts) != 2 {
		t.Fatalf("erase calls: %v; want one and two once each", starts)
	}
	// A second answer to a decided call is a conflict.
	if code, _ := answerApproval(t, b.url, session, "call_two", `{"decision":"deny"}`); code != 409 {
		t.Fatalf("answering twice: %d, want 409", code)
	}
	checkStoredHistory(t, b.url, session)
}

// TestApprovalDecisionsReachTheModel: edited arguments that break the tool's schema are refused
// (400, the call stays pending) and valid ones run (the model's call stays as it asked, the
// result notes the edit); a denial with a reason, a call nobody answers in time and a call the
// policy denies each give the model a tool result it can read: the exact text is checked in the
// next request the model receives.
func TestApprovalDecisionsReachTheModel(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	cfg := mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})
	srv := startChild(t, "--db", filepath.Join(t.TempDir(), "parley.db"), "--config", cfg,
		"--tool-policy", "t__echo=deny,t__write=ask")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Edited arguments.
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_edit", "wrong")}}, llmtest.Turn{Content: "Done."})
	evs := startChat(t, ctx, srv.url, "Erase something.")
	var seen []parley.Event
	req := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	session := req.SessionID
	for _, bad := range []string{
		`{"decision":"approve","arguments":{"key":5}}`,                // not a string
		`{"decision":"approve","arguments":{"key":"x","force":true}}`, // a property the schema does not name
		`{"decision":"approve","arguments":{"ms":3}}`,                 // key is required
		`{"decision":"approve","arguments":["key"]}`,                  // not an object
		`{"decision":"deny","arguments":{"key":"x"}}`,                 // arguments only with approve
		`{"decision":"perhaps"}`,                                      // no such decision
	} {
		code, out := answerApproval(t, srv.url, session, "call_edit", bad)
		e, _ := out["error"].(map[string]any)
		if code != 400 || e == nil || e["code"] != "invalid" || e["message"] == "" {
			t.Fatalf("%s: %d %v, want 400 invalid with a reason", bad, code, out)
		}
	}
	if pend := pendingApprovals(t, srv.url, session); len(pend) != 1 || pend[0].CallID != "call_edit" {
		t.Fatalf("after the refused edits: %+v, want the call still pending", pend)
	}
	if code, _ := answerApproval(t, srv.url, session, "call_nope", `{"decision":"approve"}`); code != 404 {
		t.Fatalf("an unknown call: %d, want 404", code)
	}
	code, out := answerApproval(t, srv.url, session, "call_edit", `{"decision":"approve","arguments":{"key":"right"}}`)
	ap, _ := out["approval"].(map[string]any)
	if code != 200 || ap["decision"] != "approved" || ap["edited"] != true || ap["arguments"] != `{"key":"right"}` {
		t.Fatalf("approve with an edit: %d %v", code, out)
	}
	nextEvent(t, ctx, evs, &seen, ofType(parley.EventDone))
	if j := mcptest.Journal(journal); !slices.Equal(j, []string{"start:right", "end", "right"}) {
		t.Fatalf("journal: %v, want the edited call only", j)
	}
	want := "note: the user edited the arguments of this call before approving it; it ran with {\"key\":\"right\"}\n\nerased right"
	if got := toolMessageSent(t, fake, "call_edit"); got != want {
		t.Fatalf("tool result sent to the model: %q, want %q", got, want)
	}
	msgs := checkStoredHistory(t, srv.url, session)
	if msgs[1].ToolCalls[0].Function.Arguments != `{"key":"wrong"}` {
		t.Fatalf("the stored call: %+v, want the model's arguments", msgs[1].ToolCalls)
	}

	// A denial with a reason, and a call the policy denies, in one answer of the model.
	echo := parley.ToolCall{ID: "call_echo", Type: "function", Function: parley.FunctionCall{Name: "t__echo", Arguments: `{"text":"hi"}`}}
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_deny", "all"), echo}}, llmtest.Turn{Content: "I will not."})
	evs = startChat(t, ctx, srv.url, "Erase all.")
	seen = nil
	req = nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	if req.Approval.CallID != "call_deny" {
		t.Fatalf("approval_required: %+v (the echo call is denied by policy, never asked)", req.Approval)
	}
	if code, out := answerApproval(t, srv.url, req.SessionID, "call_deny", `{"decision":"deny","reason":"keep the files"}`); code != 200 {
		t.Fatalf("deny: %d %v", code, out)
	}
	res := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalResolved))
	if r := res.Approval; r.Decision != parley.ApprovalDenied || r.Reason != "keep the files" {
		t.Fatalf("approval_resolved: %+v", r)
	}
	nextEvent(t, ctx, evs, &seen, ofType(parley.EventDone))
	if got, want := toolMessageSent(t, fake, "call_deny"), "error: not run: the user denied this call of t__erase, saying: keep the files"; got != want {
		t.Fatalf("denied: the model got %q, want %q", got, want)
	}
	if got, want := toolMessageSent(t, fake, "call_echo"),
		"error: not run: the tool policy does not allow t__echo (the server's tool policy says deny for t__echo); do not call it again, answer with what you have"; got != want {
		t.Fatalf("policy deny: the model got %q, want %q", got, want)
	}
	if j := mcptest.Journal(journal); len(j) != 3 {
		t.Fatalf("journal: %v: a denied call ran", j)
	}
	checkStoredHistory(t, srv.url, req.SessionID)
}

// TestApprovalTimeoutDenies: a call nobody answers within --approval-timeout is denied, every
// client is told (approval_resolved expired), and the model reads why.
func TestApprovalTimeoutDenies(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	cfg := mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})
	srv := startChild(t, "--db", filepath.Join(t.TempDir(), "parley.db"), "--config", cfg, "--approval-timeout", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_late", "late")}}, llmtest.Turn{Content: "Nobody answered."})
	evs := startChat(t, ctx, srv.url, "Erase late.")
	var seen []parley.Event
	req := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	res := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalResolved))
	if r := res.Approval; r.CallID != "call_late" || r.Decision != parley.ApprovalExpired || r.Reason != "nobody answered within 1s" {
		t.Fatalf("approval_resolved: %+v", r)
	}
	nextEvent(t, ctx, evs, &seen, ofType(parley.EventDone))
	if got, want := toolMessageSent(t, fake, "call_late"),
		"error: not run: this call of t__erase needed the user's approval and nobody answered within 1s, so it was denied"; got != want {
		t.Fatalf("the model got %q, want %q", got, want)
	}
	if j := mcptest.Journal(journal); len(j) != 0 {
		t.Fatalf("an expired call ran: %v", j)
	}
	if code, _ := answerApproval(t, srv.url, req.SessionID, "call_late", `{"decision":"approve"}`); code != 409 {
		t.Fatalf("approving an expired call: %d, want 409", code)
	}
}

// TestApprovalSurvivesGracefulRestart: SIGTERM while a call waits does not deny it nor wait for
// the shutdown grace: the run is handed over, the restarted server waits on, and an approve runs
// the tool once.
func TestApprovalSurvivesGracefulRestart(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	args := []string{"--db", filepath.Join(t.TempDir(), "parley.db"), "--instance-id", "approval-term", "--shutdown-grace", "10m",
		"--config", mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})}
	srv := startChild(t, args...)
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{eraseCall("call_term", "kept")}}, llmtest.Turn{Content: "Erased."})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	evs := startChat(t, ctx, srv.url, "Erase kept.")
	var seen []parley.Event
	req := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	nextEvent(t, ctx, evs, &seen, ofType(parley.EventStatus))
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The grace is 10 minutes: the server is down long before unless it waited for the run.
	exited := make(chan error, 1)
	go func() { exited <- srv.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the server exited with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the server waited for the run waiting for approval")
	}
	if strings.Contains(srv.logs.String(), "active runs were aborted") {
		t.Fatalf("runs were aborted at shutdown:\n%s", srv.logs.String())
	}

	srv = startChild(t, args...)
	if pend := pendingApprovals(t, srv.url, req.SessionID); len(pend) != 1 || pend[0].CallID != "call_term" {
		t.Fatalf("pending after the restart: %+v (a shutdown must not deny it)", pend)
	}
	waitLog(t, srv.logs, "taking over a run")
	after := followSSE(t, ctx, srv.url, req.SessionID, "0")
	if code, out := answerApproval(t, srv.url, req.SessionID, "call_term", `{"decision":"approve"}`); code != 200 {
		t.Fatalf("approve: %d %v", code, out)
	}
	var seen2 []parley.Event
	done := nextEvent(t, ctx, after, &seen2, func(ev parley.Event) bool { return ev.Type == parley.EventDone && ev.RunID == req.RunID })
	if done.FinishReason != parley.FinishStop {
		t.Fatalf("done: %+v", done)
	}
	// The shutdown stored the request: the run taken over does not send it again.
	if n := strings.Count(render(seen2), string(parley.EventApprovalRequired)); n != 1 {
		t.Fatalf("approval_required %d times in the stream, want once: %s", n, render(seen2))
	}
	if j := mcptest.Journal(journal); !slices.Equal(j, []string{"start:kept", "end", "kept"}) {
		t.Fatalf("journal: %v", j)
	}
	msgs := checkStoredHistory(t, srv.url, req.SessionID)
	if last := msgs[len(msgs)-1]; last.Content.String() != "Erased." {
		t.Fatalf("last message: %+v", last)
	}
}

// TestProjectPolicyAsks: the mcptest write tool says nothing of itself (it runs by default); in a
// project whose tool_policy says ask, its call waits for approval, and "always" then lets the
// session's next call of it run at once.
func TestProjectPolicyAsks(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	cfg := mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})
	srv := startChild(t, "--db", filepath.Join(t.TempDir(), "parley.db"), "--config", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := http.Post(srv.url+"/api/v1/projects", "application/json", strings.NewReader(`{"name":"careful","tool_policy":{"t__w*":"ask"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var p parley.Project
	json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != 201 || p.ToolPolicy["t__w*"] != "ask" {
		t.Fatalf("project: %d %+v", resp.StatusCode, p)
	}
	write := func(id, key string) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: "t__write", Arguments: `{"key":"` + key + `"}`}}
	}
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{write("call_w1", "one")}}, llmtest.Turn{Content: "Written."},
		llmtest.Turn{ToolCalls: []parley.ToolCall{write("call_w2", "two")}}, llmtest.Turn{Content: "Written again."})
	evs := postStreamEvents(t, ctx, srv.url, map[string]any{"message": "Write one.", "model": "oa/gpt-4o", "project_id": p.ID})
	var seen []parley.Event
	req := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalRequired))
	if !strings.Contains(req.Approval.Reason, `project "careful"`) {
		t.Fatalf("reason: %q", req.Approval.Reason)
	}
	if code, out := answerApproval(t, srv.url, req.SessionID, "call_w1", `{"decision":"always"}`); code != 200 {
		t.Fatalf("always: %d %v", code, out)
	}
	if ev := nextEvent(t, ctx, evs, &seen, ofType(parley.EventApprovalResolved)); !ev.Approval.Always {
		t.Fatalf("approval_resolved: %+v", ev.Approval)
	}
	nextEvent(t, ctx, evs, &seen, ofType(parley.EventDone))
	// The next call of the tool in this session runs without asking.
	evs = postStreamEvents(t, ctx, srv.url, map[string]any{"message": "Write two.", "model": "oa/gpt-4o", "session_id": req.SessionID})
	seen = nil
	nextEvent(t, ctx, evs, &seen, ofType(parley.EventDone))
	for _, ev := range seen {
		if ev.Type == parley.EventApprovalRequired {
			t.Fatalf("asked again after always: %s", render(seen))
		}
	}
	if got := toolMessageSent(t, fake, "call_w2"); got != "wrote two" {
		t.Fatalf("second call: %q", got)
	}
}

// postStreamEvents posts a chat with body and returns its events.
func postStreamEvents(t *testing.T, ctx context.Context, url string, body map[string]any) <-chan parley.Event {
	t.Helper()
	resp := postStream(t, ctx, url, body)
	out := make(chan parley.Event, 1000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		scanSSE(resp.Body, func(ev sseEvent) bool { out <- ev.Data; return true })
	}()
	return out
}
