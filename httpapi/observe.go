package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/redact"
)

// defaultRetryAfter is the Retry-After of a 429 or 503 whose cause names no time of its own.
const defaultRetryAfter = 5

// observe is the outermost layer: it gives every request an id (the X-Request-Id header, and
// every log line about the request), logs every server-side failure (a 5xx) with the request's id,
// route and the error behind it, sanitized, and makes sure every 429 and 503 carries Retry-After,
// whichever handler wrote it.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rid := newRequestID()
		w.Header().Set("X-Request-Id", rid)
		if r.ContentLength != 0 {
			// Until the pipeline has read the body whole, the connection is closed after the
			// answer. Otherwise the server would read what is left of an unread body (up to
			// 256 KiB, with no time limit) before answering: one byte a second would hold it.
			w.Header().Set("Connection", "close")
		}
		ow := &observedWriter{ResponseWriter: w}
		start := time.Now()
		next.ServeHTTP(ow, r)
		status := ow.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http answers 200
		}
		if s.Metrics != nil {
			// r.Pattern is the mux's pattern (set on this request as it routed it): no ids.
			s.Metrics.Request(r.Pattern, r.Method, status, time.Since(start))
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
		s.Log.Log(r.Context(), level, msg, attrs...)
	})
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
	return w.ResponseWriter.Write(p)
}

// noteError records the error behind the response (writeError calls it).
func (w *observedWriter) noteError(err error) { w.err = err }
