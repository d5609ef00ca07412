package agent

import (
	"context"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
)

func TestCloseInterruptedCalls(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	call := func(id, name string) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: name, Arguments: "{}"}}
	}
	mk := func(role parley.Role, text string) *parley.Message {
		return &parley.Message{ID: parley.NewID(), Role: role, Content: parley.Text(text), CreatedAt: now}
	}
	// The fixture's session stopped after one of three parallel results was stored.
	ask := mk(parley.RoleAssistant, "")
	ask.ToolCalls = []parley.ToolCall{call("c1", "clock"), call("c2", "calc"), call("c3", "fetch")}
	done := mk(parley.RoleTool, "12:00")
	done.ToolCallID, done.Name = "c2", "calc"
	if err := f.store.AppendMessages(ctx, f.sess, mk(parley.RoleUser, "go"), ask, done); err != nil {
		t.Fatal(err)
	}
	// A second session whose open call is followed by a user message cannot be mended in place.
	other := &parley.Session{ID: parley.NewID(), Owner: "u", CreatedAt: now, UpdatedAt: now}
	if err := f.store.CreateSession(ctx, other); err != nil {
		t.Fatal(err)
	}
	ask2 := mk(parley.RoleAssistant, "")
	ask2.ToolCalls = []parley.ToolCall{call("d1", "clock")}
	if err := f.store.AppendMessages(ctx, other.ID, mk(parley.RoleUser, "a"), ask2, mk(parley.RoleUser, "b")); err != nil {
		t.Fatal(err)
	}

	n, err := CloseInterruptedCalls(ctx, f.store, time.Now)
	if err != nil || n != 2 {
		t.Fatalf("closed %d (%v), want 2", n, err)
	}
	h := f.history(t)
	if err := parley.CheckHistory(h); err != nil {
		t.Fatalf("history still invalid: %v", err)
	}
	for _, m := range h[3:] {
		if m.Role != parley.RoleTool || m.Content.String() != llmctx.MissingResult || m.Success == nil || *m.Success {
			t.Fatalf("closing message: %+v", m)
		}
	}
	if h[3].ToolCallID != "c1" || h[3].Name != "clock" || h[4].ToolCallID != "c3" || h[4].Name != "fetch" {
		t.Fatalf("closed calls: %s/%s %s/%s", h[3].ToolCallID, h[3].Name, h[4].ToolCallID, h[4].Name)
	}
	// Idempotent: a second pass finds nothing more to do.
	if n, err := CloseInterruptedCalls(ctx, f.store, time.Now); err != nil || n != 0 {
		t.Fatalf("second pass closed %d (%v)", n, err)
	}
}
