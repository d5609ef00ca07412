package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/logctx"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/tracing"
)

// defaultRetryAfter is the Retry-After of a 429 or 503 whose cause names no time of its own.
const defaultRetryAfter = 5

// observe is the outermost layer: it gives every request an id (the client's valid X-Request-Id,
// or a new one; returned in X-Request-Id and on every log line about the request), a server span
// (the trace context of the client's traceparent, with tracing on) named after the route pattern,
// an access log line, logs every server-side failure (a 5xx) with the request's id, route and the
// error behind it, sanitized, and makes sure every 429 and 503 carries Retry-After, whichever
// handler wrote it.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The work before and after the handler is done in functions of their own: this frame
		// stays under every streamed response for its whole life, so it holds only what the
		// handler's call needs (its goroutine's stack can then shrink to 8 KiB while it streams).
		ow, r := s.observeStart(w, r)
		if ow.span.IsRecording() {
			defer ow.span.End()
		}
		next.ServeHTTP(ow, r)
		s.observeEnd(ow, r)
	})
}

// observeStart gives the request its id, its span and its requestInfo, and returns the writer
// the handler writes to with the request to hand it.
//
//go:noinline
func (s *server) observeStart(w http.ResponseWriter, r *http.Request) (*observedWriter, *http.Request) {
	ow := &observedWriter{ResponseWriter: w, base: r.Context(), start: time.Now()}
	ow.rid = requestID(r.Header.Get("X-Request-Id"))
	w.Header().Set("X-Request-Id", ow.rid)
	if r.ContentLength != 0 {
		// Until the pipeline has read the body whole, the connection is closed after the
		// answer. Otherwise the server would read what is left of an unread body (up to
		// 256 KiB, with no time limit) before answering: one byte a second would hold it.
		w.Header()["Connection"] = connClose
	}
	ctx := ow.base
	ow.method = knownMethod(r.Method)                     // a client may send any token as its method
	ow.span = trace.SpanFromContext(context.Background()) // a no-op, unless tracing is on
	if tracing.On() {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
		ctx, ow.span = tracing.Tracer().Start(ctx, ow.method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(tracing.HTTPMethod.String(ow.method), tracing.RequestID.String(ow.rid)))
	}
	rc := newRequestCtx(ctx, ow.rid)
	ow.info = &rc.info
	// The mux sets the pattern it matched on the request it is given: this one.
	return ow, r.WithContext(rc)
}

// observeEnd records the request once its handler returned: metrics, span, access log, and the
// log line of a server-side failure.
//
//go:noinline
func (s *server) observeEnd(ow *observedWriter, r *http.Request) {
	elapsed := time.Since(ow.start)
	status := ow.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	if s.Metrics != nil {
		// r.Pattern is the mux's pattern (set on this request as it routed it): no ids.
		s.Metrics.Request(r.Pattern, r.Method, status, elapsed)
	}
	path := routePath(r.Pattern)
	rid, info, span, base := ow.rid, ow.info, ow.span, ow.base
	if span.IsRecording() {
		span.SetName(ow.method + " " + path)
		span.SetAttributes(tracing.HTTPRoute.String(path), tracing.HTTPStatusCode.Int(status))
		if info.user != "" {
			span.SetAttributes(tracing.User.String(info.user))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	if h := s.Log.Handler(); s.AccessLog && h.Enabled(base, slog.LevelInfo) {
		// The line is what Logger.LogAttrs would log, without the call site: LogAttrs walks the
		// stack for it (runtime.Callers) on every line, and no handler here reports sources.
		rec := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
		rec.AddAttrs(
			// The route is the mux's own pattern, never client text: redaction leaves it whole
			// (a route outside /api/, such as /v1/chat/completions, would read as a file path).
			slog.String("method", ow.method), slog.Any("route", redact.Safe(path)), slog.Int("status", status),
			slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000), slog.Int64("bytes", ow.bytes),
			slog.String("user", info.user), slog.String("request_id", rid))
		_ = h.Handle(base, rec)
	}
	if ow.status < 500 {
		return
	}
	route := r.Pattern // the mux's pattern when it matched one: no ids, no query
	if route == "" {
		route = r.Method + " " + truncate(r.URL.Path, 100)
	}
	level, msg := slog.LevelError, "request failed"
	if ow.status == http.StatusServiceUnavailable {
		// Shedding load (the run budget, the body budget, a store that is down for a moment)
		// is the server working as designed: a warning, not an error.
		level, msg = slog.LevelWarn, "request refused: unavailable"
	}
	attrs := []any{"request_id", rid, "route", route, "status", ow.status}
	if ow.err != nil {
		attrs = append(attrs, "code", parley.CodeOf(ow.err), "err", redact.String(errorText(ow.err)))
	}
	s.Log.Log(base, level, msg, attrs...)
}

// knownMethod is m when it is a standard HTTP method, else "_OTHER" (as the HTTP semantic
// conventions name it): the access log and span names hold no client-chosen token.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// routePath is the path of a mux pattern ("POST /api/v1/sessions/{id}" → "/api/v1/sessions/{id}");
// "other" when no pattern matched.
func routePath(pattern string) string {
	if pattern == "" {
		return "other"
	}
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}

// requestInfo is what the layers inside observe learn about a request that observe logs: the
// user the pipeline authenticated.
type requestInfo struct{ user string }

type requestInfoKeyType struct{}

var requestInfoKey requestInfoKeyType

// noteUser tells observe who made the request.
func noteUser(ctx context.Context, user string) {
	if info, ok := ctx.Value(requestInfoKey).(*requestInfo); ok {
		info.user = user
	}
}

// requestCtx is the context observe gives a request, in one object: the request id among the log
// attributes, the requestInfo, and the values the pipeline adds (the identity and the decoded
// body; see withPipeline), on the context the server gave the request. One object instead of a
// chain of context.WithValue, each with its own boxed value, and a request copied for each.
type requestCtx struct {
	context.Context
	info  requestInfo
	attrs any // the log attributes as logctx reads them ([]slog.Attr), boxed once

	piped bool // the pipeline has set id and body
	id    any  // auth.Identity
	body  any
}

func newRequestCtx(parent context.Context, rid string) *requestCtx {
	// The attributes have an array of their own, not one in c: a stream that outlives the
	// request keeps them (streamCtx), and must not keep c, its parent and the body with them.
	have := logctx.Attrs(parent)
	attrs := append(append(make([]slog.Attr, 0, len(have)+1), have...), slog.String("request_id", rid))
	return &requestCtx{Context: parent, attrs: attrs}
}

func (c *requestCtx) Value(key any) any {
	switch key {
	case any(requestInfoKey):
		return &c.info
	case any(identityKey):
		if c.piped {
			return c.id
		}
	case any(bodyKey):
		if c.piped {
			return c.body
		}
	case any(requestCtxKey):
		return c
	default:
		if logctx.IsKey(key) {
			return c.attrs
		}
	}
	return c.Context.Value(key)
}

type requestCtxKeyType struct{}

var requestCtxKey requestCtxKeyType

// maxRequestID bounds a client's X-Request-Id.
const maxRequestID = 128

// requestID returns the client's request id when it is 1 to 128 characters of letters, digits
// and - _ . : (safe in logs and headers), else a new one.
func requestID(client string) string {
	if client == "" || len(client) > maxRequestID {
		return newRequestID()
	}
	for i := 0; i < len(client); i++ {
		c := client[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return newRequestID()
		}
	}
	return client
}

// errorText is the whole text of err for the log: its message and what it wraps.
func errorText(err error) string {
	var pe *parley.Error
	if errors.As(err, &pe) && pe.Err != nil {
		return pe.Message + ": " + pe.Err.Error()
	}
	return err.Error()
}

func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// observedWriter remembers the status a handler wrote and the error writeError wrote, and adds
// Retry-After to a 429 or 503 that has none.
type observedWriter struct {
	http.ResponseWriter
	status int
	err    error
	bytes  int64 // body bytes written

	// What observe learns before the handler runs and logs after it.
	rid    string
	method string
	base   context.Context // the request's own context (the access log's)
	span   trace.Span
	start  time.Time
	info   *requestInfo // in the request's requestCtx
}

func (w *observedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *observedWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			if w.Header().Get("Retry-After") == "" {
				w.Header().Set("Retry-After", strconv.Itoa(defaultRetryAfter))
			}
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *observedWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// noteError records the error behind the response (writeError calls it).
func (w *observedWriter) noteError(err error) { w.err = err }
