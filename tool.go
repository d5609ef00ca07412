package parley

import (
	"context"
	"encoding/json"
)

// Tool is something the model can call: a built-in function or a tool of an MCP server. All tools
// share this contract, so the agent loop and the guard treat them alike.
type Tool interface {
	Spec() ToolSpec
	// Call runs the tool with the model's arguments (a JSON object). A tool that fails in a way the
	// model should see returns a ToolResult with IsError set; an error return is also shown to the
	// model as a failed result, never crashing the run.
	Call(ctx context.Context, args json.RawMessage) (*ToolResult, error)
}

// ToolResult is what a tool returns.
type ToolResult struct {
	Content    Content // what the model sees: usually text, possibly parts with images
	IsError    bool
	ResourceID string // optional: a Resource the result refers to
}
