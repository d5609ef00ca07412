package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/internal/logctx"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tracing"
)

// BenchmarkObserve measures what the outermost layer costs per request (GET /healthz, served
// in-process): with tracing and the access log off, with the access log (JSON, discarded), and
// with tracing on (every span sampled, batched to an exporter that drops them).
//
//	go test ./httpapi -run '^$' -bench BenchmarkObserve -benchmem
func BenchmarkObserve(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "b.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(context.Background())
	newHandler := func(accessLog bool) http.Handler {
		return httpapi.NewServer(httpapi.Deps{Store: st, Chat: &chat.Service{Store: st, Runs: mgr}, Runs: mgr,
			AccessLog: accessLog, Log: slog.New(logctx.Handler(slog.NewJSONHandler(io.Discard, nil)))})
	}
	serve := func(b *testing.B, h http.Handler) {
		req := httptest.NewRequest("GET", "/healthz", nil)
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatal(w.Code)
			}
		}
	}
	b.Run("off", func(b *testing.B) { serve(b, newHandler(false)) })
	b.Run("access_log", func(b *testing.B) { serve(b, newHandler(true)) })
	b.Run("tracing", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		tracing.Install(tp)
		defer func() {
			tracing.Install(nil)
			tp.Shutdown(context.Background())
		}()
		serve(b, newHandler(false))
	})
}
