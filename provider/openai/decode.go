package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// DecodeResponse turns a non-streamed Chat Completions response body into a parley.Response.
// Only the first choice is read. A body carrying an error object, no choices or invalid JSON
// yields a *parley.Error with code ECUpstream.
func DecodeResponse(body []byte) (*parley.Response, error) {
	var w struct {
		Choices []struct {
			Index        int             `json:"index"`
			Message      wireRespMessage `json:"message"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage *wireUsage      `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, parley.WrapError(parley.ECUpstream, err, "invalid provider response")
	}
	if upstream.IsSet(w.Error) {
		return nil, parley.WrapError(parley.ECUpstream, upstream.ParseError(w.Error), "provider returned an error")
	}
	if len(w.Choices) == 0 {
		return nil, parley.Errorf(parley.ECUpstream, "provider returned no choices")
	}
	c := w.Choices[0]
	m := c.Message
	r := &parley.Response{Content: string(m.Content), Reasoning: m.reasoning()}
	if r.Content == "" {
		r.Content = string(m.Refusal)
	}
	if c.FinishReason != nil {
		r.FinishReason = *c.FinishReason
	}
	for _, tc := range m.ToolCalls {
		typ := tc.Type
		if typ == "" {
			typ = "function"
		}
		r.ToolCalls = append(r.ToolCalls, parley.ToolCall{
			ID: tc.ID, Type: typ,
			Function: parley.FunctionCall{Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)},
		})
	}
	if w.Usage != nil {
		u := w.Usage.usage()
		r.Usage = &u
	}
	return r, nil
}

type wireRespMessage struct {
	Content      textField       `json:"content"`
	Reasoning    textField       `json:"reasoning_content"`
	ReasoningAlt json.RawMessage `json:"reasoning"` // Ollama's and OpenRouter's name for it
	Refusal      textField       `json:"refusal"`
	ToolCalls    []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string    `json:"name"`
			Arguments argsField `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (m *wireRespMessage) reasoning() string {
	if m.Reasoning != "" {
		return string(m.Reasoning)
	}
	return altReasoning(m.ReasoningAlt)
}

// chunkDecoder turns chat.completion.chunk objects into stream events. It keeps the state
// needed to number tool calls from endpoints that leave out the index.
type chunkDecoder struct {
	lastIndex int // index of the last tool-call delta, -1 before the first
	lastID    string
	count     int       // one more than the highest tool-call index seen
	ch        wireChunk // decoded into again for each chunk, so that its choices are allocated once
}

// wireChunk is one chat.completion.chunk object.
type wireChunk struct {
	Choices []wireChoice    `json:"choices"`
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type wireChoice struct {
	Index        int       `json:"index"`
	Delta        wireDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

func newChunkDecoder() *chunkDecoder { return &chunkDecoder{lastIndex: -1} }

// decode appends the events of one chunk to evs, in the order reasoning, content, tool calls,
// finish, usage. Choices other than the first (index 0) are ignored: Parley never asks for n > 1.
func (d *chunkDecoder) decode(evs []parley.StreamEvent, data []byte) ([]parley.StreamEvent, error) {
	// encoding/json decodes a slice's elements into its backing array without zeroing them: the
	// last chunk's choices are cleared first.
	ch := d.reset()
	if !fastChunk(data, ch) {
		ch = d.reset()
		if err := json.Unmarshal(data, ch); err != nil {
			return evs, parley.WrapError(parley.ECUpstream, err, "invalid provider stream chunk")
		}
	}
	if upstream.IsSet(ch.Error) {
		return evs, parley.WrapError(parley.ECUpstream, upstream.ParseError(ch.Error), "provider stream failed")
	}
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue
		}
		if r := c.Delta.reasoning(); r != "" {
			evs = append(evs, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: r})
		}
		if c.Delta.Content != "" {
			evs = append(evs, parley.StreamEvent{Type: parley.StreamContent, Content: string(c.Delta.Content)})
		}
		if c.Delta.Refusal != "" { // a refusal is the model's answer to the user
			evs = append(evs, parley.StreamEvent{Type: parley.StreamContent, Content: string(c.Delta.Refusal)})
		}
		for _, tc := range c.Delta.ToolCalls {
			idx := d.index(tc.Index, tc.ID)
			if tc.ID == "" && tc.Function.Name == "" && tc.Function.Arguments == "" {
				continue
			}
			evs = append(evs, parley.StreamEvent{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{
				Index: idx, ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments),
			}})
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			evs = append(evs, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: *c.FinishReason})
		}
	}
	if ch.Usage != nil {
		u := ch.Usage.usage()
		evs = append(evs, parley.StreamEvent{Type: parley.StreamUsage, Usage: &u})
	}
	return evs, nil
}

// reset clears the last chunk's decoding, keeping its choices' backing array.
func (d *chunkDecoder) reset() *wireChunk {
	ch := &d.ch
	clear(ch.Choices[:cap(ch.Choices)])
	*ch = wireChunk{Choices: ch.Choices[:0]}
	return ch
}

// index returns the tool-call index of a delta. Without an explicit index, a delta with a new
// id starts the next call and any other delta continues the last one.
func (d *chunkDecoder) index(explicit *int, id string) int {
	idx := d.lastIndex
	switch {
	case explicit != nil:
		idx = *explicit
	case idx < 0 || id != "" && id != d.lastID:
		idx = d.count
	}
	d.lastIndex = idx
	if id != "" {
		d.lastID = id
	}
	if idx >= d.count {
		d.count = idx + 1
	}
	return idx
}

type wireDelta struct {
	Content      textField       `json:"content"`
	Reasoning    textField       `json:"reasoning_content"`
	ReasoningAlt json.RawMessage `json:"reasoning"`
	Refusal      textField       `json:"refusal"`
	ToolCalls    []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string    `json:"name"`
			Arguments argsField `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (d *wireDelta) reasoning() string {
	if d.Reasoning != "" {
		return string(d.Reasoning)
	}
	return altReasoning(d.ReasoningAlt)
}

// altReasoning reads the "reasoning" field when it is a string and ignores any other form.
func altReasoning(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		if s, err := jsonString(raw); err == nil {
			return s
		}
	}
	return ""
}

// jsonString decodes b, a JSON string (quotes included) that the enclosing decoder has already
// checked. Text without escapes and in valid UTF-8 is the bytes between the quotes, copied once;
// anything else goes through encoding/json, which also replaces invalid UTF-8.
func jsonString(b []byte) (string, error) {
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' {
		if in := b[1 : n-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
			return string(in), nil
		}
	}
	var s string
	err := json.Unmarshal(b, &s)
	return s, err
}

type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (w *wireUsage) usage() parley.Usage {
	u := parley.Usage{PromptTokens: w.PromptTokens, CompletionTokens: w.CompletionTokens, TotalTokens: w.TotalTokens}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	if w.PromptTokensDetails != nil {
		u.CachedTokens = w.PromptTokensDetails.CachedTokens
	}
	if w.CompletionTokensDetails != nil {
		u.ReasoningTokens = w.CompletionTokensDetails.ReasoningTokens
	}
	return u
}

// textField is text sent as a string, null, or an array of parts whose text parts are joined.
type textField string

func (t *textField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*t = ""
	case b[0] == '"':
		s, err := jsonString(b)
		if err != nil {
			return err
		}
		*t = textField(s)
	case b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var s []byte
		for _, p := range parts {
			if p.Type == "text" {
				s = append(s, p.Text...)
			}
		}
		*t = textField(s)
	default:
		return errors.New("text must be a string, null or an array of parts")
	}
	return nil
}

// argsField is a tool call's arguments: a JSON-encoded string as OpenAI sends them, or an
// object some compatible servers send instead (kept as its JSON text).
type argsField string

func (a *argsField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*a = ""
	case b[0] == '"':
		s, err := jsonString(b)
		if err != nil {
			return err
		}
		*a = argsField(s)
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return err
		}
		*a = argsField(buf.String())
	}
	return nil
}
