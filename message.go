package parley

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Role is the author of a message, as in the OpenAI chat format.
type Role string

// The four roles of the OpenAI chat format.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Valid reports whether r is one of the four known roles.
func (r Role) Valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// Message is one message of a conversation in OpenAI chat format, plus the metadata Parley keeps
// beside it. The OpenAI fields come first; the metadata fields are never sent to a provider.
type Message struct {
	Role       Role       `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Reasoning is the model's reasoning ("thinking") text, carried under the name the
	// OpenAI-compatible providers (DeepSeek, GLM, vLLM) use for it.
	Reasoning string `json:"reasoning_content,omitempty"`
	// ThinkingBlocks are the model's reasoning as signed blocks (Anthropic's extended thinking),
	// under the name LiteLLM's OpenAI format uses. They go back to the provider that signed them;
	// other providers are sent only Reasoning, or nothing.
	ThinkingBlocks []ThinkingBlock `json:"thinking_blocks,omitempty"`

	// Metadata kept by Parley.
	ID         string `json:"id,omitempty"`          // UUIDv7, time-ordered
	SessionID  string `json:"session_id,omitempty"`  // owning session
	Seq        int64  `json:"seq,omitempty"`         // 1-based storage order in the session (all branches), set by the store
	RunID      string `json:"run_id,omitempty"`      // the run that produced it
	Model      string `json:"model,omitempty"`       // assistant: the model that answered
	LatencyMS  int64  `json:"latency_ms,omitempty"`  // assistant: model time; tool: execution time
	Usage      *Usage `json:"usage,omitempty"`       // assistant: tokens of the call that produced it
	Success    *bool  `json:"success,omitempty"`     // tool: whether the tool succeeded
	ResourceID string `json:"resource_id,omitempty"` // tool: a resource the result refers to
	Server     string `json:"server,omitempty"`      // tool: the MCP server that ran the tool
	// ParentID is the message this one follows in its branch ("" for a first message); set by
	// the store (see BranchStore).
	ParentID string `json:"parent_id,omitempty"`
	// Error marks a failed turn: on the assistant message stored when a run's model call failed
	// (an upstream error, a cut stream, a timeout), the code of that error. The message holds
	// what was streamed before the failure. A failed turn is left out of what the model is sent
	// (package llmctx) and may be retried.
	Error     ErrorCode `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Failed reports whether m marks a failed turn.
func (m *Message) Failed() bool { return m.Error != "" }

// OpenAI returns a copy of m without Parley's metadata: exactly what a provider is sent.
func (m Message) OpenAI() Message {
	return Message{
		Role:       m.Role,
		Content:    m.Content,
		Name:       m.Name,
		ToolCalls:  m.ToolCalls,
		ToolCallID: m.ToolCallID,
		Reasoning:  m.Reasoning,

		ThinkingBlocks: m.ThinkingBlocks,
	}
}

// ModelView returns what the model view of a history keeps of m (Store.ModelHistory): the
// OpenAI fields, and the mark of a failed turn, which llmctx needs to leave the turn out.
func (m Message) ModelView() Message {
	v := m.OpenAI()
	v.Error = m.Error
	return v
}

// ThinkingBlock is one block of signed reasoning: "thinking" with its text and signature, or
// "redacted_thinking" with the encrypted data the provider gave instead of text.
type ThinkingBlock struct {
	Type      string `json:"type"` // "thinking" or "redacted_thinking"
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`
}

// ToolCall is one function call requested by an assistant message.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // always "function"
	Function FunctionCall `json:"function"`
	// ExtraContent is vendor data that must go back with the call, in the shape Gemini's
	// OpenAI-compatible API uses for it: {"google": {"thought_signature": "…"}}.
	ExtraContent *ExtraContent `json:"extra_content,omitempty"`
}

// ExtraContent holds vendor data of a tool call, keyed by vendor.
type ExtraContent struct {
	Google *GoogleExtra `json:"google,omitempty"`
}

// GoogleExtra is Gemini's data on a tool call: the signature of the thought that led to it,
// which Gemini's thinking models require back on the calls of the current turn.
type GoogleExtra struct {
	ThoughtSignature string `json:"thought_signature,omitempty"`
}

// ThoughtSignature returns the Gemini thought signature of c, or "".
func (c ToolCall) ThoughtSignature() string {
	if c.ExtraContent == nil || c.ExtraContent.Google == nil {
		return ""
	}
	return c.ExtraContent.Google.ThoughtSignature
}

// FunctionCall names the function and carries its arguments as a JSON-encoded string, as the
// OpenAI format does (the model may produce invalid JSON; it is kept as produced).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage counts the tokens of one model call (or a sum of calls), normalized across providers as
// OpenAI counts them: PromptTokens includes CachedTokens (prompt tokens read from the provider's
// cache) and CompletionTokens includes ReasoningTokens.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	CachedTokens     int64 `json:"cached_tokens,omitempty"`
	// Cost is the price of these tokens in US dollars, from the configured price table; 0 when
	// the model has no price.
	Cost float64 `json:"cost,omitempty"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.CachedTokens += o.CachedTokens
	u.Cost += o.Cost
}

// Part is one element of array-form content: text, an image (seed 000's binary_content) or a file.
type Part struct {
	Type     string    `json:"type"` // "text", "image_url" or "file"
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
	File     *FileRef  `json:"file,omitempty"`
}

// FileRef is the body of a "file" part, in the shape of the OpenAI chat format's file input. A
// stored message names an uploaded file by FileID (the id of POST /api/v1/files) and keeps its
// Filename; it never holds the bytes. Before a model call the agent resolves the reference
// (package files): images become image_url parts, text files text parts, and a PDF a file part
// with FileData (a data: URL) and Text, the document's extracted text, for the adapters whose
// provider takes no documents.
type FileRef struct {
	FileID   string `json:"file_id,omitempty"`
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data,omitempty"` // data:<media type>;base64,… (only in what a model is sent)
	// Text is the document's text for providers that take no document input; never stored or
	// sent as such.
	Text string `json:"-"`
}

// MarshalJSON writes "text" on every text part, even an empty one, as the OpenAI format requires.
func (p Part) MarshalJSON() ([]byte, error) {
	type plain Part
	if p.Type == "text" && p.Text == "" {
		return json.Marshal(struct {
			Type     string    `json:"type"`
			Text     string    `json:"text"`
			ImageURL *ImageURL `json:"image_url,omitempty"`
			File     *FileRef  `json:"file,omitempty"`
		}{p.Type, p.Text, p.ImageURL, p.File})
	}
	return json.Marshal(plain(p))
}

// ImageURL is an image by URL or as a data: URL with base64 bytes.
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// Content is a message's content in one of the three forms the OpenAI format allows: null, a
// string, or an array of parts. The zero value is null. The form is kept through a JSON round trip.
type Content struct {
	text   string
	isText bool // string form (text may be empty)
	parts  []Part
}

// Text returns string-form content.
func Text(s string) Content { return Content{text: s, isText: true} }

// Parts returns array-form content. With no parts it is an empty array, not null.
func Parts(parts ...Part) Content {
	if parts == nil {
		parts = []Part{}
	}
	return Content{parts: parts}
}

// IsNull reports whether the content is JSON null.
func (c Content) IsNull() bool { return !c.isText && c.parts == nil }

// IsParts reports whether the content is in array form.
func (c Content) IsParts() bool { return c.parts != nil }

// Parts returns the parts of array-form content, or nil.
func (c Content) Parts() []Part { return c.parts }

// String returns the text of the content: the string itself, or the text parts joined by newlines.
func (c Content) String() string {
	if c.isText {
		return c.text
	}
	var b strings.Builder
	for _, p := range c.parts {
		if p.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// MarshalJSON encodes the content in its own form.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.parts != nil:
		return json.Marshal(c.parts)
	case c.isText:
		return json.Marshal(c.text)
	default:
		return []byte("null"), nil
	}
}

// UnmarshalJSON accepts null, a string, or an array of parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*c = Content{}
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Text(s)
	case b[0] == '[':
		var parts []Part
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		for i, p := range parts {
			switch p.Type {
			case "text":
			case "image_url":
				if p.ImageURL == nil || p.ImageURL.URL == "" {
					return fmt.Errorf("content part %d: image_url needs a url", i)
				}
			case "file":
				if p.File == nil || (p.File.FileID == "" && p.File.FileData == "") {
					return fmt.Errorf("content part %d: file needs a file_id or file_data", i)
				}
			default:
				return fmt.Errorf("content part %d: unknown type %q", i, p.Type)
			}
		}
		*c = Parts(parts...)
	default:
		return errors.New("content must be null, a string or an array of parts")
	}
	return nil
}
