package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The standard variables decide whether traces are exported: off by default.
func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on      bool
		errWith string
	}{
		{nil, false, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, false, "otlp only"},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "otlp"}, false, "OTLP/HTTP only"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
	} {
		on, err := Enabled(envOf(c.env))
		if on != c.on || (c.errWith == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.errWith)) {
			t.Errorf("%v: %v %v, want %v and an error with %q", c.env, on, err, c.on, c.errWith)
		}
	}
	// Off: Setup installs nothing.
	before := otel.GetTracerProvider()
	stop, on, err := Setup(context.Background(), envOf(nil), Options{})
	if err != nil || on || otel.GetTracerProvider() != before {
		t.Errorf("Setup with tracing off: %v %v", on, err)
	}
	stop(context.Background())
}

func TestEndpointURL(t *testing.T) {
	for env, want := range map[[2]string]string{
		{"http://c:4318", ""}:                  "http://c:4318/v1/traces",
		{"http://c:4318/", ""}:                 "http://c:4318/v1/traces",
		{"http://c:4318", "http://d:1/custom"}: "http://d:1/custom",
		{"", ""}:                               "",
	} {
		got, err := endpointURL(envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": env[0], "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": env[1]}))
		if err != nil || got != want {
			t.Errorf("%v: %q %v, want %q", env, got, err, want)
		}
	}
	if _, err := endpointURL(envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})); err == nil {
		t.Errorf("an endpoint without a scheme was taken")
	}
}

// Transport: within a trace, a client span (no URL path or query: a key may be in it) and a
// traceparent of that span; outside a trace, the request goes out untouched.
func TestTransport(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	Install(tp)
	defer func() {
		Install(nil)
	}()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("traceparent"))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: Transport(nil)}

	req, _ := http.NewRequest("POST", srv.URL+"/v1beta/models/x:generate?key=AIzaSECRET", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(exp.GetSpans()) != 0 || got[0] != "" {
		t.Errorf("outside a trace: %d spans, traceparent %q", len(exp.GetSpans()), got[0])
	}

	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	req, _ = http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1beta/models/x:generate?key=AIzaSECRET", nil)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	parent.End()
	if req.Header.Get("traceparent") != "" {
		t.Errorf("the caller's request was changed")
	}
	var client *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "POST" {
			client = &s
		}
	}
	if client == nil {
		t.Fatalf("no client span: %v", exp.GetSpans())
	}
	if !strings.Contains(got[1], client.SpanContext.SpanID().String()) || client.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("traceparent %q, client span %s under %s", got[1], client.SpanContext.SpanID(), client.Parent.SpanID())
	}
	for _, a := range client.Attributes {
		if strings.Contains(a.Value.Emit(), "SECRET") || strings.Contains(a.Value.Emit(), "/v1beta") {
			t.Errorf("the span holds the URL: %s=%s", a.Key, a.Value.Emit())
		}
		if a.Key == HTTPStatusCode && a.Value.AsInt64() != 429 {
			t.Errorf("status %v", a.Value.Emit())
		}
	}
}
