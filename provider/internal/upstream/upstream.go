// Package upstream holds what every provider adapter needs around HTTP: the event-stream reader,
// a POST that turns a non-2xx answer into a *parley.StatusError, Retry-After, the vendors' error
// objects, and the errors of an ended context. It does no translation of messages.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/onewrite"
)

// Bounds on what is read from a provider outside a stream.
const (
	MaxResponseSize  = 32 << 20 // a non-streamed response body
	maxErrorBodySize = 64 << 10 // the body of a non-2xx response
	maxErrorMessage  = 1024     // the provider's error text kept for logs
)

// Endpoint is how an adapter reaches its provider.
type Endpoint struct {
	Client *http.Client
	Secret string           // the API key, cut out of the provider's error messages
	Now    func() time.Time // for Retry-After dates; nil means time.Now
}

// Post sends body to url with the headers in header, which it does not change and which must not
// change while it runs, and returns a 2xx response, whose body the caller closes. A non-2xx
// answer is a *parley.Error (ECRateLimited for 429, ECUpstream otherwise) wrapping a
// *parley.StatusError. The request keeps nothing of body once it is sent and the response has
// come: a streamed answer does not hold the request (the conversation so far) for its whole
// length.
func (e Endpoint) Post(ctx context.Context, url string, header http.Header, body []byte) (*http.Response, error) {
	return e.PostParts(ctx, url, header, body)
}

// maxParts is how many parts a request body is sent in; more are joined first.
const maxParts = 3

// PostParts is Post with a body in parts, sent one after the other, none of them copied into a
// buffer of the whole body to send it (a part can be shared between requests, as an adapter's
// encoding of its tools is: it is only read). A body of more than three parts is joined first.
func (e Endpoint) PostParts(ctx context.Context, url string, header http.Header, parts ...[]byte) (*http.Response, error) {
	rb := &requestBody{}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if len(parts) > maxParts {
		parts = [][]byte{bytes.Join(parts, nil)}
	}
	n := copy(rb.parts[:], parts)
	copy(rb.again[:], parts)
	rb.left, rb.kept = rb.parts[:n:n], rb.again[:n:n]
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rb)
	if err != nil {
		return nil, parley.WrapError(parley.ECInternal, err, "invalid provider URL")
	}
	// The Host header is the URL's without a Host of the request's own: http.Client copies the
	// URL of a request whose Host is set on every call (for a cookie jar, even when it has none).
	hr.Host = ""
	hr.ContentLength = int64(size)
	hr.GetBody = rb.getBody
	if size == 0 {
		hr.Body, hr.GetBody = http.NoBody, nil
	}
	if e.Client.Jar == nil && header != nil {
		// The adapter's headers, shared by its calls and never written to: net/http only reads
		// a request's headers (a client with a cookie jar adds its cookies to them: then they
		// are copied), which saves filling a map of them on every call.
		hr.Header = header
	} else {
		for k, v := range header {
			hr.Header[k] = v
		}
	}
	resp, err := e.Client.Do(hr)
	// net/http sends the body again (GetBody) only before the response came: on a redirect, or
	// on a kept connection the server had closed. Past it, the copy kept for that can go.
	rb.release()
	if err != nil {
		if ctx.Err() != nil {
			return nil, CtxError(ctx)
		}
		return nil, parley.WrapError(parley.ECUpstream, err, "provider request failed")
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		now := time.Now
		if e.Now != nil {
			now = e.Now
		}
		return nil, statusError(resp, e.Secret, now())
	}
	return resp, nil
}

// requestBody is a request's body, in parts, that lets go of its bytes once they are read, and
// of the parts kept for sending them again once released.
type requestBody struct {
	mu    sync.Mutex
	left  net.Buffers // what is left to read (over parts)
	kept  net.Buffers // for GetBody, until release (over again)
	parts [maxParts][]byte
	again [maxParts][]byte
}

func (r *requestBody) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for n < len(p) && len(r.left) > 0 {
		c := copy(p[n:], r.left[0])
		n += c
		if r.left[0] = r.left[0][c:]; len(r.left[0]) == 0 {
			r.left[0] = nil
			r.left = r.left[1:]
		}
	}
	if n == 0 && len(p) > 0 {
		r.left = nil
		return 0, io.EOF
	}
	return n, nil
}

// Len is how many bytes are left to read.
func (r *requestBody) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.left {
		n += len(b)
	}
	return n
}

// WriteTo writes what is left: in one Write when it is one part, in one WriteBuffers when w takes
// them (onewrite.Body: the connection sends them with the request's head, without copying them
// first).
func (r *requestBody) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	var left *partsLeft
	switch len(r.left) {
	case 0:
	case 1:
		b := r.left[0]
		r.left = nil
		clear(r.parts[:])
		r.mu.Unlock()
		n, err := w.Write(b)
		return int64(n), err
	default:
		// A copy of the parts' list, which the write consumes: the parts go from the body at
		// once, as its Close may come while they are written.
		left = &partsLeft{}
		left.bufs = append(left.arr[:0], r.left...)
	}
	r.left = nil
	clear(r.parts[:])
	r.mu.Unlock()
	if left == nil {
		return 0, nil
	}
	if bw, ok := w.(onewrite.BuffersWriter); ok {
		return bw.WriteBuffers(&left.bufs)
	}
	return left.bufs.WriteTo(w)
}

// partsLeft is a body's parts as they are written: the list and its slice in one allocation.
type partsLeft struct {
	bufs net.Buffers
	arr  [maxParts][]byte
}

// Close lets go of what is left to read (net/http closes a request's body once it is sent).
// The body is an io.ReadCloser itself so that net/http gives it to the connection as it is, not
// inside an io.NopCloser, and the connection can write it with the head (onewrite).
func (r *requestBody) Close() error {
	r.mu.Lock()
	r.left = nil
	clear(r.parts[:])
	r.mu.Unlock()
	return nil
}

// getBody is the request's GetBody: the body from its start, while it is kept.
func (r *requestBody) getBody() (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kept == nil {
		return nil, errors.New("upstream: the request body is no longer kept")
	}
	if len(r.kept) == 1 {
		return io.NopCloser(bytes.NewReader(r.kept[0])), nil
	}
	b := append(net.Buffers(nil), r.kept...) // read by consuming it
	return io.NopCloser(&b), nil
}

func (r *requestBody) release() {
	r.mu.Lock()
	r.kept = nil
	clear(r.again[:])
	r.mu.Unlock()
}

// ReadBody reads a non-streamed response body of at most limit bytes.
func ReadBody(ctx context.Context, body io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, CtxError(ctx)
		}
		return nil, parley.WrapError(parley.ECUpstream, err, "provider response failed")
	}
	if int64(len(data)) > limit {
		return nil, parley.Errorf(parley.ECUpstream, "provider response too large")
	}
	return data, nil
}

// statusError turns a non-2xx response into a *parley.Error wrapping a *parley.StatusError.
func statusError(resp *http.Response, secret string, now time.Time) error {
	se := &parley.StatusError{StatusCode: resp.StatusCode, RetryAfter: RetryAfter(resp.Header, now)}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodySize))
	if e := ErrorFromBody(data); e != nil {
		se.Type, se.Code, se.Message = e.Type, e.Code, e.Message
		if secret != "" {
			se.Message = strings.ReplaceAll(se.Message, secret, "[redacted]")
		}
	}
	code := parley.ECUpstream
	if resp.StatusCode == http.StatusTooManyRequests {
		code = parley.ECRateLimited
	}
	return parley.WrapError(code, se, fmt.Sprintf("provider returned HTTP %d", resp.StatusCode))
}

// RetryAfter reads retry-after-ms (sent by OpenAI and Azure) or Retry-After as seconds or an
// HTTP date. It returns 0 when neither is usable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
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

// APIError is an error object sent by a provider. It is kept for logs, never shown to clients.
type APIError struct {
	Type    string
	Code    string
	Message string
}

func (e *APIError) Error() string {
	s := "provider error"
	if e.Type != "" {
		s += " " + e.Type
	}
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ErrorFromBody finds the error object of a response body in the vendors' shapes:
// {"error": {...}} (OpenAI, Anthropic, Gemini), {"error": "text"} (Ollama), Gemini's
// [{"error": {...}}], or a bare error object. It returns nil when the body holds none.
func ErrorFromBody(data []byte) *APIError {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var arr []json.RawMessage
		if json.Unmarshal(data, &arr) != nil || len(arr) == 0 {
			return nil
		}
		data = arr[0]
	}
	var w struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &w) == nil && IsSet(w.Error) {
		return ParseError(w.Error)
	}
	return nil
}

// ParseError reads an error object, {"message", "type" or "status", "code"} with a string or
// numeric code, or a bare string.
func ParseError(raw json.RawMessage) *APIError {
	e := &APIError{}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		e.Message = s
	} else {
		var w struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Status  string          `json:"status"` // Gemini: "RESOURCE_EXHAUSTED"
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(raw, &w) != nil {
			return &APIError{Message: "unreadable error object"}
		}
		e.Message, e.Type = w.Message, w.Type
		if e.Type == "" {
			e.Type = w.Status
		}
		var code string
		switch {
		case json.Unmarshal(w.Code, &code) == nil:
			e.Code = code
		case IsSet(w.Code):
			e.Code = string(w.Code) // a number, as vLLM and Gemini send
		}
	}
	e.Message = Truncate(e.Message, maxErrorMessage)
	return e
}

// EventError reads the data of an error event: an object with an "error" member, an error object,
// or plain text.
func EventError(data []byte) *APIError {
	if json.Valid(data) {
		if e := ErrorFromBody(data); e != nil {
			return e
		}
		return ParseError(data)
	}
	b, _ := json.Marshal(string(data)) // a string always encodes
	return ParseError(b)
}

// Truncate cuts s to at most n bytes at a rune boundary, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// IsSet reports whether raw holds a JSON value other than null.
func IsSet(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// CtxError reports why ctx ended: ECTimeout for a deadline, ECCanceled otherwise. It wraps
// ctx.Err(), so errors.Is(err, context.Canceled) holds.
func CtxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return parley.WrapError(parley.ECTimeout, ctx.Err(), "provider call timed out")
	}
	return parley.WrapError(parley.ECCanceled, ctx.Err(), "provider call canceled")
}

// StreamError maps the error that ended reading a stream body to the stream's final error:
// the context's reason, a cut stream (ECUpstream wrapping io.ErrUnexpectedEOF), an event too
// large, or a read failure. what names the missing end, e.g. "[DONE]".
func StreamError(ctx context.Context, err error, what string) error {
	switch {
	case ctx.Err() != nil:
		return CtxError(ctx)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return parley.WrapError(parley.ECUpstream, io.ErrUnexpectedEOF, "provider stream ended before "+what)
	case errors.Is(err, ErrTooLarge):
		return parley.WrapError(parley.ECUpstream, err, "provider stream event too large")
	}
	return parley.WrapError(parley.ECUpstream, err, "provider stream failed")
}

// Setup is what every adapter's constructor does with its configuration: the base URL without a
// trailing slash (def when empty), the HTTP client (http.DefaultClient when nil: the caller's
// context bounds each call, since a client-wide timeout would also cut long streams), and the
// headers of every request, defaults first, then the configured ones, which may override them.
func Setup(base, def string, hc *http.Client, defaults http.Header, extra map[string]string) (string, *http.Client, http.Header) {
	base = strings.TrimRight(base, "/")
	if base == "" {
		base = def
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	h := defaults.Clone()
	if h == nil {
		h = http.Header{}
	}
	for k, v := range extra {
		h.Set(k, v)
	}
	return base, hc, h
}
