package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/tracing"
)

// inMemoryTracing installs a TracerProvider that records every span in memory (and the W3C
// propagators) for the test's length.
func inMemoryTracing(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp)
	t.Cleanup(func() {
		tracing.Install(nil)
		tp.Shutdown(context.Background())
	})
	return exp
}

// chatWithTraceparent has a streamed chat ("What is 12*(3+4)?": the mock model calls the
// calculator) whose request carries a traceparent of traceID; it returns the tool call's id.
func chatWithTraceparent(t *testing.T, url, traceID string) (callID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/chat/stream", strings.NewReader(`{"message":"What is 12*(3+4)?"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("chat/stream: %d %s", resp.StatusCode, b)
	}
	var finish string
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		if ev.Event == "tool_call" && ev.Data.ToolCall != nil {
			callID = ev.Data.ToolCall.ID
		}
		if ev.Event == "done" {
			finish = ev.Data.FinishReason
			return false
		}
		return true
	})
	if finish != "stop" || callID == "" {
		t.Fatalf("the chat ended with %q, tool call %q", finish, callID)
	}
	return callID
}

// spanView is what the tests check of a span, from the SDK's stubs or from OTLP.
type spanView struct {
	Name, ID, Parent, Trace string
	Kind                    string
	Attrs                   map[string]any
}

func fromStubs(ss tracetest.SpanStubs) []spanView {
	var out []spanView
	for _, s := range ss {
		v := spanView{Name: s.Name, ID: s.SpanContext.SpanID().String(), Trace: s.SpanContext.TraceID().String(), Kind: s.SpanKind.String(), Attrs: map[string]any{}}
		if s.Parent.IsValid() {
			v.Parent = s.Parent.SpanID().String()
		}
		for _, a := range s.Attributes {
			v.Attrs[string(a.Key)] = attrValue(a.Value)
		}
		out = append(out, v)
	}
	return out
}

func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.INT64:
		return v.AsInt64()
	case attribute.STRINGSLICE:
		return strings.Join(v.AsStringSlice(), ",")
	default:
		return v.Emit()
	}
}

// checkChatTrace checks the span tree of the chat in trace traceID: the HTTP request's span
// (child of the client's span), the run's under it, two model calls and the calculator's call
// under the run, each with its GenAI attributes, and no message content unless content.
func checkChatTrace(t *testing.T, all []spanView, traceID, callID, provider, model string, content bool) {
	t.Helper()
	var spans []spanView
	byID := map[string]spanView{}
	for _, s := range all {
		if s.Trace == traceID {
			spans = append(spans, s)
			byID[s.ID] = s
		}
	}
	named := func(name string) []spanView {
		var out []spanView
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	dump := func() string {
		b, _ := json.MarshalIndent(spans, "", " ")
		return string(b)
	}
	one := func(name string) spanView {
		t.Helper()
		got := named(name)
		if len(got) != 1 {
			t.Fatalf("%d spans named %q in the trace, want 1:\n%s", len(got), name, dump())
		}
		return got[0]
	}
	http := one("POST /api/v1/chat/stream")
	if http.Parent != "00f067aa0ba902b7" || http.Kind != "server" {
		t.Errorf("the request's span: parent %s kind %s, want the client's span and server", http.Parent, http.Kind)
	}
	if http.Attrs["http.route"] != "/api/v1/chat/stream" || http.Attrs["http.response.status_code"] != int64(200) {
		t.Errorf("the request's span attributes: %v", http.Attrs)
	}
	run := one("invoke_agent parley")
	if run.Parent != http.ID || run.Attrs["gen_ai.operation.name"] != "invoke_agent" || run.Attrs["parley.run.finish_reason"] != "stop" {
		t.Errorf("the run's span: parent %s (want %s), attributes %v", run.Parent, http.ID, run.Attrs)
	}
	calls := named("chat " + model)
	if len(calls) != 2 {
		t.Fatalf("%d model call spans, want 2:\n%s", len(calls), dump())
	}
	finishes := map[string]bool{}
	for _, c := range calls {
		if c.Parent != run.ID || c.Kind != "client" {
			t.Errorf("model call span %s: parent %s kind %s, want the run %s, client", c.Name, c.Parent, c.Kind, run.ID)
		}
		for k, want := range map[string]any{"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.model": model,
			"gen_ai.provider.name": provider, "gen_ai.system": provider, "gen_ai.conversation.id": run.Attrs["gen_ai.conversation.id"]} {
			if c.Attrs[k] != want {
				t.Errorf("model call span: %s = %v, want %v", k, c.Attrs[k], want)
			}
		}
		for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
			if n, _ := c.Attrs[k].(int64); n <= 0 {
				t.Errorf("model call span: %s = %v, want a count", k, c.Attrs[k])
			}
		}
		finishes[c.Attrs["gen_ai.response.finish_reasons"].(string)] = true
		if _, has := c.Attrs["gen_ai.input.messages"]; has != content {
			t.Errorf("model call span: gen_ai.input.messages present %v, want %v", has, content)
		}
		// The provider's HTTP request is a child of the model call.
		var post []spanView
		for _, s := range spans {
			if s.Parent == c.ID && s.Name == "POST" && s.Kind == "client" {
				post = append(post, s)
			}
		}
		if len(post) != 1 {
			t.Errorf("model call %s has %d HTTP client spans, want 1:\n%s", c.ID, len(post), dump())
		}
	}
	if !finishes["tool_calls"] || !finishes["stop"] {
		t.Errorf("the model calls' finish reasons: %v, want tool_calls and stop", finishes)
	}
	tool := one("execute_tool calculator")
	if tool.Parent != run.ID {
		t.Errorf("the tool call's span has parent %s, want the run %s", tool.Parent, run.ID)
	}
	for k, want := range map[string]any{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculator", "gen_ai.tool.call.id": callID, "parley.tool.outcome": "ok"} {
		if tool.Attrs[k] != want {
			t.Errorf("tool call span: %s = %v, want %v", k, tool.Attrs[k], want)
		}
	}
	for _, k := range []string{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
		if _, has := tool.Attrs[k]; has != content {
			t.Errorf("tool call span: %s present %v, want %v", k, has, content)
		}
	}
	if content {
		if s, _ := tool.Attrs["gen_ai.tool.call.arguments"].(string); !strings.Contains(s, "12*(3+4)") {
			t.Errorf("tool call span arguments: %q", s)
		}
	}
}

// TestTraceOfAChatWithAToolCall: with the SDK's in-memory exporter, a streamed chat in which the
// model calls the calculator gives the span tree request → run → model calls (→ their HTTP
// requests) and the tool call, named and attributed after the GenAI conventions; no message
// content unless --trace-content.
func TestTraceOfAChatWithAToolCall(t *testing.T) {
	exp := inMemoryTracing(t)
	for _, content := range []bool{false, true} {
		args := []string{"--rate-limit", "off"}
		if content {
			args = append(args, "--trace-content")
		}
		url := startInProcess(t, nil, args...)
		traceID := "4bf92f3577b34da6a3ce929d0e0e473" + map[bool]string{false: "6", true: "7"}[content]
		callID := chatWithTraceparent(t, url, traceID)
		// The request's span ends after its handler returned, just after the client read done.
		var spans []spanView
		deadline := time.Now().Add(30 * time.Second)
		for {
			spans = fromStubs(exp.GetSpans())
			if hasSpan(spans, traceID, "POST /api/v1/chat/stream") || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		checkChatTrace(t, spans, traceID, callID, "mock", "mock", content)
	}
}

func hasSpan(spans []spanView, traceID, name string) bool {
	for _, s := range spans {
		if s.Trace == traceID && s.Name == name {
			return true
		}
	}
	return false
}

// TestNoTraceContextWhenTracingIsOff: with tracing off (the default), a client's traceparent is
// neither honoured nor passed on to the provider.
func TestNoTraceContextWhenTracingIsOff(t *testing.T) {
	up := &traceparentRecorder{next: llmtest.NewServer(llmtest.WithModel("mock"))}
	srv := httptest.NewServer(up)
	defer srv.Close()
	url := startInProcess(t, nil, "--rate-limit", "off", "--openai-base-url", srv.URL+"/v1", "--model", "openai/mock")
	chatWithTraceparent(t, url, "4bf92f3577b34da6a3ce929d0e0e4738")
	if got := up.all(); len(got) == 0 || strings.Join(got, "") != "" {
		t.Errorf("the provider got traceparent headers %q with tracing off, want none", got)
	}
}

// traceparentRecorder records the traceparent header of each request before passing it on.
type traceparentRecorder struct {
	next http.Handler
	mu   sync.Mutex
	seen []string
}

func (r *traceparentRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Header.Get("traceparent"))
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

func (r *traceparentRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// otlpCollector receives OTLP/HTTP protobuf trace exports, as a collector does.
type otlpCollector struct {
	mu    sync.Mutex
	spans []spanView
	bad   []string
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(msg string) {
		c.mu.Lock()
		c.bad = append(c.bad, msg)
		c.mu.Unlock()
		http.Error(w, msg, http.StatusBadRequest)
	}
	if r.Method != "POST" || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		fail("unexpected " + r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type"))
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			fail(err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		fail(err.Error())
		return
	}
	var req collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		fail("not an ExportTraceServiceRequest: " + err.Error())
		return
	}
	var got []spanView
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				v := spanView{Name: s.GetName(), ID: hex.EncodeToString(s.GetSpanId()), Trace: hex.EncodeToString(s.GetTraceId()),
					Kind: otlpKind(s.GetKind()), Attrs: map[string]any{"service.name": service}}
				if len(s.GetParentSpanId()) > 0 {
					v.Parent = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, a := range s.GetAttributes() {
					switch x := a.GetValue().GetValue().(type) {
					case *commonpb.AnyValue_StringValue:
						v.Attrs[a.GetKey()] = x.StringValue
					case *commonpb.AnyValue_IntValue:
						v.Attrs[a.GetKey()] = x.IntValue
					case *commonpb.AnyValue_BoolValue:
						v.Attrs[a.GetKey()] = x.BoolValue
					case *commonpb.AnyValue_ArrayValue:
						var parts []string
						for _, e := range x.ArrayValue.GetValues() {
							parts = append(parts, e.GetStringValue())
						}
						v.Attrs[a.GetKey()] = strings.Join(parts, ",")
					}
				}
				got = append(got, v)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Write(out)
}

func otlpKind(k tracepb.Span_SpanKind) string {
	switch k {
	case tracepb.Span_SPAN_KIND_SERVER:
		return "server"
	case tracepb.Span_SPAN_KIND_CLIENT:
		return "client"
	case tracepb.Span_SPAN_KIND_INTERNAL:
		return "internal"
	}
	return k.String()
}

func (c *otlpCollector) snapshot() ([]spanView, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]spanView(nil), c.spans...), append([]string(nil), c.bad...)
}

// TestOTLPFromARealProcess starts a Parley process with OTEL_EXPORTER_OTLP_ENDPOINT pointing at
// a test collector and an OpenAI-compatible fake upstream, has a chat with a tool call, and
// receives its spans over OTLP/HTTP; the upstream got a traceparent of the same trace.
func TestOTLPFromARealProcess(t *testing.T) {
	col := &otlpCollector{}
	colSrv := httptest.NewServer(col)
	defer colSrv.Close()
	up := &traceparentRecorder{next: llmtest.NewServer(llmtest.WithModel("mock"))}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()

	a, _ := json.Marshal([]string{"serve", "--addr", "127.0.0.1:0", "--db", t.TempDir() + "/otlp.db", "--rate-limit", "off",
		"--openai-base-url", upSrv.URL + "/v1", "--model", "openai/mock"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_E2E_ARGS="+string(a), "OPENAI_API_KEY=", "OPENAI_BASE_URL=",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+colSrv.URL, "OTEL_TRACES_EXPORTER=", "OTEL_SDK_DISABLED=", "OTEL_EXPORTER_OTLP_PROTOCOL=",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_SERVICE_NAME=parley-test")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	logs := &testlog.Buffer{}
	url := waitListening(t, stderr, logs)

	const traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
	callID := chatWithTraceparent(t, url, traceID)
	var spans []spanView
	deadline := time.Now().Add(30 * time.Second)
	for {
		var bad []string
		spans, bad = col.snapshot()
		if len(bad) > 0 {
			t.Fatalf("the collector refused exports: %v", bad)
		}
		if hasSpan(spans, traceID, "POST /api/v1/chat/stream") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span of the chat's request reached the collector in 30s (%d spans):\n%s", len(spans), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkChatTrace(t, spans, traceID, callID, "openai", "mock", false)
	if s := spans[0]; s.Attrs["service.name"] != "parley-test" {
		t.Errorf("service.name %v, want OTEL_SERVICE_NAME's parley-test", s.Attrs["service.name"])
	}
	// Each model call's request to the upstream carried the trace on.
	tps := up.all()
	if len(tps) != 2 {
		t.Fatalf("the upstream got %d requests, want 2", len(tps))
	}
	for _, tp := range tps {
		sc, err := parseTraceparent(tp)
		if err != nil || sc.TraceID().String() != traceID {
			t.Errorf("the upstream got traceparent %q, want one of trace %s (%v)", tp, traceID, err)
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the server exited with %v:\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop within 30s of SIGINT")
	}
}

func parseTraceparent(h string) (trace.SpanContext, error) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(http.Header{"Traceparent": {h}}))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return sc, io.ErrUnexpectedEOF
	}
	return sc, nil
}
