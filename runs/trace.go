package runs

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/logctx"
	"github.com/parleyhq/parley/tracing"
)

// startSpan returns the context the run's body runs with: the run's own (cancelled by Abort),
// carrying its ids for the logs (package logctx) and its span, "invoke_agent parley", a child of
// the span of the request that began it (none for a run taken over after a restart).
func (r *Run) startSpan() (context.Context, trace.Span) {
	ctx := logctx.WithAttrs(r.ctx, slog.String("run_id", r.ID), slog.String("session_id", r.SessionID))
	if !tracing.On() {
		return ctx, tracing.NoSpan // the attributes below would be built for nothing
	}
	if r.parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, r.parent)
	}
	prov, model := tracing.SplitModel(r.Model)
	return tracing.Tracer().Start(ctx, "invoke_agent parley", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			tracing.GenAIOperation.String("invoke_agent"),
			tracing.GenAIAgentName.String("parley"),
			tracing.GenAIConversationID.String(r.SessionID),
			tracing.GenAIProvider.String(prov),
			tracing.GenAIRequestModel.String(model),
			tracing.RunID.String(r.ID),
		))
}

// endSpan ends a run's span with its finish reason, and the error's code when it failed.
func endSpan(span trace.Span, finish string, err error) {
	span.SetAttributes(tracing.RunFinishReason.String(finish))
	if err != nil && finish != parley.FinishAborted {
		code := string(parley.CodeOf(err))
		span.SetAttributes(tracing.ErrorType.String(code))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}
