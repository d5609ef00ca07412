package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/jsonstr"
	"github.com/parleyhq/parley/provider/internal/convert"
)

// EncodeOptions are the wire choices on which OpenAI-compatible endpoints disagree.
// The zero value follows OpenAI's own API reference.
type EncodeOptions struct {
	// SendReasoning sends an assistant message's reasoning back as reasoning_content. OpenAI's
	// API does not define that field; DeepSeek's thinking mode requires it after tool calls, and
	// GLM accepts it. Off by default.
	SendReasoning bool
	// LegacyMaxTokens sends the token limit as max_tokens (deprecated by OpenAI and rejected by
	// its reasoning models) instead of max_completion_tokens. Ollama's /v1 and GLM read only
	// max_tokens; vLLM reads both.
	LegacyMaxTokens bool
	// SendToolName sends the name field of tool messages. OpenAI's schema for tool messages has
	// no name and strict endpoints reject it; some vLLM chat templates want it. Off by default.
	SendToolName bool
	// DocumentsAsText sends an attached document (a file part) as its extracted text instead of
	// a file content part, for OpenAI-compatible endpoints without file input (vLLM, Ollama's
	// /v1, GLM). Off by default: OpenAI reads PDFs.
	DocumentsAsText bool
}

// EncodeRequest returns the Chat Completions request body for req with the default options.
func EncodeRequest(req *parley.ChatRequest, stream bool) ([]byte, error) {
	return EncodeRequestWith(req, stream, EncodeOptions{})
}

// EncodeRequestWith returns the Chat Completions request body for req. Parley's message
// metadata is never sent. Errors are *parley.Error with code ECInvalid.
func EncodeRequestWith(req *parley.ChatRequest, stream bool, opts EncodeOptions) ([]byte, error) {
	return encodeRequest(req, stream, opts, nil)
}

// encodeRequest is EncodeRequestWith, taking the encoded tools from tc (nil: none) when req
// offers the tools it holds.
func encodeRequest(req *parley.ChatRequest, stream bool, opts EncodeOptions, tc *toolCache) ([]byte, error) {
	b, _, _, err := encodeParts(req, stream, opts, tc, true)
	return b, err
}

// encodeParts is encodeRequest in three parts: the request up to its tools, the tools (nil:
// none) and what follows them (nil when there are no tools: then the request is all in head).
// The tools are tc's encoding, shared by every request that offers them and only ever read: sent
// as a part of their own (upstream.Endpoint.PostParts), they are not copied into each request's
// body, of which they are most of the bytes. tail is in head's array, past head's end. With
// whole, the request is all in head, tools and tail nil.
func encodeParts(req *parley.ChatRequest, stream bool, opts EncodeOptions, tc *toolCache, whole bool) (head, tools, tail []byte, err error) {
	if req == nil {
		return nil, nil, nil, parley.Errorf(parley.ECInvalid, "no request")
	}
	if req.Model == "" {
		return nil, nil, nil, parley.Errorf(parley.ECInvalid, "model is required")
	}
	if len(req.Messages) == 0 {
		return nil, nil, nil, parley.Errorf(parley.ECInvalid, "no messages")
	}
	// The head, {"model":…,"messages":[…], is written directly when no message has tool calls
	// (their arguments are the model's text, which encoding/json checks and compacts): as the
	// Encoder wrote it, without its reflection, each message's text escaped straight into the
	// body instead of into a buffer of its own that the Encoder then checked again.
	var wh *wireHead
	tools, toolsErr := tc.encode(req.Tools) // its error is returned after the messages' errors
	room := 128                             // the tail's, and "tools"'s name
	if whole {
		room += len(tools)
	}
	b, err := appendHead(req, opts, tc, room)
	if err == errNotDirect {
		wh = &wireHead{Model: req.Model, Messages: make([]wireMessage, 0, len(req.Messages))}
		size := len(req.Model) + 256
		for i, m := range req.Messages {
			wm, err := encodeMessage(m.OpenAI(), opts)
			if err != nil {
				return nil, nil, nil, parley.Errorf(parley.ECInvalid, "message %d: %v", i, err)
			}
			wh.Messages = append(wh.Messages, wm)
			size += len(wm.Content) + 64
		}
		b = make([]byte, 0, size+room)
	} else if err != nil {
		return nil, nil, nil, err
	}
	if toolsErr != nil {
		return nil, nil, nil, toolsErr
	}
	wt := wireTail{Temperature: req.Temperature, Stream: stream}
	switch req.ToolChoice {
	case "", "auto", "none", "required":
	default:
		return nil, nil, nil, parley.Errorf(parley.ECInvalid, "unknown tool_choice %q", req.ToolChoice)
	}
	if tools != nil { // OpenAI rejects tool_choice without tools
		wt.ToolChoice = req.ToolChoice
	}
	if req.MaxTokens < 0 {
		return nil, nil, nil, parley.Errorf(parley.ECInvalid, "max_tokens must not be negative")
	}
	if opts.LegacyMaxTokens {
		wt.MaxTokens = req.MaxTokens
	} else {
		wt.MaxCompletionTokens = req.MaxTokens
	}
	if stream {
		wt.StreamOptions = &wireStreamOptions{IncludeUsage: true}
	}
	// The body is the three parts' objects joined, as encoding/json would write the one object
	// of all their fields in this order: {"model","messages"} + "tools" + {"tool_choice"…}.
	// The tools are encoded once per list (tc), not on every call: their JSON Schemas are most
	// of a request's bytes, and encoding/json validates and compacts a schema each time.
	if wh != nil {
		buf := bytes.NewBuffer(b)
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(wh); err != nil {
			return nil, nil, nil, parley.WrapError(parley.ECInvalid, err, "cannot encode request")
		}
		b = buf.Bytes()
		b = b[:len(b)-2] // "}\n"
	}
	if t := wt.Temperature; t != nil && (math.IsNaN(*t) || math.IsInf(*t, 0)) {
		_, err := json.Marshal(*t) // refuses it
		return nil, nil, nil, parley.WrapError(parley.ECInvalid, err, "cannot encode request")
	}
	if tools == nil {
		return appendTail(b, &wt), nil, nil, nil
	}
	b = append(b, `,"tools":`...)
	if whole {
		return appendTail(append(b, tools...), &wt), nil, nil, nil
	}
	return b, tools, appendTail(b[len(b):], &wt), nil
}

// appendTail appends the tail's fields and the request's closing brace, as encoding/json writes
// them after the head's and the tools' (a comma first): a finite temperature.
func appendTail(b []byte, t *wireTail) []byte {
	b = append(b, ',')
	n := len(b)
	if t.ToolChoice != "" {
		b = append(b, `,"tool_choice":`...)
		b = jsonstr.AppendNoHTML(b, t.ToolChoice)
	}
	if t.Temperature != nil {
		b = append(b, `,"temperature":`...)
		b = jsonstr.AppendFloat(b, *t.Temperature)
	}
	if t.MaxCompletionTokens != 0 {
		b = append(b, `,"max_completion_tokens":`...)
		b = strconv.AppendInt(b, int64(t.MaxCompletionTokens), 10)
	}
	if t.MaxTokens != 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, int64(t.MaxTokens), 10)
	}
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, t.Stream)
	if t.StreamOptions != nil {
		b = append(b, `,"stream_options":{"include_usage":`...)
		b = strconv.AppendBool(b, t.StreamOptions.IncludeUsage)
		b = append(b, '}')
	}
	// The first field's comma is the one written before it.
	return append(append(b[:n], b[n+1:]...), '}')
}

// errNotDirect: appendHead leaves the request to encoding/json.
var errNotDirect = errors.New("openai: the request head is not written directly")

// appendHead returns the request's head without its closing brace, {"model":…,"messages":[…],
// as encodeMessage and an Encoder that does not escape HTML write it, and with the same errors;
// errNotDirect (nothing written) when an assistant message has tool calls or a role is unknown.
func appendHead(req *parley.ChatRequest, opts EncodeOptions, tc *toolCache, extra int) ([]byte, error) {
	size := len(req.Model) + 256
	for i := range req.Messages {
		m := &req.Messages[i]
		if !m.Role.Valid() || m.Role == parley.RoleAssistant && len(m.ToolCalls) > 0 {
			return nil, errNotDirect
		}
		size += 64 + len(m.Name) + len(m.ToolCallID) + len(m.Reasoning)
		if !m.Content.IsParts() {
			size += len(m.Content.String()) * 9 / 8
		}
	}
	b := make([]byte, 0, size+extra) // extra: the room the caller asks for what follows
	b = append(b, `{"model":`...)
	b = jsonstr.AppendNoHTML(b, req.Model)
	b = append(b, `,"messages":[`...)
	for i := range req.Messages {
		m := &req.Messages[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":`...)
		b = jsonstr.AppendNoHTML(b, string(m.Role))
		b = append(b, `,"content":`...)
		switch {
		case m.Content.IsNull():
			b = append(b, "null"...)
		case m.Role == parley.RoleSystem && !m.Content.IsParts():
			b = tc.appendSystemPrompt(b, m.Content.String())
		case !m.Content.IsParts():
			b = jsonstr.Append(b, m.Content.String()) // as encodeContent escapes it
		default:
			c, err := encodeContent(m.Content, opts.DocumentsAsText)
			if err != nil {
				return nil, parley.Errorf(parley.ECInvalid, "message %d: %v", i, err)
			}
			b = append(b, c...)
		}
		// The fields encodeMessage keeps for each role.
		name, callID, reasoning := m.Name, "", ""
		switch m.Role {
		case parley.RoleAssistant:
			if opts.SendReasoning {
				reasoning = m.Reasoning
			}
		case parley.RoleTool:
			callID = m.ToolCallID
			if !opts.SendToolName {
				name = ""
			}
		}
		if name != "" {
			b = append(b, `,"name":`...)
			b = jsonstr.AppendNoHTML(b, name)
		}
		if callID != "" {
			b = append(b, `,"tool_call_id":`...)
			b = jsonstr.AppendNoHTML(b, callID)
		}
		if reasoning != "" {
			b = append(b, `,"reasoning_content":`...)
			b = jsonstr.AppendNoHTML(b, reasoning)
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// toolCache holds the encoding of the last list of tools a client sent: an agent offers the same
// tools on every call. Its zero value is ready; a nil one caches nothing.
type toolCache struct {
	mu    sync.Mutex
	specs []parley.ToolSpec // a copy of the list encoded
	json  []byte            // its encoding, "[…]"

	// The last long system prompt and its encoding: an agent sends the same one on every call.
	promptMu   sync.Mutex
	prompt     string
	promptJSON []byte
}

// minCachedPrompt is the shortest system prompt whose encoding a client keeps.
const minCachedPrompt = 512

// appendSystemPrompt appends text, a system message's, as jsonstr.Append does, its encoding
// taken from tc (nil: none) when it is the prompt tc encoded last.
func (tc *toolCache) appendSystemPrompt(b []byte, text string) []byte {
	if tc == nil || len(text) < minCachedPrompt {
		return jsonstr.Append(b, text)
	}
	tc.promptMu.Lock()
	defer tc.promptMu.Unlock()
	if text != tc.prompt || tc.promptJSON == nil {
		tc.prompt, tc.promptJSON = text, jsonstr.Append(make([]byte, 0, len(text)+len(text)/8+2), text)
	}
	return append(b, tc.promptJSON...)
}

// encode returns the JSON array of the tools of a request; nil for none.
func (tc *toolCache) encode(specs []parley.ToolSpec) ([]byte, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	if tc != nil {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		if sameTools(tc.specs, specs) {
			return tc.json, nil
		}
	}
	tools := make([]wireTool, 0, len(specs))
	for _, t := range specs {
		if t.Name == "" {
			return nil, parley.Errorf(parley.ECInvalid, "a tool has no name")
		}
		params := bytes.TrimSpace(t.Parameters)
		if len(params) == 0 || bytes.Equal(params, []byte("null")) {
			params = []byte(`{"type":"object","properties":{}}`)
		} else if !json.Valid(params) {
			return nil, parley.Errorf(parley.ECInvalid, "tool %q: parameters are not valid JSON", t.Name)
		}
		tools = append(tools, wireTool{
			Type:     "function",
			Function: wireFunction{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(params)},
		})
	}
	b, err := convert.Marshal(tools)
	if err != nil {
		return nil, parley.WrapError(parley.ECInvalid, err, "cannot encode request")
	}
	if tc != nil {
		tc.specs = make([]parley.ToolSpec, len(specs))
		for i, t := range specs {
			tc.specs[i] = parley.ToolSpec{Name: t.Name, Description: t.Description, Parameters: bytes.Clone(t.Parameters)}
		}
		tc.json = b
	}
	return b, nil
}

// sameTools reports whether a and b offer the same tools, in the same order.
func sameTools(a, b []parley.ToolSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || !bytes.Equal(a[i].Parameters, b[i].Parameters) {
			return false
		}
	}
	return true
}

func encodeMessage(m parley.Message, opts EncodeOptions) (wireMessage, error) {
	if !m.Role.Valid() {
		return wireMessage{}, fmt.Errorf("unknown role %q", m.Role)
	}
	wm := wireMessage{Role: string(m.Role), Name: m.Name}
	content, err := encodeContent(m.Content, opts.DocumentsAsText)
	if err != nil {
		return wireMessage{}, err
	}
	wm.Content = content
	switch m.Role {
	case parley.RoleAssistant:
		for _, tc := range m.ToolCalls {
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			args := tc.Function.Arguments
			if args == "" { // Ollama's /v1 fails to parse "" as arguments
				args = "{}"
			}
			wm.ToolCalls = append(wm.ToolCalls, wireToolCall{
				ID: tc.ID, Type: typ, Function: wireCall{Name: tc.Function.Name, Arguments: args},
			})
		}
		if opts.SendReasoning {
			wm.Reasoning = m.Reasoning
		}
	case parley.RoleTool:
		wm.ToolCallID = m.ToolCallID
		if !opts.SendToolName {
			wm.Name = ""
		}
	}
	return wm, nil
}

// encodeContent keeps the content's form: null, a string, or an array of parts.
func encodeContent(c parley.Content, docsAsText bool) (json.RawMessage, error) {
	switch {
	case c.IsNull():
		return json.RawMessage("null"), nil
	case !c.IsParts():
		// A string, escaped as json.Marshal escapes it (a system prompt is most of a request's
		// text: json.Marshal went through Content's MarshalJSON and checked its result again).
		text := c.String()
		return jsonstr.Append(make([]byte, 0, len(text)+len(text)/8+2), text), nil
	}
	parts := make([]wirePart, 0, len(c.Parts()))
	for i, p := range c.Parts() {
		switch p.Type {
		case "text":
			text := p.Text
			parts = append(parts, wirePart{Type: "text", Text: &text})
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return nil, fmt.Errorf("content part %d: image_url needs a url", i)
			}
			parts = append(parts, wirePart{Type: "image_url", ImageURL: &wireImage{URL: p.ImageURL.URL, Detail: p.ImageURL.Detail}})
		case "file":
			if p.File == nil {
				return nil, fmt.Errorf("content part %d: file needs a file object", i)
			}
			if p.File.FileData == "" || docsAsText {
				// A reference nobody resolved (its id names a Parley file, not one of the
				// provider's: the model is told the name only), or an endpoint without file
				// input: the document's text.
				note := convert.DocumentText(p.File)
				parts = append(parts, wirePart{Type: "text", Text: &note})
				continue
			}
			// The chat API's file input: the document inline, with its name.
			parts = append(parts, wirePart{Type: "file", File: &wireFile{Filename: p.File.Filename, FileData: p.File.FileData}})
		default:
			return nil, fmt.Errorf("content part %d: unknown type %q", i, p.Type)
		}
	}
	return convert.Marshal(parts)
}

// The request wire format. Field order is the order of the encoded JSON.
// A request is written in parts (encodeRequest): wireHead, then the tools, then wireTail.
type wireHead struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
}

type wireTail struct {
	ToolChoice          string             `json:"tool_choice,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	MaxCompletionTokens int                `json:"max_completion_tokens,omitempty"`
	MaxTokens           int                `json:"max_tokens,omitempty"`
	Stream              bool               `json:"stream"`
	StreamOptions       *wireStreamOptions `json:"stream_options,omitempty"`
}

type wireStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Reasoning  string          `json:"reasoning_content,omitempty"`
}

type wirePart struct {
	Type     string     `json:"type"`
	Text     *string    `json:"text,omitempty"` // always set for text parts, even when empty
	ImageURL *wireImage `json:"image_url,omitempty"`
	File     *wireFile  `json:"file,omitempty"`
}

// wireFile is a file content part's body: a document inline as a data: URL.
type wireFile struct {
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data"`
}

type wireImage struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

type wireToolCall struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function wireCall `json:"function"`
}

type wireCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}
