// Package anthropic is the adapter for Anthropic's Messages API. The translation functions
// (EncodeRequest, NewStream) do no I/O; Client adds HTTP.
package anthropic

import (
	"context"
	"net/http"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.anthropic.com"

// APIVersion is the anthropic-version header the wire format of this package follows.
const APIVersion = "2023-06-01"

// Config configures a Client.
type Config struct {
	BaseURL    string // requests go to BaseURL + "/v1/messages"
	APIKey     string // sent as x-api-key
	HTTPClient *http.Client
	Headers    map[string]string // added to every request after the defaults
	Options
}

// Client calls the Messages API. It implements parley.Provider.
type Client struct {
	url     string
	ep      upstream.Endpoint
	headers http.Header
	opts    Options
}

var _ parley.Provider = (*Client)(nil)

// New returns a Client. A nil HTTPClient means http.DefaultClient; the caller's context bounds
// each call.
func New(cfg Config) *Client {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}, "Anthropic-Version": {APIVersion}}
	if cfg.APIKey != "" {
		h.Set("X-Api-Key", cfg.APIKey)
	}
	base, hc, h := upstream.Setup(cfg.BaseURL, DefaultBaseURL, cfg.HTTPClient, h, cfg.Headers)
	return &Client{url: base + "/v1/messages", ep: upstream.Endpoint{Client: hc, Secret: cfg.APIKey}, headers: h, opts: cfg.Options}
}

// Stream starts a streamed call. The caller must Close the stream.
func (c *Client) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	body, err := EncodeRequest(req, true, c.opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.ep.Post(ctx, c.url, c.headers, body)
	if err != nil {
		return nil, err
	}
	return newStream(ctx, resp.Body), nil
}
