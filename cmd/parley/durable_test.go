package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// TestSIGKILLDuringToolLoop kills the server while a run's tool calls are under way, restarts it,
// and checks that the run goes on from its checkpoint: the call that finished before the kill is
// not run again, the read-only call left in doubt runs again, the writing call left in doubt does
// not (the model is told it was interrupted), and the run ends with the model's answer, in a valid
// history, its events resumable on the session stream.
func TestSIGKILLDuringToolLoop(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	journal := filepath.Join(t.TempDir(), "journal")
	args := []string{"--db", filepath.Join(t.TempDir(), "parley.db"), "--instance-id", "durable-test",
		"--config", mcpChatConfigWith(t, hs.URL, mcptest.Options{Journal: journal})}
	srv := startChild(t, args...)

	call := func(id, tool, key string, ms int) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: "t__" + tool, Arguments: `{"key":"` + key + `","ms":` + itoa(ms) + `}`}}
	}
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{
		call("call_fast", "write", "fast", 0), call("call_write", "write", "slow-write", 60_000), call("call_read", "read", "slow-read", 60_000)}})
	fake.Enqueue(llmtest.Turn{Content: "All three are settled."})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := postStream(t, ctx, srv.url, map[string]any{"message": "Do the three things.", "model": "oa/gpt-4o"})
	var session, runID string
	var lastSeq int64
	fastDone := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		scanSSE(resp.Body, func(ev sseEvent) bool {
			if ev.Data.Type == parley.EventStart {
				session, runID = ev.Data.SessionID, ev.Data.RunID
			}
			lastSeq = ev.Data.Seq
			if ev.Data.Type == parley.EventToolResult && ev.Data.Message.ToolCallID == "call_fast" {
				close(fastDone)
				return false
			}
			return true
		})
	}()
	select {
	case <-fastDone:
	case <-ctx.Done():
		t.Fatal("the fast call's result never came")
	}
	// Kill once both slow calls are under way.
	for !(slices.Contains(mcptest.Journal(journal), "start:slow-write") && slices.Contains(mcptest.Journal(journal), "start:slow-read")) {
		if ctx.Err() != nil {
			t.Fatalf("the slow calls never started: %v", mcptest.Journal(journal))
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.kill(t)

	srv = startChild(t, args...)
	// The restarted server takes the run back once it listens.
	waitLog(t, srv.logs, "taking over a run")
	// The stream resumes after the last event seen, and shows the run going on to its end.
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url+"/api/v1/sessions/"+session+"/stream?until=done", nil)
	req.Header.Set("Last-Event-ID", itoa(int(lastSeq)))
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var after []parley.Event
	scanSSE(sresp.Body, func(ev sseEvent) bool {
		after = append(after, ev.Data)
		return true
	})
	sresp.Body.Close()
	var recovered, done *parley.Event
	for i := range after {
		switch {
		case after[i].Type == parley.EventStatus && after[i].State == parley.RunRecovered:
			recovered = &after[i]
		case after[i].Type == parley.EventDone:
			done = &after[i]
		}
	}
	if recovered == nil || recovered.RunID != runID || done == nil || done.FinishReason != parley.FinishStop || done.RunID != runID {
		t.Fatalf("events after the restart (run %s): %+v", runID, after)
	}

	starts := map[string]int{}
	for _, line := range mcptest.Journal(journal) {
		if k, ok := strings.CutPrefix(line, "start:"); ok {
			starts[k]++
		}
	}
	if starts["fast"] != 1 || starts["slow-write"] != 1 || starts["slow-read"] != 2 {
		t.Fatalf("calls per tool: %v; want fast 1 (done before the kill), slow-write 1 (in doubt, not rerun-safe), slow-read 2 (read-only: run again)", starts)
	}
	msgs := getAllMessages(t, srv.url, session)
	view := make([]parley.Message, len(msgs))
	results := map[string]string{}
	for i, m := range msgs {
		view[i] = m.OpenAI()
		if m.Role == parley.RoleTool {
			results[m.ToolCallID] = m.Content.String()
		}
	}
	if err := parley.CheckHistory(view); err != nil {
		t.Fatalf("history after the takeover: %v", err)
	}
	if results["call_fast"] != "wrote fast" || results["call_write"] != agent.InterruptedText || results["call_read"] != "read slow-read" || len(results) != 3 {
		t.Fatalf("tool results: %v", results)
	}
	if last := msgs[len(msgs)-1]; last.Role != parley.RoleAssistant || last.Content.String() != "All three are settled." {
		t.Fatalf("last message: %+v", last)
	}
	var sess struct {
		ActiveRun string `json:"active_run"`
	}
	gresp, err := http.Get(srv.url + "/api/v1/sessions/" + session)
	if err != nil {
		t.Fatal(err)
	}
	defer gresp.Body.Close()
	if err := json.NewDecoder(gresp.Body).Decode(&sess); err != nil {
		t.Fatal(err)
	}
	if sess.ActiveRun != "" {
		t.Fatalf("the run is still active: %s", sess.ActiveRun)
	}
}
