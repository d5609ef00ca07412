package logctx_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/parleyhq/parley/internal/logctx"
)

func TestRecordsCarryTheContextsAttributes(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(logctx.Handler(slog.NewTextHandler(&buf, nil))).With("component", "x")
	ctx := logctx.With(context.Background(), "run_id", "r1")
	ctx = logctx.With(ctx, slog.String("session_id", "s1"))
	log.InfoContext(ctx, "hello", "n", 1)
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "component=x run_id=r1 session_id=s1 n=1") {
		t.Errorf("the line logged with the context: %s", lines[0])
	}
	if strings.Contains(lines[1], "run_id") {
		t.Errorf("the line logged without a context: %s", lines[1])
	}
	buf.Reset()
	logctx.Logger(ctx, slog.New(slog.NewTextHandler(&buf, nil))).Info("plain handler")
	if !strings.Contains(buf.String(), "run_id=r1 session_id=s1") {
		t.Errorf("Logger: %s", buf.String())
	}
	// The parent context is unchanged by a child's With.
	_ = logctx.With(ctx, "extra", 1)
	if n := len(logctx.Attrs(ctx)); n != 2 {
		t.Errorf("the parent carries %d attributes, want 2", n)
	}
}
