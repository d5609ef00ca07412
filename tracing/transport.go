package tracing

import (
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Transport returns base (http.DefaultTransport when nil) with a client span around each
// request made within a trace, and the trace context injected into its headers (traceparent).
// The span has no URL beyond host and port: a query string may hold an API key. It lasts until
// the response's headers came.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return transport{base}
}

type transport struct{ base http.RoundTripper }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// Not part of a trace (tracing off, or background requests such as an MCP server's
		// event stream): no span of its own, nothing to pass on.
		return t.base.RoundTrip(r)
	}
	host, port := r.URL.Hostname(), r.URL.Port()
	// The span ends with the response's headers: a stream's body is read after RoundTrip.
	ctx, span := Tracer().Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(HTTPMethod.String(r.Method), ServerAddress.String(host))
		if p, err := strconv.Atoi(port); err == nil {
			span.SetAttributes(ServerPort.Int(p))
		} else if _, _, err := net.SplitHostPort(r.URL.Host); err != nil {
			switch r.URL.Scheme {
			case "https":
				span.SetAttributes(ServerPort.Int(443))
			case "http":
				span.SetAttributes(ServerPort.Int(80))
			}
		}
	}
	defer span.End()
	carrier := propagation.HeaderCarrier(http.Header{})
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if len(carrier) > 0 {
		// A RoundTripper must not change the request it was given.
		r = r.Clone(ctx)
		for k, v := range carrier {
			r.Header[k] = v
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		span.SetStatus(codes.Error, "request failed")
		span.SetAttributes(ErrorType.String("connection"))
		return resp, err
	}
	span.SetAttributes(HTTPStatusCode.Int(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, "")
		span.SetAttributes(ErrorType.String(strconv.Itoa(resp.StatusCode)))
	}
	return resp, nil
}
