package anthropic

import (
	"encoding/json"
	"fmt"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/convert"
)

// DefaultMaxTokens is the answer limit sent when neither the request nor Options give one: the
// Messages API requires max_tokens.
const DefaultMaxTokens = 4096

// Options are the per-provider choices of the Messages API.
type Options struct {
	// MaxTokens is max_tokens when the request sets none (default DefaultMaxTokens).
	MaxTokens int
	// ThinkingBudget, when at least 1024, turns on extended thinking with this many tokens.
	// max_tokens is raised above it when needed, and temperature is not sent (the API refuses
	// both together).
	ThinkingBudget int
}

// EncodeRequest returns the Messages API request body for req. The OpenAI-format history is
// mapped as the API requires: system messages go to "system"; tool results become tool_result
// blocks of one user turn, first in it; consecutive messages of one role are merged; thinking
// blocks go back with their signatures on the assistant messages of the current tool loop.
// Errors are *parley.Error with code ECInvalid.
func EncodeRequest(req *parley.ChatRequest, stream bool, opts Options) ([]byte, error) {
	if err := convert.CheckRequest(req); err != nil {
		return nil, err
	}
	w := wireRequest{Model: req.Model, MaxTokens: req.MaxTokens, System: convert.SystemText(req.Messages), Stream: stream}
	if w.MaxTokens == 0 {
		w.MaxTokens = opts.MaxTokens
	}
	if w.MaxTokens == 0 {
		w.MaxTokens = DefaultMaxTokens
	}
	thinking := opts.ThinkingBudget >= 1024 && loopHasThinking(req.Messages)
	if thinking {
		w.Thinking = &wireThinking{Type: "enabled", BudgetTokens: opts.ThinkingBudget}
		if w.MaxTokens <= opts.ThinkingBudget {
			w.MaxTokens = opts.ThinkingBudget + DefaultMaxTokens
		}
	} else if req.Temperature != nil {
		t := min(max(*req.Temperature, 0), 1) // the API's range is 0 to 1, OpenAI's 0 to 2
		w.Temperature = &t
	}
	turn := convert.TurnStart(req.Messages)
	for i, m := range req.Messages {
		if m.Role == parley.RoleSystem {
			continue
		}
		role, blocks, err := encodeMessage(m, thinking && i > turn)
		if err != nil {
			return nil, parley.Errorf(parley.ECInvalid, "message %d: %v", i, err)
		}
		if len(blocks) == 0 {
			continue // the API refuses empty turns; an empty message says nothing
		}
		if n := len(w.Messages); n > 0 && w.Messages[n-1].Role == role {
			w.Messages[n-1].Content = append(w.Messages[n-1].Content, blocks...)
			continue
		}
		w.Messages = append(w.Messages, wireMessage{Role: role, Content: blocks})
	}
	if len(w.Messages) == 0 {
		return nil, parley.Errorf(parley.ECInvalid, "no messages with content")
	}
	for _, t := range req.Tools {
		schema, err := convert.Schema(t)
		if err != nil {
			return nil, err
		}
		w.Tools = append(w.Tools, wireTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if len(w.Tools) > 0 {
		switch req.ToolChoice {
		case "auto":
			w.ToolChoice = &wireToolChoice{Type: "auto"}
		case "required":
			w.ToolChoice = &wireToolChoice{Type: "any"}
		case "none":
			w.ToolChoice = &wireToolChoice{Type: "none"}
		}
	}
	b, err := convert.Marshal(w)
	if err != nil {
		return nil, parley.WrapError(parley.ECInvalid, err, "cannot encode request")
	}
	return b, nil
}

// loopHasThinking reports whether extended thinking may be on for this request: the API requires
// each assistant message of the current tool loop to start with its thinking block, so a loop
// with an assistant message that has none (it came from another provider, or thinking was off)
// must go without thinking.
func loopHasThinking(msgs []parley.Message) bool {
	for _, m := range msgs[convert.TurnStart(msgs)+1:] {
		if m.Role == parley.RoleAssistant && len(m.ThinkingBlocks) == 0 {
			return false
		}
	}
	return true
}

// encodeMessage returns the API role and content blocks of one OpenAI-format message.
func encodeMessage(m parley.Message, withThinking bool) (string, []wireBlock, error) {
	switch m.Role {
	case parley.RoleUser:
		blocks, err := contentBlocks(m.Content)
		return "user", blocks, err
	case parley.RoleTool:
		res := wireBlock{Type: "tool_result", ToolUseID: m.ToolCallID}
		if m.Content.IsParts() {
			blocks, err := contentBlocks(m.Content)
			if err != nil {
				return "", nil, err
			}
			if len(blocks) > 0 {
				res.Content = blocks
			}
		} else if t := m.Content.String(); t != "" {
			res.Content = t
		}
		return "user", []wireBlock{res}, nil
	case parley.RoleAssistant:
		var blocks []wireBlock
		if withThinking {
			for _, t := range m.ThinkingBlocks {
				switch t.Type {
				case "thinking":
					blocks = append(blocks, wireBlock{Type: "thinking", Thinking: &t.Thinking, Signature: t.Signature})
				case "redacted_thinking":
					blocks = append(blocks, wireBlock{Type: "redacted_thinking", Data: t.Data})
				}
			}
		}
		text, err := contentBlocks(m.Content)
		if err != nil {
			return "", nil, err
		}
		blocks = append(blocks, text...)
		for _, c := range m.ToolCalls {
			blocks = append(blocks, wireBlock{Type: "tool_use", ID: c.ID, Name: c.Function.Name, Input: convert.ArgsObject(c.Function.Arguments)})
		}
		return "assistant", blocks, nil
	}
	return "", nil, fmt.Errorf("unknown role %q", m.Role)
}

// contentBlocks maps content to text and image blocks, leaving out empty text, which the API
// refuses.
func contentBlocks(c parley.Content) ([]wireBlock, error) {
	if !c.IsParts() {
		if t := c.String(); t != "" {
			return []wireBlock{{Type: "text", Text: &t}}, nil
		}
		return nil, nil
	}
	var blocks []wireBlock
	for i, p := range c.Parts() {
		switch p.Type {
		case "text":
			if p.Text != "" {
				t := p.Text
				blocks = append(blocks, wireBlock{Type: "text", Text: &t})
			}
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return nil, fmt.Errorf("content part %d: image_url needs a url", i)
			}
			d, isData, err := convert.ParseDataURL(p.ImageURL.URL)
			if err != nil {
				return nil, fmt.Errorf("content part %d: %v", i, err)
			}
			src := &wireSource{Type: "url", URL: p.ImageURL.URL}
			if isData {
				src = &wireSource{Type: "base64", MediaType: d.MediaType, Data: d.Data}
			}
			blocks = append(blocks, wireBlock{Type: "image", Source: src})
		case "file":
			if p.File == nil {
				return nil, fmt.Errorf("content part %d: file needs a file object", i)
			}
			d, isData, err := convert.ParseDataURL(p.File.FileData)
			if err != nil {
				return nil, fmt.Errorf("content part %d: %v", i, err)
			}
			if !isData || d.MediaType != "application/pdf" {
				// No data, or a type the API takes no document of: the text.
				t := convert.DocumentText(p.File)
				blocks = append(blocks, wireBlock{Type: "text", Text: &t})
				continue
			}
			blocks = append(blocks, wireBlock{Type: "document", Source: &wireSource{Type: "base64", MediaType: d.MediaType, Data: d.Data}, Title: p.File.Filename})
		default:
			return nil, fmt.Errorf("content part %d: unknown type %q", i, p.Type)
		}
	}
	return blocks, nil
}

// The request wire format. Field order is the order of the encoded JSON.
type wireRequest struct {
	Model       string          `json:"model"`
	MaxTokens   int             `json:"max_tokens"`
	System      string          `json:"system,omitempty"`
	Messages    []wireMessage   `json:"messages"`
	Tools       []wireTool      `json:"tools,omitempty"`
	ToolChoice  *wireToolChoice `json:"tool_choice,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
	Thinking    *wireThinking   `json:"thinking,omitempty"`
	Stream      bool            `json:"stream,omitempty"`
}

type wireMessage struct {
	Role    string      `json:"role"`
	Content []wireBlock `json:"content"`
}

// wireBlock is a content block of any type; only the fields of its type are set.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Source    *wireSource     `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   any             `json:"content,omitempty"` // tool_result: a string or blocks
	Title     string          `json:"title,omitempty"`   // document: its name
	Thinking  *string         `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
}

type wireSource struct {
	Type      string `json:"type"` // "base64" or "url"
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type wireToolChoice struct {
	Type string `json:"type"`
}

type wireThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}
