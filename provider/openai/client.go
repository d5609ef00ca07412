// Package openai is the adapter for the OpenAI Chat Completions API and the endpoints that speak
// it: OpenAI, vLLM, Ollama's /v1, GLM, DeepSeek. The translation functions (EncodeRequest,
// DecodeResponse, NewStream) do no I/O; Client adds HTTP.
package openai

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures a Client.
type Config struct {
	BaseURL    string // e.g. "https://api.openai.com/v1"; requests go to BaseURL + "/chat/completions"
	APIKey     string // sent as "Authorization: Bearer <key>" when set
	HTTPClient *http.Client
	// Headers are added to every request after the defaults, so they may override them.
	Headers map[string]string

	// See EncodeOptions.
	SendReasoning   bool
	LegacyMaxTokens bool
	SendToolName    bool
	DocumentsAsText bool
}

// Client calls a Chat Completions endpoint. It implements parley.Provider.
type Client struct {
	url     string
	key     string
	hc      *http.Client
	headers map[string]string
	opts    EncodeOptions
	now     func() time.Time // for Retry-After dates
	maxBody int64            // bound on a non-streamed response body
	tools   toolCache        // the encoding of the tools last offered

	// The headers of a streamed and of a whole call, made once: Post copies them into each
	// request's own header map (their values are never changed in place).
	streamHeader, completeHeader http.Header
}

var _ parley.Provider = (*Client)(nil)

// New returns a Client. A nil HTTPClient means http.DefaultClient: the caller's context bounds
// each call, since a client-wide timeout would also cut long streams.
func New(cfg Config) *Client {
	base := strings.TrimRight(cfg.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	headers := make(map[string]string, len(cfg.Headers))
	for k, v := range cfg.Headers {
		headers[k] = v
	}
	c := &Client{
		url:     base + "/chat/completions",
		key:     cfg.APIKey,
		hc:      hc,
		headers: headers,
		opts:    EncodeOptions{SendReasoning: cfg.SendReasoning, LegacyMaxTokens: cfg.LegacyMaxTokens, SendToolName: cfg.SendToolName, DocumentsAsText: cfg.DocumentsAsText},
		now:     time.Now,
		maxBody: upstream.MaxResponseSize,
	}
	c.streamHeader, c.completeHeader = c.header("text/event-stream"), c.header("application/json")
	return c
}

// header returns the headers of a call whose answer is of type accept.
func (c *Client) header(accept string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", accept)
	if c.key != "" {
		h.Set("Authorization", "Bearer "+c.key)
	}
	for k, v := range c.headers {
		h.Set(k, v)
	}
	return h
}

// Stream starts a streamed call (stream:true with usage). The caller must Close the stream.
func (c *Client) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	head, tools, tail, err := encodeParts(req, true, c.opts, &c.tools, false)
	if err != nil {
		return nil, err
	}
	resp, err := c.post(ctx, c.streamHeader, head, tools, tail)
	if err != nil {
		return nil, err
	}
	return newStream(ctx, resp.Body), nil
}

// Complete makes a non-streamed call (stream:false) and returns the whole answer.
func (c *Client) Complete(ctx context.Context, req *parley.ChatRequest) (*parley.Response, error) {
	head, tools, tail, err := encodeParts(req, false, c.opts, &c.tools, false)
	if err != nil {
		return nil, err
	}
	resp, err := c.post(ctx, c.completeHeader, head, tools, tail)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := upstream.ReadBody(ctx, resp.Body, c.maxBody)
	if err != nil {
		return nil, err
	}
	return DecodeResponse(data)
}

// post sends the body in its parts (encodeParts) with the headers h (streamHeader or
// completeHeader) and returns a 2xx response, whose body the caller closes.
func (c *Client) post(ctx context.Context, h http.Header, head, tools, tail []byte) (*http.Response, error) {
	ep := upstream.Endpoint{Client: c.hc, Secret: c.key, Now: c.now}
	if tools == nil {
		return ep.Post(ctx, c.url, h, head)
	}
	return ep.PostParts(ctx, c.url, h, head, tools, tail)
}

// StatusError is the provider's non-2xx answer; see parley.StatusError.
type StatusError = parley.StatusError
