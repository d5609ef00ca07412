// Package ollama is the adapter for Ollama's native chat API (POST /api/chat, a stream of
// newline-delimited JSON objects). Ollama's OpenAI-compatible /v1 endpoint is served by the
// openai package instead. The translation functions (EncodeRequest, NewStream) do no I/O; Client
// adds HTTP.
package ollama

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/convert"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "http://localhost:11434"

// Options are the per-provider choices of the native API.
type Options struct {
	// Think sets "think": reasoning models then stream their thinking apart from the answer.
	Think *bool
}

// Config configures a Client.
type Config struct {
	BaseURL    string // requests go to BaseURL + "/api/chat"
	APIKey     string // sent as a bearer token when set (Ollama behind a proxy, or ollama.com)
	HTTPClient *http.Client
	Headers    map[string]string
	Options
}

// Client calls /api/chat. It implements parley.Provider.
type Client struct {
	url     string
	ep      upstream.Endpoint
	headers http.Header
	opts    Options
}

var _ parley.Provider = (*Client)(nil)

// New returns a Client. A nil HTTPClient means http.DefaultClient.
func New(cfg Config) *Client {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/x-ndjson"}}
	if cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	base, hc, h := upstream.Setup(cfg.BaseURL, DefaultBaseURL, cfg.HTTPClient, h, cfg.Headers)
	return &Client{url: base + "/api/chat", ep: upstream.Endpoint{Client: hc, Secret: cfg.APIKey}, headers: h, opts: cfg.Options}
}

// Stream starts a streamed call. The caller must Close the stream.
func (c *Client) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	body, err := EncodeRequest(req, c.opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.ep.Post(ctx, c.url, c.headers, body)
	if err != nil {
		return nil, err
	}
	return newStream(ctx, resp.Body), nil
}

// EncodeRequest returns the /api/chat request body for req, streamed. Images must be inline
// (data: URLs): Ollama takes base64 bytes, not URLs. Tool calls go back with their arguments as
// objects and tool results name their tool. Errors are *parley.Error with code ECInvalid.
func EncodeRequest(req *parley.ChatRequest, opts Options) ([]byte, error) {
	if err := convert.CheckRequest(req); err != nil {
		return nil, err
	}
	w := wireRequest{Model: req.Model, Stream: true, Think: opts.Think}
	names := convert.CallNames(req.Messages)
	for i, m := range req.Messages {
		// Ollama takes no documents: a PDF is given as its extracted text.
		wm := wireMessage{Role: string(m.Role), Content: convert.TextOf(m.Content)}
		if m.Content.IsParts() {
			for j, p := range m.Content.Parts() {
				if p.Type != "image_url" || p.ImageURL == nil {
					continue
				}
				d, ok, err := convert.ParseDataURL(p.ImageURL.URL)
				if err == nil && !ok {
					err = errors.New("Ollama takes images inline only (data: URLs)")
				}
				if err != nil {
					return nil, parley.Errorf(parley.ECInvalid, "message %d: content part %d: %v", i, j, err)
				}
				wm.Images = append(wm.Images, d.Data)
			}
		}
		switch m.Role {
		case parley.RoleAssistant:
			wm.Thinking = m.Reasoning
			for _, c := range m.ToolCalls {
				wm.ToolCalls = append(wm.ToolCalls, wireToolCall{Function: wireCall{Name: c.Function.Name, Arguments: convert.ArgsObject(c.Function.Arguments)}})
			}
		case parley.RoleTool:
			wm.ToolName = names[m.ToolCallID]
			if wm.ToolName == "" {
				wm.ToolName = m.Name
			}
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		schema, err := convert.Schema(t)
		if err != nil {
			return nil, err
		}
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireFunction{Name: t.Name, Description: t.Description, Parameters: schema}})
	}
	if req.ToolChoice == "none" {
		w.Tools = nil // the native API has no tool_choice; offering no tools is the same
	}
	if req.Temperature != nil || req.MaxTokens > 0 {
		w.Options = &wireOptions{Temperature: req.Temperature, NumPredict: req.MaxTokens}
	}
	b, err := convert.Marshal(w)
	if err != nil {
		return nil, parley.WrapError(parley.ECInvalid, err, "cannot encode request")
	}
	return b, nil
}

type wireRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Tools    []wireTool    `json:"tools,omitempty"`
	Stream   bool          `json:"stream"`
	Think    *bool         `json:"think,omitempty"`
	Options  *wireOptions  `json:"options,omitempty"`
}

type wireMessage struct {
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	Thinking  string         `json:"thinking,omitempty"`
	Images    []string       `json:"images,omitempty"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
	ToolName  string         `json:"tool_name,omitempty"`
}

type wireToolCall struct {
	ID       string   `json:"id,omitempty"`
	Function wireCall `json:"function"`
}

type wireCall struct {
	Index     *int            `json:"index,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
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

type wireOptions struct {
	Temperature *float64 `json:"temperature,omitempty"`
	NumPredict  int      `json:"num_predict,omitempty"`
}

// maxLine bounds one line of the stream.
const maxLine = upstream.MaxEventSize

// NewStream reads an /api/chat stream (one JSON object per line) as parley.StreamEvents: content
// and thinking deltas, whole tool calls, and at the line with "done": true the finish reason and
// the usage (prompt_eval_count, eval_count). Next returns io.EOF after that line; a body that ends
// before it, or an {"error": …} line, yields a *parley.Error with code ECUpstream.
func NewStream(body io.ReadCloser) parley.Stream { return newStream(context.Background(), body) }

func newStream(ctx context.Context, body io.ReadCloser) *upstream.Stream {
	d := &decoder{r: bufio.NewReaderSize(body, 64<<10)}
	return upstream.NewStream(ctx, body, `"done": true`, d.frame)
}

// decoder reads the stream line by line.
type decoder struct {
	r       *bufio.Reader
	calls   int
	partial bool // the last line read had no line end: the body ended after it
}

type wireChunk struct {
	Message *struct {
		Content   string         `json:"content"`
		Thinking  string         `json:"thinking"`
		ToolCalls []wireToolCall `json:"tool_calls"`
	} `json:"message"`
	Done            bool            `json:"done"`
	DoneReason      string          `json:"done_reason"`
	PromptEvalCount int64           `json:"prompt_eval_count"`
	EvalCount       int64           `json:"eval_count"`
	Error           json.RawMessage `json:"error"`
}

// frame reads one line and appends its events to out; blank lines yield none.
func (d *decoder) frame(out []parley.StreamEvent) ([]parley.StreamEvent, error) {
	line, err := d.readLine()
	if err != nil {
		return out, upstream.Cut(err)
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return out, nil
	}
	out, err = d.decode(line, out)
	if d.partial && err != nil && err != io.EOF {
		return out, io.ErrUnexpectedEOF // a line cut short
	}
	return out, err
}

// readLine returns the next line without its end; a line longer than maxLine is an error, and
// io.EOF comes only at the end of the body (a last line without an end is returned first).
func (d *decoder) readLine() ([]byte, error) {
	var line []byte
	for {
		part, err := d.r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxLine {
			return nil, upstream.ErrTooLarge
		}
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			d.partial = true
			return line, nil
		default:
			return nil, err
		}
	}
}

func (d *decoder) decode(line []byte, out []parley.StreamEvent) ([]parley.StreamEvent, error) {
	var c wireChunk
	if err := json.Unmarshal(line, &c); err != nil {
		return out, parley.WrapError(parley.ECUpstream, err, "invalid provider stream event")
	}
	if upstream.IsSet(c.Error) {
		return out, parley.WrapError(parley.ECUpstream, upstream.ParseError(c.Error), "provider stream failed")
	}
	if m := c.Message; m != nil {
		if m.Thinking != "" {
			out = append(out, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: m.Thinking})
		}
		if m.Content != "" {
			out = append(out, parley.StreamEvent{Type: parley.StreamContent, Content: m.Content})
		}
		for _, tc := range m.ToolCalls {
			args := "{}"
			if upstream.IsSet(tc.Function.Arguments) {
				args = string(tc.Function.Arguments)
			}
			out = append(out, parley.StreamEvent{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{
				Index: d.calls, ID: tc.ID, Name: tc.Function.Name, Arguments: args}})
			d.calls++
		}
	}
	if !c.Done {
		return out, nil
	}
	reason := c.DoneReason // "stop", "length" or "load"
	switch {
	case d.calls > 0:
		reason = "tool_calls"
	case reason == "":
		reason = "stop"
	}
	u := &parley.Usage{PromptTokens: c.PromptEvalCount, CompletionTokens: c.EvalCount, TotalTokens: c.PromptEvalCount + c.EvalCount}
	out = append(out, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: reason}, parley.StreamEvent{Type: parley.StreamUsage, Usage: u})
	return out, io.EOF
}
