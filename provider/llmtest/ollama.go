package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	parley "github.com/parleyhq/parley"
)

// ollamaWire is Ollama's native POST /api/chat: one JSON object per line, the last with
// "done": true and the token counts; tool calls arrive whole, without ids.
type ollamaWire struct{}

type ollamaRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string   `json:"role"`
		Content   string   `json:"content"`
		Thinking  string   `json:"thinking"`
		Images    []string `json:"images"`
		ToolName  string   `json:"tool_name"`
		ToolCalls []struct {
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string          `json:"type"`
		Function parley.ToolSpec `json:"function"`
	} `json:"tools"`
	Stream *bool `json:"stream"`
}

func (ollamaWire) contentType() string { return "application/x-ndjson" }

func (ollamaWire) decode(_ *http.Request, body []byte) (*Request, error) {
	var w ollamaRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if w.Model == "" {
		return nil, errors.New("model is required")
	}
	req := &Request{Model: w.Model, Stream: w.Stream == nil || *w.Stream, Raw: json.RawMessage(body)}
	ids := 0
	for i, m := range w.Messages {
		msg := parley.Message{Role: parley.Role(m.Role), Content: parley.Text(m.Content), Reasoning: m.Thinking}
		if !msg.Role.Valid() {
			return nil, fmt.Errorf("messages[%d]: invalid role %q", i, m.Role)
		}
		for _, c := range m.ToolCalls {
			var obj map[string]any
			if json.Unmarshal(c.Function.Arguments, &obj) != nil {
				return nil, fmt.Errorf("messages[%d]: tool call arguments must be an object", i)
			}
			msg.ToolCalls = append(msg.ToolCalls, parley.ToolCall{ID: fmt.Sprintf("ollama-call-%d", ids), Type: "function",
				Function: parley.FunctionCall{Name: c.Function.Name, Arguments: string(c.Function.Arguments)}})
			ids++
		}
		if len(msg.ToolCalls) > 0 && m.Content == "" {
			msg.Content = parley.Content{}
		}
		msg.Name = m.ToolName
		req.Messages = append(req.Messages, msg)
	}
	// Ollama matches results to calls by order; name them as the calls were named.
	pending := []string{}
	for i := range req.Messages {
		m := &req.Messages[i]
		for _, c := range m.ToolCalls {
			pending = append(pending, c.ID)
		}
		if m.Role == parley.RoleTool && len(pending) > 0 {
			m.ToolCallID, pending = pending[0], pending[1:]
		}
	}
	for _, t := range w.Tools {
		req.Tools = append(req.Tools, t.Function)
	}
	return req, nil
}

func (ollamaWire) writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
}

func (ollamaWire) frames(s *Server, c completion, _ *Request, t Turn) []string {
	at := time.Unix(c.created, 0).UTC().Format(time.RFC3339Nano)
	line := func(msg map[string]any, done bool, extra map[string]any) string {
		v := map[string]any{"model": c.model, "created_at": at, "message": msg, "done": done}
		for k, x := range extra {
			v[k] = x
		}
		b, _ := json.Marshal(v)
		return string(b) + "\n"
	}
	var out []string
	for _, piece := range split(t.Reasoning, s.chunkSize) {
		out = append(out, line(map[string]any{"role": "assistant", "content": "", "thinking": piece}, false, nil))
	}
	for _, piece := range split(t.Content, s.chunkSize) {
		out = append(out, line(map[string]any{"role": "assistant", "content": piece}, false, nil))
	}
	if len(t.ToolCalls) > 0 {
		var calls []any
		for _, c := range t.ToolCalls {
			args := json.RawMessage(c.Function.Arguments)
			if !json.Valid(args) {
				args = json.RawMessage(`{}`)
			}
			calls = append(calls, map[string]any{"function": map[string]any{"name": c.Function.Name, "arguments": args}})
		}
		out = append(out, line(map[string]any{"role": "assistant", "content": "", "tool_calls": calls}, false, nil))
	}
	reason := "stop"
	if t.FinishReason == "length" {
		reason = "length"
	}
	return append(out, line(map[string]any{"role": "assistant", "content": ""}, true, map[string]any{
		"done_reason": reason, "total_duration": 1000000, "prompt_eval_count": t.Usage.PromptTokens, "eval_count": t.Usage.CompletionTokens}))
}

func (ollamaWire) full(_ *Server, c completion, _ *Request, t Turn) any {
	return map[string]any{"model": c.model, "message": map[string]any{"role": "assistant", "content": t.Content}, "done": true,
		"done_reason": "stop", "prompt_eval_count": t.Usage.PromptTokens, "eval_count": t.Usage.CompletionTokens}
}
