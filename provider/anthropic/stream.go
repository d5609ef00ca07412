package anthropic

import (
	"context"
	"encoding/json"
	"io"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// NewStream reads a Messages API event stream as parley.StreamEvents: text_delta as content,
// thinking_delta as reasoning and each finished thinking block whole (with its signature),
// tool_use blocks as tool-call deltas (input_json_delta pieces as arguments), the stop reason as
// a finish event, and usage once at message_stop. Next returns io.EOF after message_stop; a body
// that ends before it, or an error event, yields a *parley.Error with code ECUpstream.
func NewStream(body io.ReadCloser) parley.Stream { return newStream(context.Background(), body) }

func newStream(ctx context.Context, body io.ReadCloser) *upstream.Stream {
	d := &decoder{sse: upstream.NewSSEReader(body), blocks: map[int]*block{}}
	return upstream.NewStream(ctx, body, "message_stop", d.frame)
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

// decoder is the state machine over the events of one answer.
type decoder struct {
	sse    *upstream.SSEReader
	blocks map[int]*block
	tools  int // tool_use blocks seen
	usage  wireUsage
	out    []parley.StreamEvent // the events of the event being handled
}

// frame reads one event and appends what it yields to out.
func (d *decoder) frame(out []parley.StreamEvent) ([]parley.StreamEvent, error) {
	ev, err := d.sse.Next()
	if err != nil {
		return out, upstream.Cut(err)
	}
	d.out = out
	err = d.handle(ev.Data)
	return d.out, err
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
func (d *decoder) handle(data []byte) error {
	var ev wireEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return parley.WrapError(parley.ECUpstream, err, "invalid provider stream event")
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			d.usage.merge(ev.Message.Usage)
		}
	case "content_block_start":
		if ev.ContentBlock == nil {
			return parley.Errorf(parley.ECUpstream, "provider stream: content_block_start without a block")
		}
		d.start(ev.Index, ev.ContentBlock)
	case "content_block_delta":
		if ev.Delta != nil {
			d.delta(ev.Index, ev.Delta)
		}
	case "content_block_stop":
		d.stop(ev.Index)
	case "message_delta":
		d.usage.merge(ev.Usage)
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: finishReason(*ev.Delta.StopReason)})
		}
	case "message_stop":
		d.out = append(d.out, parley.StreamEvent{Type: parley.StreamUsage, Usage: d.usage.normalized()})
		return io.EOF
	case "error":
		e := upstream.EventError(data)
		return parley.WrapError(parley.ECUpstream, e, "provider stream failed")
	}
	// "ping" and event types added later are skipped, as the API's versioning policy asks.
	return nil
}

func (d *decoder) start(index int, cb *wireBlockOut) {
	b := &block{typ: cb.Type}
	d.blocks[index] = b
	switch cb.Type {
	case "text":
		if cb.Text != "" {
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamContent, Content: cb.Text})
		}
	case "tool_use":
		b.toolIndex, b.input = d.tools, cb.Input
		d.tools++
		d.out = append(d.out, parley.StreamEvent{Type: parley.StreamToolCall,
			ToolCall: &parley.ToolCallDelta{Index: b.toolIndex, ID: cb.ID, Name: cb.Name}})
	case "thinking":
		if cb.Thinking != "" {
			b.thinking = append(b.thinking, cb.Thinking...)
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: cb.Thinking})
		}
	case "redacted_thinking":
		b.data = cb.Data
	}
}

func (d *decoder) delta(index int, w *wireDelta) {
	b := d.blocks[index]
	if b == nil {
		return
	}
	switch w.Type {
	case "text_delta":
		if w.Text != "" {
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamContent, Content: w.Text})
		}
	case "thinking_delta":
		if w.Thinking != "" {
			b.thinking = append(b.thinking, w.Thinking...)
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: w.Thinking})
		}
	case "signature_delta":
		b.signature += w.Signature
	case "input_json_delta":
		if b.typ == "tool_use" && w.PartialJSON != "" {
			b.gotDelta = true
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamToolCall,
				ToolCall: &parley.ToolCallDelta{Index: b.toolIndex, Arguments: w.PartialJSON}})
		}
	}
}

func (d *decoder) stop(index int) {
	b := d.blocks[index]
	if b == nil {
		return
	}
	delete(d.blocks, index)
	switch b.typ {
	case "tool_use":
		if !b.gotDelta { // the whole input came with the start (or there is none)
			args := "{}"
			if upstream.IsSet(b.input) {
				args = string(b.input)
			}
			d.out = append(d.out, parley.StreamEvent{Type: parley.StreamToolCall,
				ToolCall: &parley.ToolCallDelta{Index: b.toolIndex, Arguments: args}})
		}
	case "thinking":
		d.out = append(d.out, parley.StreamEvent{Type: parley.StreamThinking,
			Thinking: &parley.ThinkingBlock{Type: "thinking", Thinking: string(b.thinking), Signature: b.signature}})
	case "redacted_thinking":
		d.out = append(d.out, parley.StreamEvent{Type: parley.StreamThinking,
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
