// Package uistream speaks the Vercel AI SDK's UI message stream (protocol v1, the stream `useChat`
// reads through its DefaultChatTransport) on top of Parley's run events: it decodes useChat's
// request body, maps a client's chat id to a Parley session, translates a run's events into UI
// message chunks, and turns a stored history into UIMessage values.
//
// The wire format follows the `ai` npm package (interop/aisdk pins the version the tests use):
// each chunk is one SSE event, `data: <JSON>` and a blank line, without event names or ids; the
// stream ends with `data: [DONE]`; the response carries the header
// `x-vercel-ai-ui-message-stream: v1`. The HTTP handlers are in package httpapi (uichat.go).
package uistream

import (
	"encoding/json"
)

// Header is the response header that marks a UI message stream, with its value.
const (
	Header      = "x-vercel-ai-ui-message-stream"
	HeaderValue = "v1"
)

// Done is the data of the stream's last SSE event.
const Done = "[DONE]"

// Chunk types, as the `ai` package's uiMessageChunkSchema names them.
const (
	TypeStart              = "start"
	TypeStartStep          = "start-step"
	TypeFinishStep         = "finish-step"
	TypeTextStart          = "text-start"
	TypeTextDelta          = "text-delta"
	TypeTextEnd            = "text-end"
	TypeReasoningStart     = "reasoning-start"
	TypeReasoningDelta     = "reasoning-delta"
	TypeReasoningEnd       = "reasoning-end"
	TypeToolInputStart     = "tool-input-start"
	TypeToolInputDelta     = "tool-input-delta"
	TypeToolInputAvailable = "tool-input-available"
	TypeToolOutputAvail    = "tool-output-available"
	TypeToolOutputError    = "tool-output-error"
	// Tool approval (issue 23): a call waits for the user's approval; a call the user (or the
	// approval timeout) denied.
	TypeToolApprovalRequest = "tool-approval-request"
	TypeToolOutputDenied    = "tool-output-denied"
	TypeFinish              = "finish"
	TypeAbort               = "abort"
	TypeError               = "error"
	TypeDataStatus          = "data-parley-status"
)

// Chunk is one UI message chunk. Only the fields of its type are set; the field order is the
// order of the JSON (the golden transcripts pin it).
type Chunk struct {
	Type string `json:"type"`
	// start
	MessageID string `json:"messageId,omitempty"`
	// text-*, reasoning-*, data-*
	ID    string `json:"id,omitempty"`
	Delta string `json:"delta,omitempty"`
	// tool-approval-request (the approval's id is the call's)
	ApprovalID string `json:"approvalId,omitempty"`
	// tool-*
	ToolCallID       string          `json:"toolCallId,omitempty"`
	ToolName         string          `json:"toolName,omitempty"`
	InputTextDelta   string          `json:"inputTextDelta,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	Output           *string         `json:"output,omitempty"`
	ProviderExecuted bool            `json:"providerExecuted,omitempty"`
	// error, tool-output-error
	ErrorText string `json:"errorText,omitempty"`
	// finish
	FinishReason string `json:"finishReason,omitempty"`
	// abort
	Reason string `json:"reason,omitempty"`
	// data-*
	Data      any  `json:"data,omitempty"`
	Transient bool `json:"transient,omitempty"`
	// start, finish
	MessageMetadata *Metadata `json:"messageMetadata,omitempty"`
}

// Metadata is an assistant UIMessage's metadata: the model that answered last and the tokens
// (and cost) of the run's model calls. The finish chunk carries it; GET …/messages gives the same
// from the stored messages.
type Metadata struct {
	Model string `json:"model,omitempty"`
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is parley.Usage as UIMessage metadata (the same fields, OpenAI's names).
type Usage struct {
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens,omitempty"`
	CachedTokens     int64   `json:"cached_tokens,omitempty"`
	Cost             float64 `json:"cost,omitempty"`
}
