package parley

// EventType names a run event. The same names are used as SSE event names.
type EventType string

// The run events, in the order a run produces them.
const (
	EventStart          EventType = "start"            // the run began: RunID, SessionID, Model
	EventChunk          EventType = "chunk"            // Content: a text delta of the answer
	EventReasoning      EventType = "reasoning"        // Content: a reasoning delta
	EventRecord         EventType = "record"           // Message: a user or assistant message was stored
	EventToolCallsStart EventType = "tool_calls_start" // ToolCalls: the model asked for these tools
	EventToolCall       EventType = "tool_call"        // ToolCall: one tool call starts executing
	EventToolResult     EventType = "tool_result"      // Message: a tool message was stored
	EventUsage          EventType = "usage"            // Usage: tokens of one model call
	EventError          EventType = "error"            // Error: the run failed (a done event follows)
	EventDone           EventType = "done"             // the run ended; FinishReason tells how; always last
)

// Event is one step of a run. Seq numbers a run's events from 1 without gaps; a subscriber that
// has seen Seq n resumes with n+1.
type Event struct {
	Seq       int64     `json:"seq"`
	Type      EventType `json:"type"`
	RunID     string    `json:"run_id"`
	SessionID string    `json:"session_id"`

	Model        string     `json:"model,omitempty"`
	Content      string     `json:"content,omitempty"`
	Message      *Message   `json:"message,omitempty"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
	ToolCall     *ToolCall  `json:"tool_call,omitempty"`
	Usage        *Usage     `json:"usage,omitempty"`
	Error        *ErrorBody `json:"error,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"`
	Iterations   int        `json:"iterations,omitempty"`
}

// ErrorBody is the client-visible form of an error.
type ErrorBody struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

// Finish reasons of a done event.
const (
	FinishStop          = "stop"           // the model answered without tools
	FinishMaxIterations = "max_iterations" // the loop hit max_iterations
	FinishError         = "error"          // the run failed; an error event came before
	FinishAborted       = "aborted"        // the run was cancelled
)
