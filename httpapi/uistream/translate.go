package uistream

import (
	"encoding/json"
	"strconv"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/redact"
)

// Translator turns the events of one run into the chunks of one assistant UIMessage, whose id is
// the run's id. Each model call is a step (start-step … finish-step) holding at most one
// reasoning part ("r<step>") and one text part ("t<step>"), then the tool calls the model made
// (provider-executed: Parley runs them) and their results. Feed it the run's events in order with
// Event; it returns when the run's done event has been translated (Ended).
//
// Streamed text is a draft in Parley (docs/protocol.md, "Showing streamed text"); a UI stream
// cannot take back what it sent. A step's stored message fills in what was not streamed (a
// provider that does not stream); a draft that a run taken over after a crash regenerates stays
// in the message as sent (GET …/messages is the stored truth).
type Translator struct {
	runID string

	started  bool
	step     int  // the current step's number (1-based); 0 before the first
	inStep   bool // a step is open
	callDone bool // the open step's model call ended (its message was stored)
	textOpen bool
	reasOpen bool
	streamed struct{ text, reasoning bool } // what the open step streamed

	errText string // the run's error, sent with its end

	recorded map[string]bool // assistant messages already translated (a takeover records again)
	calls    map[string]bool // tool calls announced and not yet answered
	usage    parley.Usage
	hasUsage bool
	model    string
	ended    bool

	asked bool            // a tool-approval-request went out: the stream ends when the run waits
	held  map[string]bool // NewContinuation: nothing goes out until one of these calls is resolved
}

// NewTranslator returns a translator for the run with the given id.
func NewTranslator(runID string) *Translator {
	return &Translator{runID: runID, recorded: map[string]bool{}, calls: map[string]bool{}}
}

// NewContinuation returns a translator that goes on with the run's assistant message after the
// user answered the approvals of callIDs (useChat's next request after addToolApprovalResponse):
// fed the run's events from its start, it sends nothing until the approval_resolved of one of
// those calls, then a start chunk of the same message and the rest of the run.
//
// Tool approval in the UI message stream: an approval_required event of a call becomes a
// tool-approval-request chunk (its approvalId is the call's id); when the run then waits (status
// awaiting_approval) the stream ends with finish, as the AI SDK's own server does, and the run
// waits on the server. A call denied (or expired) becomes tool-output-denied.
func NewContinuation(runID string, callIDs []string) *Translator {
	t := NewTranslator(runID)
	t.held = map[string]bool{}
	for _, id := range callIDs {
		t.held[id] = true
		t.calls[id] = true // a run taken over does not record its assistant message again
	}
	return t
}

// Ended reports whether the run's done event was translated (the stream's last chunk sent).
func (t *Translator) Ended() bool { return t.ended }

// Event translates ev, a run event, and passes its chunks to emit. Events of other runs and
// events after the end are ignored.
func (t *Translator) Event(ev *parley.Event, emit func(Chunk)) {
	if t.ended || (ev.RunID != "" && ev.RunID != t.runID) {
		return
	}
	if t.held != nil {
		if ev.Type != parley.EventApprovalResolved || ev.Approval == nil || !t.held[ev.Approval.CallID] {
			t.event(ev, func(Chunk) {}) // the client has all this already
			return
		}
		t.held = nil
		emit(Chunk{Type: TypeStart, MessageID: t.runID})
	}
	t.event(ev, emit)
}

func (t *Translator) event(ev *parley.Event, emit func(Chunk)) {
	if !t.started {
		t.started = true
		emit(Chunk{Type: TypeStart, MessageID: t.runID})
	}
	switch ev.Type {
	case parley.EventReasoning:
		t.modelOutput(emit)
		if !t.reasOpen {
			t.reasOpen = true
			emit(Chunk{Type: TypeReasoningStart, ID: t.partID("r")})
		}
		t.streamed.reasoning = true
		emit(Chunk{Type: TypeReasoningDelta, ID: t.partID("r"), Delta: ev.Content})
	case parley.EventChunk:
		t.modelOutput(emit)
		if !t.textOpen {
			t.textOpen = true
			emit(Chunk{Type: TypeTextStart, ID: t.partID("t")})
		}
		t.streamed.text = true
		emit(Chunk{Type: TypeTextDelta, ID: t.partID("t"), Delta: ev.Content})
	case parley.EventRecord:
		if m := ev.Message; m != nil && m.Role == parley.RoleAssistant && !t.recorded[m.ID] {
			t.recorded[m.ID] = true
			t.assistant(m, emit)
		}
	case parley.EventToolResult:
		if m := ev.Message; m != nil && t.calls[m.ToolCallID] {
			delete(t.calls, m.ToolCallID)
			out := m.Content.String()
			if m.Success != nil && !*m.Success {
				emit(Chunk{Type: TypeToolOutputError, ToolCallID: m.ToolCallID, ErrorText: nonEmpty(out, "the tool failed"), ProviderExecuted: true})
			} else {
				emit(Chunk{Type: TypeToolOutputAvail, ToolCallID: m.ToolCallID, Output: &out, ProviderExecuted: true})
			}
		}
	case parley.EventApprovalRequired:
		if a := ev.Approval; a != nil && t.calls[a.CallID] {
			t.asked = true
			emit(Chunk{Type: TypeToolApprovalRequest, ApprovalID: a.CallID, ToolCallID: a.CallID})
		}
	case parley.EventApprovalResolved:
		if a := ev.Approval; a != nil && t.calls[a.CallID] && a.Decision != parley.ApprovalApproved {
			// Its tool message (the refusal the model reads) is not sent as an error as well.
			delete(t.calls, a.CallID)
			emit(Chunk{Type: TypeToolOutputDenied, ToolCallID: a.CallID})
		}
	case parley.EventUsage:
		if ev.Usage != nil {
			t.usage.Add(*ev.Usage)
			t.hasUsage = true
		}
	case parley.EventStatus:
		if ev.State == parley.RunRecovered {
			// The draft of the server that died is not continued: the new one answers afresh,
			// in a step of its own.
			t.closeParts(emit)
			if t.inStep {
				t.callDone = true
			}
		}
		emit(Chunk{Type: TypeDataStatus, Data: map[string]string{"state": ev.State}, Transient: true})
		if ev.State == parley.RunAwaitingApproval && t.asked {
			// The user answers in the next request (NewContinuation); the run waits here.
			t.asked = false
			t.closeParts(emit)
			if t.inStep {
				emit(Chunk{Type: TypeFinishStep})
				t.inStep = false
			}
			if t.held == nil {
				emit(Chunk{Type: TypeFinish, FinishReason: "tool-calls", MessageMetadata: t.metadata()})
				t.ended = true
			}
		}
	case parley.EventError:
		// Sent with the end: useChat stops reading at an error chunk and lets its user send
		// again, which the session takes only once the run has ended (done).
		t.errText = "the run failed"
		if ev.Error != nil && ev.Error.Message != "" {
			t.errText = redact.String(ev.Error.Message)
		}
	case parley.EventDone:
		t.closeParts(emit)
		if t.errText != "" {
			emit(Chunk{Type: TypeError, ErrorText: t.errText})
		}
		if t.inStep {
			emit(Chunk{Type: TypeFinishStep})
			t.inStep = false
		}
		if ev.FinishReason == parley.FinishAborted {
			emit(Chunk{Type: TypeAbort, Reason: "aborted"})
		}
		emit(Chunk{Type: TypeFinish, FinishReason: finishReason(ev.FinishReason), MessageMetadata: t.metadata()})
		t.ended = true
	}
}

// modelOutput opens the step a model call's output belongs to: the first, or a new one after
// the previous call ended.
func (t *Translator) modelOutput(emit func(Chunk)) {
	if t.inStep && !t.callDone {
		return
	}
	t.closeParts(emit)
	if t.inStep {
		emit(Chunk{Type: TypeFinishStep})
	}
	t.step++
	t.inStep, t.callDone = true, false
	t.streamed.text, t.streamed.reasoning = false, false
	emit(Chunk{Type: TypeStartStep})
}

// assistant translates a stored assistant message: the end of its model call.
func (t *Translator) assistant(m *parley.Message, emit func(Chunk)) {
	t.modelOutput(emit)
	if m.Reasoning != "" && !t.streamed.reasoning {
		emit(Chunk{Type: TypeReasoningStart, ID: t.partID("r")})
		emit(Chunk{Type: TypeReasoningDelta, ID: t.partID("r"), Delta: m.Reasoning})
		t.reasOpen = true
	}
	if text := m.Content.String(); text != "" && !t.streamed.text {
		emit(Chunk{Type: TypeTextStart, ID: t.partID("t")})
		emit(Chunk{Type: TypeTextDelta, ID: t.partID("t"), Delta: text})
		t.textOpen = true
	}
	t.closeParts(emit)
	for _, c := range m.ToolCalls {
		emit(Chunk{Type: TypeToolInputStart, ToolCallID: c.ID, ToolName: c.Function.Name, ProviderExecuted: true})
		if c.Function.Arguments != "" {
			emit(Chunk{Type: TypeToolInputDelta, ToolCallID: c.ID, InputTextDelta: c.Function.Arguments})
		}
		emit(Chunk{Type: TypeToolInputAvailable, ToolCallID: c.ID, ToolName: c.Function.Name, Input: ToolInput(c.Function.Arguments), ProviderExecuted: true})
		t.calls[c.ID] = true
	}
	if m.Model != "" {
		t.model = m.Model
	}
	t.callDone = true
}

// closeParts ends the open text and reasoning parts.
func (t *Translator) closeParts(emit func(Chunk)) {
	if t.reasOpen {
		emit(Chunk{Type: TypeReasoningEnd, ID: t.partID("r")})
		t.reasOpen = false
	}
	if t.textOpen {
		emit(Chunk{Type: TypeTextEnd, ID: t.partID("t")})
		t.textOpen = false
	}
}

func (t *Translator) partID(kind string) string { return kind + strconv.Itoa(t.step) }

func (t *Translator) metadata() *Metadata {
	md := &Metadata{Model: t.model}
	if t.hasUsage {
		md.Usage = usageOf(t.usage)
	}
	if md.Model == "" && md.Usage == nil {
		return nil
	}
	return md
}

// ToolInput is a tool call's arguments as a chunk's or part's input: the JSON the model wrote, or,
// when it is not valid JSON, that text as a JSON string.
func ToolInput(args string) json.RawMessage {
	if args == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

// finishReason maps a Parley finish reason to the AI SDK's.
func finishReason(r string) string {
	switch r {
	case parley.FinishStop:
		return "stop"
	case parley.FinishError:
		return "error"
	default: // max_iterations, aborted, interrupted
		return "other"
	}
}

func usageOf(u parley.Usage) *Usage {
	return &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens,
		ReasoningTokens: u.ReasoningTokens, CachedTokens: u.CachedTokens, Cost: u.Cost}
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
