// Package openaiapi is Parley behind OpenAI's Chat Completions API, under /v1: GET /v1/models and
// POST /v1/chat/completions, answered whole or streamed as chat.completion.chunk events, with
// OpenAI's error shape. Package httpapi registers the routes and runs each request through its
// pipeline (rate limit, key, run budget, body limits) before a handler here sees it.
//
// A request is one of three kinds:
//
//   - gateway (the request carries tools): the request's messages and tools go to the model as
//     they are, and its answer, tool calls included, comes back to the caller, which runs them.
//     Nothing is stored.
//   - stateless (no tools, no session): the request's messages are the conversation, held in
//     memory for this request only; Parley's own tools (built-in and MCP; all of them, or those
//     the parley.tools extension names) run in Parley's agent loop, and the answer is the final
//     one. parley.tool_activity asks to see the tool calls and results.
//   - stateful (an X-Parley-Session header or metadata.session_id): the last user message of the
//     request is a turn of that session, as POST /api/v1/chat makes one: the history comes from
//     the store, the turn is stored and runs under the run manager, its events go to the session's
//     other clients, and it can be followed again from the session's stream.
package openaiapi

import (
	"encoding/json"

	parley "github.com/parleyhq/parley"
)

// ChatRequest is the body of POST /v1/chat/completions: the fields of OpenAI's request that
// Parley honours, and its own extension. Any other field is refused (400), so that a caller
// never believes a setting took effect when it did not.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	MaxTokens           int             `json:"max_tokens,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	N                   *int            `json:"n,omitempty"`
	// User is OpenAI's end-user identifier for abuse monitoring; accepted and not used.
	User string `json:"user,omitempty"`
	// Metadata is OpenAI's key-value metadata; Parley reads session_id from it.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Parley is Parley's extension (see Extension).
	Parley *Extension `json:"parley,omitempty"`

	// Set by Check.
	toolChoice string
	session    string
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	// IncludeUsage adds a last chunk, before [DONE], with the usage of the whole request and no
	// choices; every other chunk then has "usage": null.
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// Extension is the "parley" object of a request (the Python SDK sends it with
// extra_body={"parley": {...}}; the JS SDK passes it as a field of the request).
type Extension struct {
	// Tools restricts Parley's own tools offered to the model in a stateless or stateful request
	// (the native API's selected_tools): absent offers all of them, [] none.
	Tools []string `json:"tools,omitempty"`
	// ToolActivity asks to see the tool calls Parley ran and their results: in a whole answer
	// as parley.tool_activity, in a stream as chunks without choices that carry a parley object.
	ToolActivity bool `json:"tool_activity,omitempty"`
	// SessionID names the session of a stateful request, as the X-Parley-Session header does.
	SessionID string `json:"session_id,omitempty"`
}

// Message is one message of a request, in OpenAI's format ("developer" is taken as "system").
type Message struct {
	Role       string            `json:"role"`
	Content    parley.Content    `json:"content"`
	Name       string            `json:"name,omitempty"`
	ToolCalls  []parley.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
	// Refusal is accepted so that an assistant message of an answer can be sent back as it came.
	Refusal *string `json:"refusal,omitempty"`
	// Reasoning is the reasoning text Parley returns beside an answer (reasoning_content).
	Reasoning string `json:"reasoning_content,omitempty"`
}

// Tool is one tool of a gateway request.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function describes a client-side tool.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Completion is the answer to a request that does not stream (object "chat.completion").
type Completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
	Parley  *Info    `json:"parley,omitempty"`
}

// Choice is the one choice of a Completion.
type Choice struct {
	Index        int        `json:"index"`
	Message      OutMessage `json:"message"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason string     `json:"finish_reason"`
}

// OutMessage is the assistant message of an answer.
type OutMessage struct {
	Role      string            `json:"role"`
	Content   *string           `json:"content"`
	Refusal   *string           `json:"refusal"`
	ToolCalls []parley.ToolCall `json:"tool_calls,omitempty"`
	Reasoning string            `json:"reasoning_content,omitempty"`
}

// Usage is OpenAI's usage object.
type Usage struct {
	PromptTokens            int64          `json:"prompt_tokens"`
	CompletionTokens        int64          `json:"completion_tokens"`
	TotalTokens             int64          `json:"total_tokens"`
	PromptTokensDetails     *PromptDetails `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *ComplDetails  `json:"completion_tokens_details,omitempty"`
}

// PromptDetails is usage.prompt_tokens_details.
type PromptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// ComplDetails is usage.completion_tokens_details.
type ComplDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

func usageOf(u parley.Usage) *Usage {
	out := &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if u.CachedTokens > 0 {
		out.PromptTokensDetails = &PromptDetails{CachedTokens: u.CachedTokens}
	}
	if u.ReasoningTokens > 0 {
		out.CompletionTokensDetails = &ComplDetails{ReasoningTokens: u.ReasoningTokens}
	}
	return out
}

// Info is the "parley" object of an answer: where a stateful turn went, how the run ended, and
// the tool activity when it was asked for.
type Info struct {
	SessionID    string     `json:"session_id,omitempty"`
	RunID        string     `json:"run_id,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"` // Parley's own (stop, max_iterations, aborted …)
	ToolActivity []Activity `json:"tool_activity,omitempty"`
}

// Activity is one step of the tool activity: a call Parley starts, or its result.
type Activity struct {
	Type     string           `json:"type"` // "tool_call" or "tool_result"
	ToolCall *parley.ToolCall `json:"tool_call,omitempty"`
	Result   *ToolResult      `json:"result,omitempty"`
}

// ToolResult is a tool's result as the tool activity shows it.
type ToolResult struct {
	ToolCallID string `json:"tool_call_id"`
	Name       string `json:"name,omitempty"`
	Server     string `json:"server,omitempty"`
	Content    string `json:"content"`
	Success    bool   `json:"success"`
}

// Chunk is one event of a stream (object "chat.completion.chunk").
type Chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
	// Usage is null on every chunk but the last when the caller asked for usage, absent otherwise.
	Usage  json.RawMessage `json:"usage,omitempty"`
	Parley *ChunkInfo      `json:"parley,omitempty"`
}

// ChunkChoice is the one choice of a Chunk.
type ChunkChoice struct {
	Index        int       `json:"index"`
	Delta        Delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// Delta is a piece of the answer.
type Delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	Reasoning string          `json:"reasoning_content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is a piece of a tool call: the first carries its id, type and name.
type ToolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function FunctionDelta `json:"function"`
}

// FunctionDelta is a piece of a tool call's function.
type FunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChunkInfo is the "parley" object of a chunk: tool activity (with choices empty), or, on the
// last chunk, how the run ended.
type ChunkInfo struct {
	*Activity
	SessionID    string `json:"session_id,omitempty"`
	RunID        string `json:"run_id,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// ModelList is the answer of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Model is one model of the list.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ErrorBody is OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
