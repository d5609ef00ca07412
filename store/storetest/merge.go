package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// MergeBegins returns the begins of runs that both stores' merge tests run merged and each alone:
// three of new sessions that differ where a merged statement could go wrong (selected tools; a
// project, made here, and every column of a message; a message made after the session's
// updated_at). Each store's test adds its own turns, ends and event writes.
func MergeBegins(t *testing.T, s parley.Store, now time.Time) []*parley.RunBegin {
	t.Helper()
	proj := &parley.Project{ID: parley.NewID(), Owner: "o", Name: "p", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateProject(context.Background(), proj); err != nil {
		t.Fatal(err)
	}
	var begins []*parley.RunBegin
	for i := range 3 {
		sess := &parley.Session{ID: parley.NewID(), Owner: "o", Title: fmt.Sprintf("t%d", i), CreatedAt: now, UpdatedAt: now.Add(3 * time.Second)}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i", Attempts: i,
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now.Add(time.Second)}
		switch i {
		case 0:
			run.SelectedTools = []string{"x", "y"}
		case 1:
			sess.ProjectID = proj.ID
			m.Role, m.Content, m.Name, m.Reasoning, m.Model, m.LatencyMS = parley.RoleAssistant, parley.Content{}, "n", "because", "m", 42
			m.ToolCalls = []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "x", Arguments: "{}"}}}
			m.Usage = &parley.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, ReasoningTokens: 1, CachedTokens: 2, Cost: 0.25}
			m.ThinkingBlocks = []parley.ThinkingBlock{{Type: "thinking", Thinking: "hm", Signature: "sig"}}
			m.Error = parley.ECInvalid
		case 2:
			ok := true
			m.Role, m.Content, m.ToolCallID, m.Success, m.Server = parley.RoleTool, parley.Parts(parley.Part{Type: "text", Text: "a"}), "c0", &ok, "srv"
			m.CreatedAt = now.Add(5 * time.Second) // after the session's updated_at
		}
		begins = append(begins, &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 50, Run: run, Messages: []*parley.Message{m}})
	}
	return begins
}
