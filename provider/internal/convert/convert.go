// Package convert holds the pieces of history translation that the non-OpenAI adapters share:
// data URLs, tool arguments as JSON objects, default schemas, and where the current turn starts.
package convert

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/parleyhq/parley"
)

// Marshal encodes v as JSON without escaping <, > and &, and without a final newline.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// DataURL is an image given inline: its media type and its base64 bytes.
type DataURL struct {
	MediaType string
	Data      string // standard base64
}

// ParseDataURL reads "data:<media type>;base64,<data>". ok is false for any other URL; err is
// set for a data: URL that is not base64 or whose data does not decode.
func ParseDataURL(u string) (d DataURL, ok bool, err error) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return d, false, nil
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found {
		return d, true, fmt.Errorf("data URL without a comma")
	}
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !isBase64 {
		return d, true, fmt.Errorf("data URL is not base64")
	}
	if mediaType == "" {
		return d, true, fmt.Errorf("data URL without a media type")
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		return d, true, fmt.Errorf("data URL: invalid base64")
	}
	return DataURL{MediaType: mediaType, Data: data}, true, nil
}

// ArgsObject returns a tool call's arguments as a JSON object: {} when they are empty, and also
// when the model produced something that is not an object (the tool got an error for that call).
func ArgsObject(args string) json.RawMessage {
	b := bytes.TrimSpace([]byte(args))
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(b)
}

// Schema returns a tool's parameter schema, or an empty object schema when it has none. An
// invalid schema is ECInvalid.
func Schema(t parley.ToolSpec) (json.RawMessage, error) {
	if t.Name == "" {
		return nil, parley.Errorf(parley.ECInvalid, "a tool has no name")
	}
	params := bytes.TrimSpace(t.Parameters)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	if !json.Valid(params) {
		return nil, parley.Errorf(parley.ECInvalid, "tool %q: parameters are not valid JSON", t.Name)
	}
	return json.RawMessage(params), nil
}

// CallNames maps each tool call id of msgs to the function it called.
func CallNames(msgs []parley.Message) map[string]string {
	names := map[string]string{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Function.Name
		}
	}
	return names
}

// TurnStart returns the index of the last user message: what follows it is the current turn, the
// tool loop in progress. It returns 0 when there is no user message.
func TurnStart(msgs []parley.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == parley.RoleUser {
			return i
		}
	}
	return 0
}

// SystemText joins the text of msgs' system messages with blank lines.
func SystemText(msgs []parley.Message) string {
	var parts []string
	for _, m := range msgs {
		if m.Role == parley.RoleSystem {
			if t := m.Content.String(); t != "" {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n\n")
}

// CheckRequest checks what every adapter requires of a request.
func CheckRequest(req *parley.ChatRequest) error {
	if req == nil {
		return parley.Errorf(parley.ECInvalid, "no request")
	}
	if req.Model == "" {
		return parley.Errorf(parley.ECInvalid, "model is required")
	}
	if len(req.Messages) == 0 {
		return parley.Errorf(parley.ECInvalid, "no messages")
	}
	if req.MaxTokens < 0 {
		return parley.Errorf(parley.ECInvalid, "max_tokens must not be negative")
	}
	switch req.ToolChoice {
	case "", "auto", "none", "required":
	default:
		return parley.Errorf(parley.ECInvalid, "unknown tool_choice %q", req.ToolChoice)
	}
	for i, m := range req.Messages {
		if !m.Role.Valid() {
			return parley.Errorf(parley.ECInvalid, "message %d: unknown role %q", i, m.Role)
		}
	}
	return nil
}

// FileNote is what a model is told of a file part that carries no data (a reference the agent did
// not resolve): its name only.
func FileNote(f *parley.FileRef) string {
	return fmt.Sprintf("[Attached file %q]", f.Filename)
}

// DocumentText is the text form of a file part, for a provider without document input: the
// document's extracted text, or a note naming it.
func DocumentText(f *parley.FileRef) string {
	if f.Text != "" {
		return f.Text
	}
	return FileNote(f)
}

// TextOf joins the text of content as a provider without document input reads it: text parts, and
// the text of file parts (DocumentText), one per line.
func TextOf(c parley.Content) string {
	if !c.IsParts() {
		return c.String()
	}
	var b strings.Builder
	for _, p := range c.Parts() {
		t := ""
		switch {
		case p.Type == "text":
			t = p.Text
		case p.Type == "file" && p.File != nil:
			t = DocumentText(p.File)
		default:
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(t)
	}
	return b.String()
}
