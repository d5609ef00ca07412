// Package gemini is the adapter for the Gemini API (generateContent and
// streamGenerateContent with alt=sse). The translation functions (EncodeRequest, NewStream,
// DecodeResponse) do no I/O; Client adds HTTP.
package gemini

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/v1beta"

// Config configures a Client.
type Config struct {
	BaseURL    string // requests go to BaseURL + "/models/<model>:streamGenerateContent?alt=sse"
	APIKey     string // sent as x-goog-api-key
	HTTPClient *http.Client
	Headers    map[string]string // added to every request after the defaults
	Options
}

// Client calls the Gemini API. It implements parley.Provider.
type Client struct {
	base    string
	ep      upstream.Endpoint
	headers http.Header
	opts    Options
}

var _ parley.Provider = (*Client)(nil)

// New returns a Client. A nil HTTPClient means http.DefaultClient; the caller's context bounds
// each call.
func New(cfg Config) *Client {
	h := http.Header{"Content-Type": {"application/json"}}
	if cfg.APIKey != "" {
		h.Set("X-Goog-Api-Key", cfg.APIKey)
	}
	base, hc, h := upstream.Setup(cfg.BaseURL, DefaultBaseURL, cfg.HTTPClient, h, cfg.Headers)
	return &Client{base: base, ep: upstream.Endpoint{Client: hc, Secret: cfg.APIKey}, headers: h, opts: cfg.Options}
}

// modelURL is the URL of a method of the model; "models/" before the name is optional.
func (c *Client) modelURL(model, method string) string {
	return c.base + "/models/" + url.PathEscape(strings.TrimPrefix(model, "models/")) + ":" + method
}

// Stream starts a streamed call. The caller must Close the stream.
func (c *Client) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	body, err := EncodeRequest(req, c.opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.ep.Post(ctx, c.modelURL(req.Model, "streamGenerateContent")+"?alt=sse", c.headers, body)
	if err != nil {
		return nil, err
	}
	return newStream(ctx, resp.Body), nil
}

// Complete makes a generateContent call and returns the whole answer.
func (c *Client) Complete(ctx context.Context, req *parley.ChatRequest) (*parley.Response, error) {
	body, err := EncodeRequest(req, c.opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.ep.Post(ctx, c.modelURL(req.Model, "generateContent"), c.headers, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := upstream.ReadBody(ctx, resp.Body, upstream.MaxResponseSize)
	if err != nil {
		return nil, err
	}
	return DecodeResponse(data)
}
