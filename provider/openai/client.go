// Package openai is the adapter for the OpenAI Chat Completions API and the endpoints that speak
// it: OpenAI, vLLM, Ollama's /v1, GLM, DeepSeek. The translation functions (EncodeRequest,
// DecodeResponse, NewStream) do no I/O; Client adds HTTP.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/parleyhq/parley"
)

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Bounds on what is read from a provider outside a stream.
const (
	maxResponseSize  = 32 << 20 // a non-streamed response body
	maxErrorBodySize = 64 << 10 // the body of a non-2xx response
)

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
	return &Client{
		url:     base + "/chat/completions",
		key:     cfg.APIKey,
		hc:      hc,
		headers: headers,
		opts:    EncodeOptions{SendReasoning: cfg.SendReasoning, LegacyMaxTokens: cfg.LegacyMaxTokens, SendToolName: cfg.SendToolName},
		now:     time.Now,
		maxBody: maxResponseSize,
	}
}

// Stream starts a streamed call (stream:true with usage). The caller must Close the stream.
func (c *Client) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	body, err := EncodeRequestWith(req, true, c.opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.post(ctx, body, "text/event-stream")
	if err != nil {
		return nil, err
	}
	return newStream(ctx, resp.Body), nil
}

// Complete makes a non-streamed call (stream:false) and returns the whole answer.
func (c *Client) Complete(ctx context.Context, req *parley.ChatRequest) (*parley.Response, error) {
	body, err := EncodeRequestWith(req, false, c.opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.post(ctx, body, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
		return nil, parley.WrapError(parley.ECUpstream, err, "provider response failed")
	}
	if int64(len(data)) > c.maxBody {
		return nil, parley.Errorf(parley.ECUpstream, "provider response too large")
	}
	return DecodeResponse(data)
}

// post sends body and returns a 2xx response, whose body the caller closes.
func (c *Client) post(ctx context.Context, body []byte, accept string) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, parley.WrapError(parley.ECInternal, err, "invalid provider URL")
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", accept)
	if c.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.key)
	}
	for k, v := range c.headers {
		hr.Header.Set(k, v)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
		return nil, parley.WrapError(parley.ECUpstream, err, "provider request failed")
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, c.statusError(resp)
	}
	return resp, nil
}

// statusError turns a non-2xx response into a *parley.Error wrapping a *StatusError.
func (c *Client) statusError(resp *http.Response) error {
	se := &StatusError{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header, c.now())}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodySize))
	var w struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &w) == nil && isSet(w.Error) {
		e := parseAPIError(w.Error)
		se.Type, se.Code, se.Message = e.Type, e.Code, e.Message
		if c.key != "" {
			se.Message = strings.ReplaceAll(se.Message, c.key, "[redacted]")
		}
	}
	code := parley.ECUpstream
	if resp.StatusCode == http.StatusTooManyRequests {
		code = parley.ECRateLimited
	}
	return parley.WrapError(code, se, fmt.Sprintf("provider returned HTTP %d", resp.StatusCode))
}

// StatusError is a non-2xx answer of the provider. It is wrapped in a *parley.Error; its
// Message is the provider's own text, for logs only.
type StatusError struct {
	StatusCode int
	RetryAfter time.Duration // from Retry-After (seconds or an HTTP date) or retry-after-ms; 0 if none
	Type       string        // the provider's error type, e.g. "invalid_request_error", if it sent one
	Code       string        // the provider's error code, e.g. "rate_limit_exceeded", if it sent one
	Message    string        // the provider's error message, truncated, with the API key redacted
}

func (e *StatusError) Error() string {
	s := "HTTP " + strconv.Itoa(e.StatusCode)
	if e.Code != "" {
		s += " (" + e.Code + ")"
	} else if e.Type != "" {
		s += " (" + e.Type + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// retryAfter reads retry-after-ms (sent by OpenAI and Azure) or Retry-After as seconds or an
// HTTP date. It returns 0 when neither is usable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < float64(math.MaxInt64/int64(time.Millisecond)) {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 || secs > math.MaxInt64/int64(time.Second) {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
