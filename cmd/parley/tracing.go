package main

import (
	"context"
	"log/slog"

	"github.com/parleyhq/parley/tracing"
)

// tracingHelp is the part of `parley serve -h` about traces, which the standard OTEL_*
// variables configure rather than flags.
const tracingHelp = `Traces (OpenTelemetry, OTLP over HTTP/protobuf) are off unless the standard variables ask:
  OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, the
  full URL) turns them on, as does OTEL_TRACES_EXPORTER=otlp (to http://localhost:4318 by default);
  OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true keeps them off. Also read: OTEL_SERVICE_NAME
  (default parley), OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT,
  OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG. See --trace-content for message content in spans.`

// startTracing installs the OTLP trace exporter when the OTEL_* variables ask for it, and returns
// what flushes and stops it (bounded by tracing.ShutdownTimeout).
func startTracing(ctx context.Context, getenv func(string) string, instance string, log *slog.Logger) (stop func(), err error) {
	shutdown, on, err := tracing.Setup(ctx, getenv, tracing.Options{Version: version, Instance: instance, Log: log})
	if err != nil {
		return func() {}, err
	}
	if !on {
		return func() {}, nil
	}
	log.Info("tracing: exporting spans over OTLP/HTTP")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracing.ShutdownTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: the last spans were not all exported", "err", err)
		}
	}, nil
}
