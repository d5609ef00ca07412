package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
)

// wireRequest is the part of a Chat Completions request the server reads.
type wireRequest struct {
	Model         string           `json:"model"`
	Messages      []parley.Message `json:"messages"`
	Stream        bool             `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string          `json:"type"`
		Function parley.ToolSpec `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// decodeRequest parses and checks a request the way the real API does, enough to catch a client
// that sends an invalid history.
func decodeRequest(body []byte) (*Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("We could not parse the JSON body of your request. (%v)", err)
	}
	if len(w.Messages) == 0 {
		return nil, errors.New("[] is too short - 'messages'")
	}
	if err := checkHistory(w.Messages); err != nil {
		return nil, err
	}
	r := &Request{Model: w.Model, Stream: w.Stream, Messages: w.Messages, Raw: json.RawMessage(body)}
	if w.StreamOptions != nil {
		if !w.Stream {
			return nil, errors.New("The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		r.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	for i, t := range w.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, fmt.Errorf("Invalid 'tools[%d]': expected a function with a name.", i)
		}
		r.Tools = append(r.Tools, t.Function)
	}
	if len(w.ToolChoice) > 0 {
		var s string
		if json.Unmarshal(w.ToolChoice, &s) == nil {
			r.ToolChoice = s
		} else {
			r.ToolChoice = string(w.ToolChoice)
		}
	}
	return r, nil
}

func checkHistory(msgs []parley.Message) error {
	pending := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case parley.RoleSystem, parley.RoleUser, parley.RoleAssistant, parley.RoleTool:
		default:
			return fmt.Errorf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool'. ('messages[%d].role')", m.Role, i)
		}
		if m.Role == parley.RoleTool {
			if !pending[m.ToolCallID] {
				return fmt.Errorf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. ('messages[%d]')", i)
			}
			delete(pending, m.ToolCallID)
			continue
		}
		for id := range pending {
			return fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", id)
		}
		for _, c := range m.ToolCalls {
			pending[c.ID] = true
		}
	}
	for id := range pending {
		return fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", id)
	}
	return nil
}

// completion holds what every object of one answer shares.
type completion struct {
	id      string // unique, without a vendor prefix
	created int64
	model   string
	n       int64 // the answer's number, for ids of its parts
}

// openaiWire is OpenAI's Chat Completions.
type openaiWire struct{}

func (openaiWire) decode(_ *http.Request, body []byte) (*Request, error) { return decodeRequest(body) }

func (openaiWire) writeError(w http.ResponseWriter, status int, msg string) {
	typ, code := "server_error", ""
	switch {
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case status < 500:
		typ = "invalid_request_error"
	}
	writeError(w, status, typ, code, msg)
}

func (openaiWire) frames(s *Server, c completion, req *Request, t Turn) []string {
	c.id = "chatcmpl-" + c.id
	var out []string
	for _, f := range s.chunks(c, req, t) {
		b, _ := json.Marshal(f)
		out = append(out, "data: "+string(b)+"\n\n")
	}
	return append(out, "data: [DONE]\n\n")
}

func (openaiWire) full(_ *Server, c completion, _ *Request, t Turn) any {
	c.id = "chatcmpl-" + c.id
	return c.full(t)
}

const fingerprint = "fp_parley_mock"

type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details,omitempty"`
}

func usageOf(u *parley.Usage) *wireUsage {
	w := &wireUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if u.ReasoningTokens > 0 {
		w.CompletionTokensDetails = &struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		}{u.ReasoningTokens}
	}
	if u.CachedTokens > 0 {
		w.PromptTokensDetails = &struct {
			CachedTokens int64 `json:"cached_tokens"`
		}{u.CachedTokens}
	}
	return w
}

// full is the non-streamed chat.completion object.
func (c completion) full(t Turn) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if t.Content != "" || len(t.ToolCalls) == 0 {
		msg["content"] = t.Content
	}
	if t.Reasoning != "" {
		msg["reasoning_content"] = t.Reasoning
	}
	if len(t.ToolCalls) > 0 {
		msg["tool_calls"] = t.ToolCalls
	}
	return map[string]any{
		"id": c.id, "object": "chat.completion", "created": c.created, "model": c.model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": t.FinishReason}},
		"usage":   usageOf(t.Usage), "system_fingerprint": fingerprint,
	}
}

// chunk is one chat.completion.chunk object.
func (c completion) chunk(delta map[string]any, finish any, withUsage bool) map[string]any {
	ch := map[string]any{
		"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
		"system_fingerprint": fingerprint,
		"choices":            []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
	}
	if withUsage {
		ch["usage"] = nil // OpenAI sends "usage": null on every chunk but the last when usage was asked for
	}
	return ch
}

// chunks returns the SSE data payloads of a streamed answer, in order, without [DONE].
func (s *Server) chunks(c completion, req *Request, t Turn) []any {
	u := req.IncludeUsage
	var out []any
	out = append(out, c.chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil, u))
	for _, piece := range split(t.Reasoning, s.chunkSize) {
		out = append(out, c.chunk(map[string]any{"reasoning_content": piece}, nil, u))
	}
	for _, piece := range split(t.Content, s.chunkSize) {
		out = append(out, c.chunk(map[string]any{"content": piece}, nil, u))
	}
	for i, call := range t.ToolCalls {
		out = append(out, c.chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": call.ID, "type": "function",
			"function": map[string]any{"name": call.Function.Name, "arguments": ""},
		}}}, nil, u))
		// Arguments always arrive in at least two pieces, as they do from the real API.
		size := max(1, min(s.chunkSize*2, (len(call.Function.Arguments)+1)/2))
		for _, piece := range split(call.Function.Arguments, size) {
			out = append(out, c.chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": piece},
			}}}, nil, u))
		}
	}
	out = append(out, c.chunk(map[string]any{}, t.FinishReason, u))
	if u {
		out = append(out, map[string]any{
			"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
			"system_fingerprint": fingerprint, "choices": []any{}, "usage": usageOf(t.Usage),
		})
	}
	return out
}

// split cuts s into pieces of at most n bytes, on rune boundaries.
func split(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		end := min(n, len(s))
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// errCut is how a scripted cut ends a stream.
var errCut = errors.New("llmtest: stream cut by script")

// stream writes frames one by one, flushing each, with the token delay between them; a turn
// with CutAfter drops the connection after that many frames.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, frames []string, t Turn) {
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	delay := s.tokenDelay
	if t.Delay > 0 {
		delay = t.Delay
	}
	var timer *time.Timer
	for i, f := range frames {
		if t.CutAfter > 0 && i >= t.CutAfter {
			cut(w)
			return
		}
		if i > 0 && delay > 0 {
			if timer == nil {
				timer = time.NewTimer(delay)
				defer timer.Stop()
			} else {
				timer.Reset(delay)
			}
			if !wait(r.Context(), timer) {
				return
			}
		}
		if _, err := io.WriteString(w, f); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func wait(ctx context.Context, t *time.Timer) bool {
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// cut ends the response abruptly: the in-process transport fails the body; a real server drops
// the connection.
func cut(w http.ResponseWriter) {
	if c, ok := w.(interface{ abort(error) }); ok {
		c.abort(errCut)
		return
	}
	panic(http.ErrAbortHandler)
}
