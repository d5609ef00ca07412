package llmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	parley "github.com/parleyhq/parley"
)

// anthropicWire is Anthropic's Messages API: requests are checked as the API checks them, and
// answers stream as its documented events (message_start, content_block_start/delta/stop with
// thinking, text and tool_use blocks, ping, message_delta, message_stop).
type anthropicWire struct{}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  *string         `json:"thinking"`
	Signature string          `json:"signature"`
	Data      string          `json:"data"`
	Title     string          `json:"title"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

type anthropicRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
	} `json:"tool_choice"`
	Thinking *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
	Temperature *float64 `json:"temperature"`
	Stream      bool     `json:"stream"`
}

// thinkingSignature is the signature the fake gives its own thinking blocks, and checks.
const thinkingSignature = "bGxtdGVzdC1zaWduZWQ="

func (anthropicWire) decode(r *http.Request, body []byte) (*Request, error) {
	if r.Header.Get("Anthropic-Version") == "" {
		return nil, errors.New("anthropic-version: header is required")
	}
	var w anthropicRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	switch {
	case w.Model == "":
		return nil, errors.New("model: Field required")
	case w.MaxTokens < 1:
		return nil, errors.New("max_tokens: Field required")
	case len(w.Messages) == 0:
		return nil, errors.New("messages: at least one message is required")
	case w.Thinking != nil && w.Thinking.BudgetTokens >= w.MaxTokens:
		return nil, errors.New("`max_tokens` must be greater than `thinking.budget_tokens`")
	case w.Thinking != nil && w.Temperature != nil && *w.Temperature != 1:
		return nil, errors.New("`temperature` may only be set to 1 when thinking is enabled")
	}
	req := &Request{Model: w.Model, Stream: w.Stream, Raw: json.RawMessage(body)}
	if len(w.System) > 0 {
		var sys string
		if err := json.Unmarshal(w.System, &sys); err != nil {
			return nil, errors.New("system: expected a string")
		}
		req.Messages = append(req.Messages, parley.Message{Role: parley.RoleSystem, Content: parley.Text(sys)})
	}
	pending := map[string]bool{} // tool_use ids the next user turn must answer
	lastUser := -1               // the last user turn that says something: the tool loop runs after it
	for i, m := range w.Messages {
		if m.Role == "user" && !bytes.Contains(m.Content, []byte(`"tool_result"`)) {
			lastUser = i
		}
	}
	for i, m := range w.Messages {
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			var text string
			if json.Unmarshal(m.Content, &text) != nil {
				return nil, fmt.Errorf("messages.%d.content: expected a string or a list of blocks", i)
			}
			blocks = []anthropicBlock{{Type: "text", Text: &text}}
		}
		if len(blocks) == 0 {
			return nil, fmt.Errorf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		if i > 0 && w.Messages[i-1].Role == m.Role {
			return nil, fmt.Errorf("messages.%d: roles must alternate between \"user\" and \"assistant\"", i)
		}
		switch m.Role {
		case "user":
			if i == 0 && len(pending) > 0 {
				return nil, errors.New("messages.0: unexpected tool_result")
			}
			msgs, err := anthropicUser(i, blocks, pending)
			if err != nil {
				return nil, err
			}
			req.Messages = append(req.Messages, msgs...)
		case "assistant":
			if i == 0 {
				return nil, errors.New("messages.0.role: the first message must use the \"user\" role")
			}
			inLoop := w.Thinking != nil && i > lastUser
			msg, err := anthropicAssistant(i, blocks, pending, inLoop)
			if err != nil {
				return nil, err
			}
			req.Messages = append(req.Messages, msg)
		default:
			return nil, fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
	}
	if len(pending) > 0 {
		return nil, errors.New("messages: `tool_use` ids were found without `tool_result` blocks immediately after")
	}
	for i, t := range w.Tools {
		if t.Name == "" || len(t.InputSchema) == 0 {
			return nil, fmt.Errorf("tools.%d: name and input_schema are required", i)
		}
		req.Tools = append(req.Tools, parley.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	if w.ToolChoice != nil {
		req.ToolChoice = map[string]string{"auto": "auto", "any": "required", "none": "none"}[w.ToolChoice.Type]
	}
	return req, nil
}

// anthropicUser maps a user turn: tool_result blocks first (each answering a pending tool_use),
// then text and images.
func anthropicUser(i int, blocks []anthropicBlock, pending map[string]bool) ([]parley.Message, error) {
	var out []parley.Message
	var parts []parley.Part
	seenOther := false
	for j, b := range blocks {
		switch b.Type {
		case "tool_result":
			if seenOther {
				return nil, fmt.Errorf("messages.%d.content.%d: tool_result blocks must come first in the content", i, j)
			}
			if !pending[b.ToolUseID] {
				return nil, fmt.Errorf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", i, j, b.ToolUseID)
			}
			delete(pending, b.ToolUseID)
			out = append(out, parley.Message{Role: parley.RoleTool, ToolCallID: b.ToolUseID, Content: parley.Text(blockText(b.Content))})
		case "text":
			seenOther = true
			if b.Text == nil || *b.Text == "" {
				return nil, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
			}
			parts = append(parts, parley.Part{Type: "text", Text: *b.Text})
		case "image":
			seenOther = true
			if b.Source == nil || (b.Source.Type == "base64" && (b.Source.MediaType == "" || b.Source.Data == "")) || (b.Source.Type == "url" && b.Source.URL == "") {
				return nil, fmt.Errorf("messages.%d.content.%d.source: invalid image source", i, j)
			}
			url := b.Source.URL
			if b.Source.Type == "base64" {
				url = "data:" + b.Source.MediaType + ";base64," + b.Source.Data
			}
			parts = append(parts, parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: url}})
		case "document":
			seenOther = true
			if b.Source == nil || b.Source.Type != "base64" || b.Source.MediaType != "application/pdf" || b.Source.Data == "" {
				return nil, fmt.Errorf("messages.%d.content.%d.source: invalid document source", i, j)
			}
			parts = append(parts, parley.Part{Type: "file", File: &parley.FileRef{Filename: b.Title, FileData: "data:application/pdf;base64," + b.Source.Data}})
		default:
			return nil, fmt.Errorf("messages.%d.content.%d.type: unexpected block type %q in a user message", i, j, b.Type)
		}
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after", i-1)
	}
	if len(parts) == 1 && parts[0].Type == "text" {
		out = append(out, parley.Message{Role: parley.RoleUser, Content: parley.Text(parts[0].Text)})
	} else if len(parts) > 0 {
		out = append(out, parley.Message{Role: parley.RoleUser, Content: parley.Parts(parts...)})
	}
	return out, nil
}

// anthropicAssistant maps an assistant turn. Within the tool loop of a request with thinking on,
// it must start with a signed thinking block, as the API requires.
func anthropicAssistant(i int, blocks []anthropicBlock, pending map[string]bool, thinkingLoop bool) (parley.Message, error) {
	m := parley.Message{Role: parley.RoleAssistant}
	var text strings.Builder
	for j, b := range blocks {
		switch b.Type {
		case "thinking":
			if b.Signature != thinkingSignature {
				return m, fmt.Errorf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
			}
			m.ThinkingBlocks = append(m.ThinkingBlocks, parley.ThinkingBlock{Type: "thinking", Thinking: *b.Thinking, Signature: b.Signature})
		case "redacted_thinking":
			m.ThinkingBlocks = append(m.ThinkingBlocks, parley.ThinkingBlock{Type: "redacted_thinking", Data: b.Data})
		case "text":
			if b.Text == nil || *b.Text == "" {
				return m, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
			}
			text.WriteString(*b.Text)
		case "tool_use":
			var obj map[string]any
			if b.ID == "" || b.Name == "" || json.Unmarshal(b.Input, &obj) != nil {
				return m, fmt.Errorf("messages.%d.content.%d: tool_use needs an id, a name and an object input", i, j)
			}
			pending[b.ID] = true
			m.ToolCalls = append(m.ToolCalls, parley.ToolCall{ID: b.ID, Type: "function", Function: parley.FunctionCall{Name: b.Name, Arguments: string(b.Input)}})
		default:
			return m, fmt.Errorf("messages.%d.content.%d.type: unexpected block type %q in an assistant message", i, j, b.Type)
		}
	}
	if thinkingLoop && (len(blocks) == 0 || (blocks[0].Type != "thinking" && blocks[0].Type != "redacted_thinking")) {
		return m, fmt.Errorf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block", i, blocks[0].Type)
	}
	if text.Len() > 0 || len(m.ToolCalls) == 0 {
		m.Content = parley.Text(text.String())
	}
	return m, nil
}

// blockText reads a tool_result's content: a string or text blocks.
func blockText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []anthropicBlock
	json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" && bl.Text != nil {
			b.WriteString(*bl.Text)
		}
	}
	return b.String()
}

func (anthropicWire) writeError(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}[status]
	if typ == "" {
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

func anthropicEvent(typ string, v map[string]any) string {
	v["type"] = typ
	b, _ := json.Marshal(v)
	return "event: " + typ + "\ndata: " + string(b) + "\n\n"
}

func (anthropicWire) frames(s *Server, c completion, req *Request, t Turn) []string {
	u := t.Usage
	out := []string{anthropicEvent("message_start", map[string]any{"message": map[string]any{
		"id": "msg_" + c.id, "type": "message", "role": "assistant", "content": []any{}, "model": c.model,
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.PromptTokens - u.CachedTokens, "cache_creation_input_tokens": 0,
			"cache_read_input_tokens": u.CachedTokens, "output_tokens": 1}}})}
	index := 0
	if t.Reasoning != "" {
		out = append(out, anthropicEvent("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "thinking", "thinking": ""}}))
		for _, piece := range split(t.Reasoning, s.chunkSize) {
			out = append(out, anthropicEvent("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "thinking_delta", "thinking": piece}}))
		}
		out = append(out, anthropicEvent("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "signature_delta", "signature": thinkingSignature}}),
			anthropicEvent("content_block_stop", map[string]any{"index": index}))
		index++
	}
	out = append(out, anthropicEvent("ping", map[string]any{}))
	if t.Content != "" {
		out = append(out, anthropicEvent("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "text", "text": ""}}))
		for _, piece := range split(t.Content, s.chunkSize) {
			out = append(out, anthropicEvent("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "text_delta", "text": piece}}))
		}
		out = append(out, anthropicEvent("content_block_stop", map[string]any{"index": index}))
		index++
	}
	for i, call := range t.ToolCalls {
		id := call.ID
		if id == "" || !strings.HasPrefix(id, "toolu_") {
			id = fmt.Sprintf("toolu_%s%d", c.id, i)
		}
		out = append(out, anthropicEvent("content_block_start", map[string]any{"index": index, "content_block": map[string]any{
			"type": "tool_use", "id": id, "name": call.Function.Name, "input": map[string]any{}}}),
			anthropicEvent("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": ""}}))
		for _, piece := range split(call.Function.Arguments, max(1, s.chunkSize*2)) {
			out = append(out, anthropicEvent("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}}))
		}
		out = append(out, anthropicEvent("content_block_stop", map[string]any{"index": index}))
		index++
	}
	stop := map[string]string{"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}[t.FinishReason]
	if stop == "" {
		stop = t.FinishReason
	}
	return append(out,
		anthropicEvent("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": u.CompletionTokens}}),
		anthropicEvent("message_stop", map[string]any{}))
}

func (anthropicWire) full(_ *Server, c completion, _ *Request, t Turn) any {
	var content []any
	if t.Content != "" {
		content = append(content, map[string]any{"type": "text", "text": t.Content})
	}
	return map[string]any{"id": "msg_" + c.id, "type": "message", "role": "assistant", "model": c.model, "content": content}
}
