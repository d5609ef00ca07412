package gemini

import (
	"context"
	"encoding/json"
	"io"
	"strings"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// NewStream reads a streamGenerateContent?alt=sse body as parley.StreamEvents. Each event is a
// whole GenerateContentResponse: text parts are content, thought parts reasoning, and each
// functionCall part a whole tool call (Gemini does not split them) with its thought signature.
// The stream has no end marker: a body that ends before a candidate's finishReason yields a
// *parley.Error with code ECUpstream wrapping io.ErrUnexpectedEOF. Usage comes once at the end.
func NewStream(body io.ReadCloser) parley.Stream { return newStream(context.Background(), body) }

func newStream(ctx context.Context, body io.ReadCloser) *upstream.Stream {
	sse := upstream.NewSSEReader(body)
	d := &decoder{}
	return upstream.NewStream(ctx, body, "a finish reason", func(out []parley.StreamEvent) ([]parley.StreamEvent, error) {
		ev, err := sse.Next()
		switch {
		case err == io.EOF && d.finished:
			return append(out, d.end()...), io.EOF
		case err != nil:
			return out, upstream.Cut(err)
		}
		return d.decode(ev.Data, out)
	})
}

// DecodeResponse turns a generateContent response body into a parley.Response.
func DecodeResponse(body []byte) (*parley.Response, error) {
	var d decoder
	evs, err := d.decode(body, nil)
	if err != nil {
		return nil, err
	}
	evs = append(evs, d.end()...)
	var b parley.ResponseBuilder
	for _, ev := range evs {
		b.Add(ev)
	}
	return b.Response(), nil
}

// decoder turns GenerateContentResponse objects into events, one response at a time.
type decoder struct {
	calls    int // function calls seen
	finished bool
	usage    *parley.Usage
}

type wireResponse struct {
	Candidates []struct {
		Content      *wireContent `json:"content"`
		FinishReason string       `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *wireUsage      `json:"usageMetadata"`
	Error         json.RawMessage `json:"error"`
}

type wireUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}

// decode appends the events of one response to out.
func (d *decoder) decode(data []byte, out []parley.StreamEvent) ([]parley.StreamEvent, error) {
	var r wireResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return out, parley.WrapError(parley.ECUpstream, err, "invalid provider stream event")
	}
	if upstream.IsSet(r.Error) {
		return out, parley.WrapError(parley.ECUpstream, upstream.ParseError(r.Error), "provider stream failed")
	}
	if u := r.UsageMetadata; u != nil {
		// Gemini counts thoughts apart from the answer; OpenAI counts them in the completion.
		d.usage = &parley.Usage{
			PromptTokens:     u.PromptTokenCount + u.ToolUsePromptTokenCount,
			CompletionTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount,
			ReasoningTokens:  u.ThoughtsTokenCount,
			CachedTokens:     u.CachedContentTokenCount,
		}
		d.usage.TotalTokens = d.usage.PromptTokens + d.usage.CompletionTokens
	}
	if len(r.Candidates) == 0 {
		if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
			d.finished = true
			out = append(out, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: "content_filter"})
		}
		return out, nil
	}
	c := r.Candidates[0]
	if c.Content != nil {
		for _, p := range c.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				args := "{}"
				if upstream.IsSet(p.FunctionCall.Args) {
					args = string(p.FunctionCall.Args)
				}
				out = append(out, parley.StreamEvent{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{
					Index: d.calls, ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Arguments: args, ThoughtSignature: p.ThoughtSignature}})
				d.calls++
			case p.Thought && p.Text != "":
				out = append(out, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: p.Text})
			case p.Text != "":
				out = append(out, parley.StreamEvent{Type: parley.StreamContent, Content: p.Text})
			}
		}
	}
	if c.FinishReason != "" {
		d.finished = true
		out = append(out, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: d.finishReason(c.FinishReason)})
	}
	return out, nil
}

// end returns the events that close a finished answer: its usage.
func (d *decoder) end() []parley.StreamEvent {
	if d.usage == nil {
		return nil
	}
	return []parley.StreamEvent{{Type: parley.StreamUsage, Usage: d.usage}}
}

// finishReason maps Gemini's finishReason to the OpenAI finish reasons.
func (d *decoder) finishReason(r string) string {
	switch r {
	case "STOP":
		if d.calls > 0 {
			return "tool_calls"
		}
		return "stop"
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY":
		return "content_filter"
	}
	return strings.ToLower(r)
}
