package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/parleyhq/parley/tracing"
)

// Issue 24 §2: a tool call to an MCP server over streamable HTTP has its span (tools/call, with
// the MCP method, tool and server) and carries the trace to the server in traceparent.
func TestMCPCallSpanAndTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp)
	defer func() {
		tracing.Install(nil)
	}()

	srv := sdk.NewServer(&sdk.Implementation{Name: "traced", Version: "1"}, nil)
	srv.AddTool(textTool("ping", "", func(map[string]any) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
	}))
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	var (
		mu      sync.Mutex
		callTPs []string // the traceparent of each tools/call request
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if strings.Contains(string(body), `"tools/call"`) {
				mu.Lock()
				callTPs = append(callTPs, r.Header.Get("traceparent"))
				mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()

	s := New("srv1", ServerConfig{URL: hs.URL}, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pctx, parent := tp.Tracer("test").Start(ctx, "execute_tool ping")
	res, err := s.Tools()[0].Call(pctx, json.RawMessage(`{}`))
	parent.End()
	if err != nil || res.Content.String() != "pong" {
		t.Fatalf("call: %v %v", res, err)
	}
	mu.Lock()
	tps := append([]string(nil), callTPs...)
	mu.Unlock()
	if len(tps) != 1 || !strings.Contains(tps[0], parent.SpanContext().TraceID().String()) {
		t.Errorf("the MCP server got traceparent %q for the call, want one of trace %s", tps, parent.SpanContext().TraceID())
	}
	var found bool
	for _, sp := range exp.GetSpans() {
		if sp.Name != "tools/call ping" {
			continue
		}
		found = true
		if sp.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("the MCP span's parent %s, want the tool call's %s", sp.Parent.SpanID(), parent.SpanContext().SpanID())
		}
		attrs := map[string]string{}
		for _, a := range sp.Attributes {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "ping", "parley.mcp.server": "srv1"} {
			if attrs[k] != want {
				t.Errorf("MCP span %s = %q, want %q", k, attrs[k], want)
			}
		}
	}
	if !found {
		t.Errorf("no tools/call span among %d spans", len(exp.GetSpans()))
	}
}
