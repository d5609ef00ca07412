package parley

import (
	"context"
	"time"
)

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
	EventStatus         EventType = "status"           // State: the run paused, resumed or was taken over
	EventArtifact       EventType = "artifact"         // Artifact: a tool stored a new artifact version
	EventWebSearch      EventType = "web_search"       // WebSearch: a web search's query and sources
	EventImage          EventType = "image"            // Image: a tool made an image (stored, or inline when degraded)
	EventError          EventType = "error"            // Error: the run failed (a done event follows)

	// Tool approval (issue 23): a call waits for the session owner's decision, and got it.
	EventApprovalRequired EventType = "approval_required" // Approval: a call waits for approval
	EventApprovalResolved EventType = "approval_resolved" // Approval: a call was approved, denied or expired
	EventDone             EventType = "done"              // the run ended; FinishReason tells how; always last

	// Workspace events (issue 20), emitted by the built-in tools during a run.
	EventTodoUpdate   EventType = "todo_update"   // Todos: the session's whole todo list after a change
	EventMemoryUpdate EventType = "memory_update" // Memory: an entry of the session's project memory changed
)

// Event is one step of a run. Seq numbers the events of a session's stream: it grows by one from
// event to event, across runs, so a subscriber that has seen Seq n asks for the events after n.
// Only a run whose process died leaves a gap (the numbers it had reserved but not used).
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
	State        string     `json:"state,omitempty"` // status events: one of the Run* states
	FinishReason string     `json:"finish_reason,omitempty"`
	Iterations   int        `json:"iterations,omitempty"`

	// Todos is the whole todo list of a todo_update event (an empty list is sent as []).
	Todos     []Todo         `json:"todos,omitzero"`
	Memory    *MemoryChange  `json:"memory,omitempty"`
	Artifact  *Artifact      `json:"artifact,omitempty"`
	WebSearch *WebSearchInfo `json:"web_search,omitempty"`
	Image     *ImageInfo     `json:"image,omitempty"`
	Approval  *Approval      `json:"approval,omitempty"`
}

// ErrorBody is the client-visible form of an error.
type ErrorBody struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// RetryAfter is, on a rate_limited or unavailable error of a run, how many seconds to wait
	// before trying again (the Retry-After of the batch chat's answer); 0 when unknown.
	RetryAfter int `json:"retry_after,omitempty"`
}

// RetryAfterSeconds is the Retry-After, in whole seconds rounded up, that err carries for a
// client: its RetryAfter when err is rate_limited or unavailable, or 0.
func RetryAfterSeconds(err error) int {
	code := CodeOf(err)
	if code != ECRateLimited && code != ECUnavailable {
		return 0
	}
	d := RetryAfterOf(err)
	if d <= 0 {
		return 0
	}
	return max(1, int((d+time.Second-1)/time.Second))
}

// Finish reasons of a done event.
const (
	FinishStop          = "stop"           // the model answered without tools
	FinishMaxIterations = "max_iterations" // the loop hit max_iterations
	FinishError         = "error"          // the run failed; an error event came before
	FinishAborted       = "aborted"        // the run was cancelled
	// FinishInterrupted: the process running the run died and the run could not go on.
	FinishInterrupted = "interrupted"
)

// The states a status event reports.
const (
	RunPaused  = "paused"  // the run waits at a step boundary until it is resumed
	RunResumed = "running" // the run goes on after a pause (or after waiting for approval)
	// RunAwaitingApproval: the run waits for the owner's decision on a tool call.
	RunAwaitingApproval = "awaiting_approval"
	// RunRecovered: the process running the run died, and this one took the run over; it goes on
	// from its last stored step (or ends at once, interrupted).
	RunRecovered = "recovered"
)

// EncodedEvent is an event of a session's stream with its JSON, as json.Marshal encodes the
// Event: a store keeps the bytes the stream already made for its readers, so that an event is
// encoded once.
type EncodedEvent struct {
	Seq  int64
	JSON []byte
	// Event is the event itself: needed where JSON is left to be made (RunFinish), otherwise
	// optional.
	Event *Event
}

// EncodedEventAppender is an EventStore that also takes events already encoded.
type EncodedEventAppender interface {
	// AppendEncodedEvents is AppendEvents for events whose JSON is made (each with Seq and JSON
	// set): their JSON is stored as it is.
	AppendEncodedEvents(ctx context.Context, sessionID string, at time.Time, evs []EncodedEvent) error
}

// EventStore keeps each session's stream of run events, so that a client can resume the stream
// after the run has left the memory of every server, and hands out the stream's sequence numbers.
type EventStore interface {
	// ReserveEventSeqs reserves n sequence numbers of the session's stream and returns the first;
	// the reservation survives a crash, so numbers are never given out twice.
	ReserveEventSeqs(ctx context.Context, sessionID string, n int64) (first int64, err error)
	// ReleaseEventSeqs gives back the numbers after last when limit is still the last number
	// reserved, so that the session's next run goes on from last+1.
	ReleaseEventSeqs(ctx context.Context, sessionID string, limit, last int64) error
	// AppendEvents stores events of the session (each with its Seq set). An event whose Seq is
	// already stored is skipped, so that a retried write is harmless. It keeps nothing of evs
	// once it returns: the caller reuses the slice.
	AppendEvents(ctx context.Context, sessionID string, at time.Time, evs []Event) error
	// ListEvents returns up to limit events with Seq > after, in order.
	ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]Event, error)
	// DeleteEventsBefore deletes the events stored before t and returns how many.
	DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error)
}
