package agent

import (
	"context"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tracing"
)

// With tracing off, a model call's and a tool call's spans cost nothing: no attributes are built
// for a span that records none.
func TestSpansWithTracingOffAllocateNothing(t *testing.T) {
	if tracing.On() {
		t.Skip("tracing is on in this process")
	}
	a := &Agent{}
	in := Input{SessionID: "s1", RunID: "r1"}
	req := &parley.ChatRequest{Model: "openai/gpt-x"}
	call := parley.ToolCall{ID: "c1", Function: parley.FunctionCall{Name: "calculator", Arguments: `{}`}}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, span := a.startModelSpan(ctx, in, req)
		a.endModelSpan(span, "openai/gpt-x", &parley.Response{}, nil)
		_, span = a.startToolSpan(ctx, in, call)
		span.End()
	}); n != 0 {
		t.Errorf("%v allocations per model and tool span with tracing off, want 0", n)
	}
}
