package parley

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
)

// Provider is a model endpoint. Adapters translate ChatRequest into their vendor's wire format and
// the vendor's stream back into StreamEvents; nothing vendor-specific leaves the adapter.
type Provider interface {
	// Stream starts one model call. The returned Stream must be closed by the caller.
	Stream(ctx context.Context, req *ChatRequest) (Stream, error)
}

// ChatRequest is a provider-agnostic model call (seed 001 §1.03).
type ChatRequest struct {
	Model       string     // the model name as the provider knows it
	Messages    []Message  // OpenAI-format history; metadata fields are ignored
	Tools       []ToolSpec // tools offered to the model
	ToolChoice  string     // "", "auto", "none" or "required"
	Temperature *float64
	MaxTokens   int
}

// ToolSpec describes a tool to a model: a name, a description and a JSON Schema for its arguments.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// StreamEventType tells which field of a StreamEvent is set.
type StreamEventType string

// The stream event types (seed 001 §1.04, streamed).
const (
	StreamContent   StreamEventType = "content"   // Content holds a text delta
	StreamReasoning StreamEventType = "reasoning" // Reasoning holds a reasoning delta
	StreamToolCall  StreamEventType = "tool_call" // ToolCall holds a tool-call delta
	StreamFinish    StreamEventType = "finish"    // FinishReason is set
	StreamUsage     StreamEventType = "usage"     // Usage is set
	StreamThinking  StreamEventType = "thinking"  // Thinking holds one whole signed reasoning block
)

// StreamEvent is one provider-agnostic increment of a model's answer.
type StreamEvent struct {
	Type         StreamEventType
	Content      string
	Reasoning    string
	ToolCall     *ToolCallDelta
	FinishReason string
	Usage        *Usage
	// Thinking is a finished block of signed reasoning. Its text has already come as StreamReasoning
	// events; this event carries the block whole, with its signature, to be stored.
	Thinking *ThinkingBlock
}

// ToolCallDelta is a piece of one tool call; pieces with the same Index belong to one call. The
// first piece of a call carries its ID and Name; Arguments pieces are concatenated in order.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
	// ThoughtSignature is Gemini's signature for the call, sent with its first piece.
	ThoughtSignature string `json:",omitempty"`
}

// Stream yields a model's answer as events. Next returns io.EOF after the last event.
type Stream interface {
	Next() (StreamEvent, error)
	Close() error
}

// Response is a model's whole answer (seed 001 §1.04).
type Response struct {
	Content      string
	Reasoning    string
	ToolCalls    []ToolCall
	FinishReason string
	Usage        *Usage
	// ThinkingBlocks are the signed reasoning blocks, in order (Anthropic).
	ThinkingBlocks []ThinkingBlock `json:",omitempty"`
}

// HasToolCalls reports whether the model asked for tools.
func (r *Response) HasToolCalls() bool { return len(r.ToolCalls) > 0 }

// ResponseBuilder assembles a Response from stream events; tool-call deltas are joined by index.
type ResponseBuilder struct {
	content   strings.Builder
	reasoning strings.Builder
	calls     map[int]*ToolCall
	args      map[int]*strings.Builder
	finish    string
	usage     *Usage
	thinking  []ThinkingBlock
}

// Add folds one event into the response.
func (b *ResponseBuilder) Add(ev StreamEvent) {
	switch ev.Type {
	case StreamContent:
		b.content.WriteString(ev.Content)
	case StreamReasoning:
		b.reasoning.WriteString(ev.Reasoning)
	case StreamToolCall:
		if ev.ToolCall == nil {
			return
		}
		if b.calls == nil {
			b.calls = map[int]*ToolCall{}
			b.args = map[int]*strings.Builder{}
		}
		d := ev.ToolCall
		c, ok := b.calls[d.Index]
		if !ok {
			c = &ToolCall{Type: "function"}
			b.calls[d.Index] = c
			b.args[d.Index] = &strings.Builder{}
		}
		if d.ID != "" {
			c.ID = d.ID
		}
		if d.Name != "" {
			c.Function.Name = d.Name
		}
		if d.ThoughtSignature != "" {
			c.ExtraContent = &ExtraContent{Google: &GoogleExtra{ThoughtSignature: d.ThoughtSignature}}
		}
		b.args[d.Index].WriteString(d.Arguments)
	case StreamFinish:
		b.finish = ev.FinishReason
	case StreamUsage:
		if ev.Usage != nil {
			u := *ev.Usage
			b.usage = &u
		}
	case StreamThinking:
		if ev.Thinking != nil {
			b.thinking = append(b.thinking, *ev.Thinking)
		}
	}
}

// Response returns the answer assembled so far, tool calls in index order.
func (b *ResponseBuilder) Response() *Response {
	r := &Response{
		Content:      b.content.String(),
		Reasoning:    b.reasoning.String(),
		FinishReason: b.finish,
		Usage:        b.usage,

		ThinkingBlocks: b.thinking,
	}
	idx := make([]int, 0, len(b.calls))
	for i := range b.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		c := *b.calls[i]
		c.Function.Arguments = b.args[i].String()
		r.ToolCalls = append(r.ToolCalls, c)
	}
	return r
}

// ModelReporter is implemented by a Stream that can tell which model answered: "provider/model".
// A router that fell back to another model reports the one that did.
type ModelReporter interface {
	Model() string
}
