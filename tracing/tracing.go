// Package tracing is Parley's OpenTelemetry tracing: the exporter set up from the standard OTEL_*
// variables (off unless they ask for it), the tracer every package starts its spans with, the
// GenAI semantic-convention attribute names, and an HTTP transport that passes the trace on to
// providers and MCP servers in a traceparent header.
//
// Spans go to the global TracerProvider (go.opentelemetry.io/otel), which is a no-op until Setup
// (or a test) installs one: with tracing off a span costs an allocation-free no-op, and nothing
// is extracted from or injected into HTTP headers (the global propagator is a no-op too).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of Parley's spans.
const ScopeName = "github.com/parleyhq/parley"

// on is whether Install has put a TracerProvider in place (Setup does, with tracing on).
var on atomic.Bool

// Install makes tp the global TracerProvider and the W3C trace context the global propagator;
// nil puts no-ops back. Setup calls it, and tests that record spans. On reports it: the HTTP
// layer skips its per-request span work (header extraction, attributes) when tracing is off.
func Install(tp trace.TracerProvider) {
	if tp == nil {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		on.Store(false)
		return
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	on.Store(true)
}

// On reports whether a TracerProvider was installed with Install.
func On() bool { return on.Load() }

// NoSpan is the span of work that is not traced (tracing off): it records nothing, and ending it
// does nothing. A caller that would build attributes for a span skips that with it.
var NoSpan = trace.SpanFromContext(context.Background())

// Tracer returns the tracer of the global TracerProvider. It is looked up at each call (cheap),
// so that a provider installed later (Setup, a test) is the one used.
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(ScopeName) }

// Attribute names from the OpenTelemetry semantic conventions (GenAI, HTTP, MCP) and Parley's own.
const (
	GenAIOperation      = attribute.Key("gen_ai.operation.name")
	GenAIProvider       = attribute.Key("gen_ai.provider.name")
	GenAISystem         = attribute.Key("gen_ai.system") // the older name of gen_ai.provider.name
	GenAIRequestModel   = attribute.Key("gen_ai.request.model")
	GenAIResponseModel  = attribute.Key("gen_ai.response.model")
	GenAIFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	GenAIInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	GenAIConversationID = attribute.Key("gen_ai.conversation.id")
	GenAIAgentName      = attribute.Key("gen_ai.agent.name")
	GenAIToolName       = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID     = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType       = attribute.Key("gen_ai.tool.type")
	GenAIToolArguments  = attribute.Key("gen_ai.tool.call.arguments") // content: only with the option
	GenAIToolResult     = attribute.Key("gen_ai.tool.call.result")    // content: only with the option
	GenAIInputMessages  = attribute.Key("gen_ai.input.messages")      // content: only with the option
	GenAIOutputMessages = attribute.Key("gen_ai.output.messages")     // content: only with the option
	ErrorType           = attribute.Key("error.type")
	MCPMethod           = attribute.Key("mcp.method.name")
	MCPServer           = attribute.Key("parley.mcp.server")
	ToolServer          = attribute.Key("parley.tool.server")
	ToolOutcome         = attribute.Key("parley.tool.outcome")
	RunID               = attribute.Key("parley.run.id")
	RunFinishReason     = attribute.Key("parley.run.finish_reason")
	RequestID           = attribute.Key("parley.request.id")
	User                = attribute.Key("enduser.id")

	HTTPMethod     = attribute.Key("http.request.method")
	HTTPRoute      = attribute.Key("http.route")
	HTTPStatusCode = attribute.Key("http.response.status_code")
	ServerAddress  = attribute.Key("server.address")
	ServerPort     = attribute.Key("server.port")
	URLPath        = attribute.Key("url.path")
)

// Enabled reports whether the standard OTEL_* variables (read with getenv) turn trace export on:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: off;
//   - OTEL_TRACES_EXPORTER=otlp: on (to OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, default
//     http://localhost:4318);
//   - OTEL_TRACES_EXPORTER unset: on when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, off otherwise.
//
// Only OTLP over HTTP with protobuf is supported: another exporter or protocol is an error.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%s: Parley exports traces over OTLP/HTTP only (http/protobuf)", v, p)
			}
			break // the traces variable wins over the general one
		}
	}
	switch e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: Parley exports traces with otlp only (or none)", e)
	}
}

// endpointURL is the traces URL the variables name ("" leaves the exporter's default): the
// traces endpoint as it is, or the general endpoint with /v1/traces appended.
func endpointURL(getenv func(string) string) (string, error) {
	if u := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); u != "" {
		if _, err := url.Parse(u); err != nil {
			return "", fmt.Errorf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: %w", err)
		}
		return u, nil
	}
	if u := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); u != "" {
		p, err := url.Parse(u)
		if err != nil || p.Scheme == "" || p.Host == "" {
			return "", fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %q is not a URL such as http://collector:4318", u)
		}
		return strings.TrimRight(u, "/") + "/v1/traces", nil
	}
	return "", nil
}

// Options describe this process for the traces' resource.
type Options struct {
	Version  string // service.version
	Instance string // service.instance.id
	Log      *slog.Logger
}

// Setup installs a TracerProvider that exports over OTLP/HTTP, batched, and the W3C trace
// context propagator (Install), when Enabled says so; otherwise it changes nothing. The
// exporter also reads the other standard variables itself (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE), the provider OTEL_TRACES_SAMPLER[_ARG] and OTEL_BSP_*, the
// resource OTEL_SERVICE_NAME (default parley) and OTEL_RESOURCE_ATTRIBUTES. shutdown flushes the
// spans still buffered (bounded by its context) and puts the no-ops back.
func Setup(ctx context.Context, getenv func(string) string, o Options) (shutdown func(context.Context) error, on bool, err error) {
	none := func(context.Context) error { return nil }
	if on, err = Enabled(getenv); err != nil || !on {
		return none, false, err
	}
	var opts []otlptracehttp.Option
	u, err := endpointURL(getenv)
	if err != nil {
		return none, false, err
	}
	if u != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return none, false, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "parley"), attribute.String("service.version", o.Version)}
	if o.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.Instance))
	}
	// The variables come after Parley's defaults, so OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override them.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return none, false, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	if o.Log != nil {
		log := o.Log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("trace export", "err", err) }))
	}
	return func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		Install(nil)
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("flushing traces: %w", err)
		}
		return err
	}, true, nil
}

// Propagator is what Setup installs: W3C trace context (traceparent, tracestate). Not baggage:
// what a client puts there is not passed on to providers.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// SplitModel splits "provider/model" into its provider and model ("", s when s has no /).
func SplitModel(s string) (provider, model string) {
	if i := strings.IndexByte(s, '/'); i > 0 {
		return s[:i], s[i+1:]
	}
	return "", s
}

// ShutdownTimeout is how long serve waits for the last spans to be exported at exit.
const ShutdownTimeout = 5 * time.Second
