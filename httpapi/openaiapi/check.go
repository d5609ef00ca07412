package openaiapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/chat"
)

// MaxMessages bounds the messages of one request (the body size bounds them too).
const MaxMessages = 10_000

// Check validates req as far as it can without the store, as the native API's chat.Validate
// does: every field, the model (resolved to its provider/model name), Parley's tools. A refused
// request is a 400 naming the field; nothing has been stored or started.
func (b *Backend) Check(req *ChatRequest) error {
	svc := b.Chat
	if err := parley.CheckText("model", req.Model, parley.TextName); err != nil {
		return err
	}
	if req.Model == "" {
		req.Model = svc.DefaultModel
	}
	if svc.ResolveModel != nil {
		full, err := svc.ResolveModel(req.Model)
		if err != nil {
			return err
		}
		req.Model = full
	}
	if len(req.Messages) == 0 {
		return parley.Errorf(parley.ECInvalid, "messages: must hold at least one message")
	}
	if len(req.Messages) > MaxMessages {
		return parley.Errorf(parley.ECInvalid, "messages: %d messages, the limit is %d", len(req.Messages), MaxMessages)
	}
	maxLen := svc.MaxMessage
	if maxLen <= 0 {
		maxLen = 100_000
	}
	for i := range req.Messages {
		if err := checkMessage(i, &req.Messages[i], maxLen); err != nil {
			return err
		}
	}
	if req.N != nil && *req.N != 1 {
		return parley.Errorf(parley.ECInvalid, "n: only 1 is supported")
	}
	if t := req.Temperature; t != nil && (*t < 0 || *t > 2) {
		return parley.Errorf(parley.ECInvalid, "temperature: must be between 0 and 2")
	}
	if req.MaxTokens < 0 || req.MaxCompletionTokens < 0 {
		return parley.Errorf(parley.ECInvalid, "max_tokens: must not be negative")
	}
	if req.StreamOptions != nil && !req.Stream {
		return parley.Errorf(parley.ECInvalid, "stream_options: only allowed with stream: true")
	}
	if err := parley.CheckText("user", req.User, parley.TextName); err != nil {
		return err
	}
	for k, v := range req.Metadata {
		if err := parley.CheckText("metadata", k, parley.TextName); err != nil {
			return err
		}
		if err := parley.CheckText("metadata."+k, v, parley.TextName); err != nil {
			return err
		}
	}
	for i, t := range req.Tools {
		if err := checkTool(i, t); err != nil {
			return err
		}
	}
	if err := checkToolChoice(req); err != nil {
		return err
	}
	ext := req.Parley
	if ext != nil {
		for i, name := range ext.Tools {
			if err := parley.CheckText(fmt.Sprintf("parley.tools[%d]", i), name, parley.TextName); err != nil {
				return err
			}
		}
		if ext.Tools != nil && len(req.Tools) > 0 {
			return parley.Errorf(parley.ECInvalid, "parley.tools: Parley's tools cannot be offered beside the request's own tools")
		}
		if ext.Tools != nil && svc.CheckTools != nil {
			if err := svc.CheckTools(ext.Tools); err != nil {
				return parley.Errorf(parley.ECInvalid, "parley.tools: %s", strings.TrimPrefix(parley.MessageOf(err), "selected_tools: "))
			}
		}
	}
	// The session of a stateful request named in the body (the header is read by the handler).
	meta := req.Metadata["session_id"]
	if ext != nil && ext.SessionID != "" {
		if meta != "" && meta != ext.SessionID {
			return parley.Errorf(parley.ECInvalid, "metadata.session_id: differs from parley.session_id")
		}
		meta = ext.SessionID
	}
	if err := parley.CheckText("metadata.session_id", meta, parley.TextName); err != nil {
		return err
	}
	req.session = meta
	return nil
}

func checkMessage(i int, m *Message, maxLen int) error {
	field := fmt.Sprintf("messages[%d]", i)
	switch m.Role {
	case "developer":
		m.Role = string(parley.RoleSystem)
	case "system", "user", "assistant", "tool":
	case "":
		return parley.Errorf(parley.ECInvalid, "%s.role: missing", field)
	default:
		return parley.Errorf(parley.ECInvalid, "%s.role: must be system, developer, user, assistant or tool, not %q", field, truncate(m.Role, 40))
	}
	if err := parley.CheckText(field+".name", m.Name, parley.TextName); err != nil {
		return err
	}
	text := m.Content.String()
	if err := parley.CheckText(field+".content", text, parley.TextMessage); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(text); n > maxLen {
		return parley.Errorf(parley.ECInvalid, "%s.content: %d characters, the limit is %d", field, n, maxLen)
	}
	if err := parley.CheckText(field+".reasoning_content", m.Reasoning, parley.TextMessage); err != nil {
		return err
	}
	for j, p := range m.Content.Parts() {
		pf := fmt.Sprintf("%s.content[%d]", field, j)
		switch {
		case p.Type == "text":
		case p.Type == "image_url" && m.Role == "user":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return parley.Errorf(parley.ECInvalid, "%s.image_url: must have a url", pf)
			}
			u := p.ImageURL.URL
			if err := parley.CheckText(pf+".image_url.url", u, parley.TextName); err != nil {
				return err
			}
			if !strings.HasPrefix(u, "data:image/") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
				return parley.Errorf(parley.ECInvalid, "%s.image_url: url must be a data:image/… URL or http(s)", pf)
			}
		default:
			return parley.Errorf(parley.ECInvalid, "%s.type: %q parts are not supported in %s messages", pf, truncate(p.Type, 40), m.Role)
		}
	}
	switch m.Role {
	case "tool":
		if m.ToolCallID == "" {
			return parley.Errorf(parley.ECInvalid, "%s.tool_call_id: required on a tool message", field)
		}
		if err := parley.CheckText(field+".tool_call_id", m.ToolCallID, parley.TextName); err != nil {
			return err
		}
	case "user", "system":
		if m.Content.IsNull() {
			return parley.Errorf(parley.ECInvalid, "%s.content: required on a %s message", field, m.Role)
		}
	}
	if len(m.ToolCalls) > 0 && m.Role != "assistant" {
		return parley.Errorf(parley.ECInvalid, "%s.tool_calls: only assistant messages have tool calls", field)
	}
	if m.Role != "tool" && m.ToolCallID != "" {
		return parley.Errorf(parley.ECInvalid, "%s.tool_call_id: only tool messages have one", field)
	}
	for j, c := range m.ToolCalls {
		cf := fmt.Sprintf("%s.tool_calls[%d]", field, j)
		if c.Type != "function" {
			return parley.Errorf(parley.ECInvalid, "%s.type: must be \"function\"", cf)
		}
		if c.ID == "" || c.Function.Name == "" {
			return parley.Errorf(parley.ECInvalid, "%s: must have an id and a function name", cf)
		}
		if err := parley.CheckText(cf+".id", c.ID, parley.TextName); err != nil {
			return err
		}
		if err := parley.CheckText(cf+".function.name", c.Function.Name, parley.TextName); err != nil {
			return err
		}
		if err := parley.CheckText(cf+".function.arguments", c.Function.Arguments, parley.TextMessage); err != nil {
			return err
		}
	}
	return nil
}

func checkTool(i int, t Tool) error {
	field := fmt.Sprintf("tools[%d]", i)
	if t.Type != "function" {
		return parley.Errorf(parley.ECInvalid, "%s.type: must be \"function\"", field)
	}
	if t.Function.Name == "" {
		return parley.Errorf(parley.ECInvalid, "%s.function.name: required", field)
	}
	if err := parley.CheckText(field+".function.name", t.Function.Name, parley.TextName); err != nil {
		return err
	}
	if err := parley.CheckText(field+".function.description", t.Function.Description, parley.TextMessage); err != nil {
		return err
	}
	if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' {
		return parley.Errorf(parley.ECInvalid, "%s.function.parameters: must be a JSON Schema object", field)
	}
	return nil
}

// checkToolChoice reads tool_choice: "auto", "none" or "required" (the forms every provider
// Parley speaks can honour).
func checkToolChoice(req *ChatRequest) error {
	raw := bytes.TrimSpace(req.ToolChoice)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return parley.Errorf(parley.ECInvalid, "tool_choice: only \"auto\", \"none\" or \"required\" are supported")
	}
	switch s {
	case "auto", "none", "required":
	default:
		return parley.Errorf(parley.ECInvalid, "tool_choice: must be \"auto\", \"none\" or \"required\"")
	}
	if len(req.Tools) == 0 {
		return parley.Errorf(parley.ECInvalid, "tool_choice: only allowed when tools are given")
	}
	req.toolChoice = s
	return nil
}

// messages converts the request's messages to Parley's.
func (req *ChatRequest) messages() []parley.Message {
	out := make([]parley.Message, len(req.Messages))
	for i, m := range req.Messages {
		out[i] = parley.Message{Role: parley.Role(m.Role), Content: m.Content, Name: m.Name,
			ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Reasoning: m.Reasoning}
	}
	return out
}

// turn is the chat request of a stateful request: its last message, which must be the user's.
func (req *ChatRequest) turn(session string) (chat.Request, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "user" {
		return chat.Request{}, parley.Errorf(parley.ECInvalid, "messages[%d].role: the last message of a request on a session must be the user's", len(req.Messages)-1)
	}
	cr := chat.Request{SessionID: session, Model: req.Model}
	if req.Parley != nil {
		cr.SelectedTools = req.Parley.Tools
	}
	if !last.Content.IsParts() {
		cr.Message = last.Content.String()
		return cr, nil
	}
	var text []string
	for _, p := range last.Content.Parts() {
		if p.Type == "text" {
			text = append(text, p.Text)
		} else {
			cr.BinaryContent = append(cr.BinaryContent, p)
		}
	}
	cr.Message = strings.Join(text, "\n")
	return cr, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
