package anthropic

import (
	"context"
	"encoding/json"
	"io"
	"sync/atomic"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// NewStream reads a Messages API event stream as parley.StreamEvents: text_delta as content,
// thinking_delta as reasoning and each finished thinking block whole (with its signature),
// tool_use blocks as tool-call deltas (input_json_delta pieces as arguments), the stop reason as
// a finish event, and usage once at message_stop. Next returns io.EOF after message_stop; a body
// that ends before it, or an error event, yields a *parley.Error with code ECUpstream.
func NewStream(body io.ReadCloser) parley.Stream { return newStream(context.Background(), body) }

func newStream(ctx context.Context, body io.ReadCloser) *stream {
	return &stream{ctx: ctx, body: body, sse: upstream.NewSSEReader(body), blocks: map[int]*block{}}
}

// block is the state of one content block between its start and its stop.
type block struct {
	typ       string
	toolIndex int             // tool_use: the index of the call among the answer's tool calls
	input     json.RawMessage // tool_use: the input of content_block_start
	gotDelta  bool            // tool_use: an input_json_delta came
	thinking  []byte          // thinking: text so far
	signature string          // thinking: from signature_delta
	data      string          // redacted_thinking
}

type stream struct {
	ctx    context.Context
	body   io.ReadCloser
	sse    *upstream.SSEReader
	blocks map[int]*block
	tools  int // tool_use blocks seen
	usage  wireUsage
	queue  []parley.StreamEvent
	err    error
	closed atomic.Bool
}

var errClosed = parley.Errorf(parley.ECCanceled, "provider stream closed")

func (s *stream) Next() (parley.StreamEvent, error) {
	for {
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			return ev, nil
		}
		if s.err != nil {
			return parley.StreamEvent{}, s.err
		}
		if s.closed.Load() {
			return parley.StreamEvent{}, errClosed
		}
		ev, err := s.sse.Next()
		if err != nil {
			if s.closed.Load() {
				s.err = errClosed
			} else {
				s.err = upstream.StreamError(s.ctx, err, "message_stop")
			}
			continue
		}
		s.queue = s.queue[:0]
		if err := s.handle(ev.Data); err != nil {
			s.err = err
		}
	}
}

// Close closes the body. It is safe to call more than once and concurrently with Next.
func (s *stream) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.body.Close()
}

// wireEvent is any event of the stream; the type inside the data decides, as the SDKs do.
type wireEvent struct {
	Type         string          `json:"type"`
	Index        int             `json:"index"`
	Message      *wireMessageOut `json:"message"`
	ContentBlock *wireBlockOut   `json:"content_block"`
	Delta        *wireDelta      `json:"delta"`
	Usage        *wireUsage      `json:"usage"`
	Error        json.RawMessage `json:"error"`
}

type wireMessageOut struct {
	ID    string     `json:"id"`
	Model string     `json:"model"`
	Usage *wireUsage `json:"usage"`
}

type wireBlockOut struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Thinking string          `json:"thinking"`
	Data     string          `json:"data"`
}

type wireDelta struct {
	Type        string  `json:"type"`
	Text        string  `json:"text"`
	PartialJSON string  `json:"partial_json"`
	Thinking    string  `json:"thinking"`
	Signature   string  `json:"signature"`
	StopReason  *string `json:"stop_reason"`
}

// wireUsage is the API's token count. input_tokens leaves out the tokens read from or written to
// the prompt cache; message_delta repeats the counts, cumulatively.
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// merge takes the counts that o sets.
func (u *wireUsage) merge(o *wireUsage) {
	if o == nil {
		return
	}
	for _, f := range []struct{ dst, src **int64 }{{&u.InputTokens, &o.InputTokens}, {&u.OutputTokens, &o.OutputTokens},
		{&u.CacheCreationInputTokens, &o.CacheCreationInputTokens}, {&u.CacheReadInputTokens, &o.CacheReadInputTokens}} {
		if *f.src != nil {
			v := **f.src
			*f.dst = &v
		}
	}
}

// normalized returns the usage as OpenAI counts it: the prompt includes cached tokens.
func (u *wireUsage) normalized() *parley.Usage {
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	out := &parley.Usage{
		PromptTokens:     val(u.InputTokens) + val(u.CacheCreationInputTokens) + val(u.CacheReadInputTokens),
		CompletionTokens: val(u.OutputTokens),
		CachedTokens:     val(u.CacheReadInputTokens),
	}
	out.TotalTokens = out.PromptTokens + out.CompletionTokens
	return out
}

// handle decodes one event's data and queues what it yields.
func (s *stream) handle(data []byte) error {
	var ev wireEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return parley.WrapError(parley.ECUpstream, err, "invalid provider stream event")
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			s.usage.merge(ev.Message.Usage)
		}
	case "content_block_start":
		if ev.ContentBlock == nil {
			return parley.Errorf(parley.ECUpstream, "provider stream: content_block_start without a block")
		}
		s.start(ev.Index, ev.ContentBlock)
	case "content_block_delta":
		if ev.Delta != nil {
			s.delta(ev.Index, ev.Delta)
		}
	case "content_block_stop":
		s.stop(ev.Index)
	case "message_delta":
		s.usage.merge(ev.Usage)
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: finishReason(*ev.Delta.StopReason)})
		}
	case "message_stop":
		s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamUsage, Usage: s.usage.normalized()})
		return io.EOF
	case "error":
		e := upstream.EventError(data)
		return parley.WrapError(parley.ECUpstream, e, "provider stream failed")
	}
	// "ping" and event types added later are skipped, as the API's versioning policy asks.
	return nil
}

func (s *stream) start(index int, cb *wireBlockOut) {
	b := &block{typ: cb.Type}
	s.blocks[index] = b
	switch cb.Type {
	case "text":
		if cb.Text != "" {
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamContent, Content: cb.Text})
		}
	case "tool_use":
		b.toolIndex, b.input = s.tools, cb.Input
		s.tools++
		s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamToolCall,
			ToolCall: &parley.ToolCallDelta{Index: b.toolIndex, ID: cb.ID, Name: cb.Name}})
	case "thinking":
		if cb.Thinking != "" {
			b.thinking = append(b.thinking, cb.Thinking...)
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: cb.Thinking})
		}
	case "redacted_thinking":
		b.data = cb.Data
	}
}

func (s *stream) delta(index int, d *wireDelta) {
	b := s.blocks[index]
	if b == nil {
		return
	}
	switch d.Type {
	case "text_delta":
		if d.Text != "" {
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamContent, Content: d.Text})
		}
	case "thinking_delta":
		if d.Thinking != "" {
			b.thinking = append(b.thinking, d.Thinking...)
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: d.Thinking})
		}
	case "signature_delta":
		b.signature += d.Signature
	case "input_json_delta":
		if b.typ == "tool_use" && d.PartialJSON != "" {
			b.gotDelta = true
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamToolCall,
				ToolCall: &parley.ToolCallDelta{Index: b.toolIndex, Arguments: d.PartialJSON}})
		}
	}
}

func (s *stream) stop(index int) {
	b := s.blocks[index]
	if b == nil {
		return
	}
	delete(s.blocks, index)
	switch b.typ {
	case "tool_use":
		if !b.gotDelta { // the whole input came with the start (or there is none)
			args := "{}"
			if upstream.IsSet(b.input) {
				args = string(b.input)
			}
			s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamToolCall,
				ToolCall: &parley.ToolCallDelta{Index: b.toolIndex, Arguments: args}})
		}
	case "thinking":
		s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamThinking,
			Thinking: &parley.ThinkingBlock{Type: "thinking", Thinking: string(b.thinking), Signature: b.signature}})
	case "redacted_thinking":
		s.queue = append(s.queue, parley.StreamEvent{Type: parley.StreamThinking,
			Thinking: &parley.ThinkingBlock{Type: "redacted_thinking", Data: b.data}})
	}
}

// finishReason maps the API's stop_reason to the OpenAI finish reasons.
func finishReason(r string) string {
	switch r {
	case "end_turn", "stop_sequence", "pause_turn":
		return "stop"
	case "tool_use":
		return "tool_calls"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "refusal":
		return "content_filter"
	}
	return r
}
