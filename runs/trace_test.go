package runs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/logctx"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/tracing"
)

// Issue 24 §3: every log line of a run carries its run_id and session_id: the manager's own
// lines about the run, and those the run's body logs with its context.
func TestRunLogLinesCarryTheRunsIDs(t *testing.T) {
	var logs testlog.Buffer
	log := slog.New(logctx.Handler(slog.NewJSONHandler(&logs, nil)))
	m := NewManager(Options{Log: log})
	defer m.Shutdown(context.Background())
	r, err := m.Begin(context.Background(), Spec{Session: "sess-1"})
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		log.InfoContext(ctx, "a step of the run", "n", 1)
		log.WarnContext(ctx, "another")
		return "", errors.New("it broke")
	})
	<-r.Done()
	var lines int
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		lines++
		if rec["run_id"] != r.ID || rec["session_id"] != "sess-1" {
			t.Errorf("a run's log line without its ids: %s", l)
		}
	}
	if lines != 3 || !strings.Contains(logs.String(), `"msg":"run failed"`) {
		t.Errorf("want the body's two lines and \"run failed\", got:\n%s", logs.String())
	}
}

// The run's span is a child of the span of the request that began it, and the body runs with
// it as its context's span.
func TestRunSpanIsAChildOfTheRequest(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp)
	defer func() {
		tracing.Install(nil)
	}()
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	m := NewManager(Options{})
	defer m.Shutdown(context.Background())
	r, err := m.Begin(ctx, Spec{Session: "sess-1", Model: "openai/gpt-x"})
	if err != nil {
		t.Fatal(err)
	}
	req.End()
	var inBody trace.SpanContext
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		inBody = trace.SpanContextFromContext(ctx)
		return parley.FinishStop, nil
	})
	<-r.Done()
	var run *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "invoke_agent parley" {
			run = &s
		}
	}
	if run == nil {
		t.Fatalf("no run span in %v", exp.GetSpans())
	}
	if run.Parent.SpanID() != req.SpanContext().SpanID() || inBody.SpanID() != run.SpanContext.SpanID() {
		t.Errorf("run span parent %s (want the request's %s); the body's span %s (want the run's %s)",
			run.Parent.SpanID(), req.SpanContext().SpanID(), inBody.SpanID(), run.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, a := range run.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "sess-1",
		"gen_ai.request.model": "gpt-x", "gen_ai.provider.name": "openai", "parley.run.id": r.ID, "parley.run.finish_reason": "stop"} {
		if attrs[k] != want {
			t.Errorf("run span %s = %q, want %q", k, attrs[k], want)
		}
	}
}
