package agent

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/tracing"
)

// startModelSpan starts the span of one model call, named and attributed after the GenAI
// semantic conventions ("chat {model}"). The messages sent go in only with TraceContent.
func (a *Agent) startModelSpan(ctx context.Context, in Input, req *parley.ChatRequest) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, tracing.NoSpan // the attributes below would be built for nothing
	}
	prov, model := tracing.SplitModel(req.Model)
	ctx, span := tracing.Tracer().Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			tracing.GenAIOperation.String("chat"),
			tracing.GenAIProvider.String(prov), tracing.GenAISystem.String(prov),
			tracing.GenAIRequestModel.String(model),
			tracing.GenAIConversationID.String(in.SessionID),
			tracing.RunID.String(in.RunID),
		))
	if a.cfg.TraceContent && span.IsRecording() {
		if b, err := json.Marshal(req.Messages); err == nil {
			span.SetAttributes(tracing.GenAIInputMessages.String(string(b)))
		}
	}
	return ctx, span
}

// endModelSpan ends a model call's span with what the call answered: the model that answered,
// token usage, finish reason, and the error's code when it failed. The answer goes in only with
// TraceContent.
func (a *Agent) endModelSpan(span trace.Span, answeredBy string, resp *parley.Response, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	_, model := tracing.SplitModel(answeredBy)
	span.SetAttributes(tracing.GenAIResponseModel.String(model))
	if resp != nil {
		if resp.Usage != nil {
			span.SetAttributes(tracing.GenAIInputTokens.Int64(resp.Usage.PromptTokens), tracing.GenAIOutputTokens.Int64(resp.Usage.CompletionTokens))
		}
		finish := resp.FinishReason
		if finish == "" && err == nil {
			finish = "stop"
			if len(resp.ToolCalls) > 0 {
				finish = "tool_calls"
			}
		}
		if finish != "" {
			span.SetAttributes(tracing.GenAIFinishReasons.StringSlice([]string{finish}))
		}
		if a.cfg.TraceContent {
			out := map[string]any{"role": "assistant", "content": resp.Content}
			if len(resp.ToolCalls) > 0 {
				out["tool_calls"] = resp.ToolCalls
			}
			if b, err := json.Marshal([]any{out}); err == nil {
				span.SetAttributes(tracing.GenAIOutputMessages.String(string(b)))
			}
		}
	}
	if err != nil {
		code := string(parley.CodeOf(err))
		span.SetAttributes(tracing.ErrorType.String(code))
		span.SetStatus(codes.Error, code)
	}
}

// startToolSpan starts the span of one tool call ("execute_tool {tool}"). Its arguments go in
// only with TraceContent.
func (a *Agent) startToolSpan(ctx context.Context, in Input, call parley.ToolCall) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, tracing.NoSpan
	}
	ctx, span := tracing.Tracer().Start(ctx, "execute_tool "+call.Function.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			tracing.GenAIOperation.String("execute_tool"),
			tracing.GenAIToolName.String(call.Function.Name),
			tracing.GenAIToolCallID.String(call.ID),
			tracing.GenAIToolType.String("function"),
			tracing.GenAIConversationID.String(in.SessionID),
			tracing.RunID.String(in.RunID),
		))
	if a.cfg.TraceContent && span.IsRecording() {
		span.SetAttributes(tracing.GenAIToolArguments.String(call.Function.Arguments))
	}
	return ctx, span
}

// endToolSpan ends a tool call's span with its outcome and the MCP server that ran it.
func (a *Agent) endToolSpan(span trace.Span, out tools.Outcome) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{tracing.ToolServer.String(out.Server)}
	switch {
	case out.Success:
		attrs = append(attrs, tracing.ToolOutcome.String("ok"))
	case out.TimedOut:
		attrs = append(attrs, tracing.ToolOutcome.String("timeout"), tracing.ErrorType.String("timeout"))
		span.SetStatus(codes.Error, "timeout")
	default:
		attrs = append(attrs, tracing.ToolOutcome.String("error"), tracing.ErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "tool_error")
	}
	if a.cfg.TraceContent {
		if b, err := json.Marshal(out.Content); err == nil {
			attrs = append(attrs, tracing.GenAIToolResult.String(string(b)))
		}
	}
	span.SetAttributes(attrs...)
}
