// Package logctx carries log attributes on a context: a run puts its run and session ids there,
// an HTTP request its request id, and every record logged with that context (slog's …Context
// methods) through a logger whose handler is wrapped by Handler carries them.
package logctx

import (
	"context"
	"log/slog"
)

type key struct{}

// With returns ctx carrying args (slog's key-value pairs or slog.Attr values) after those ctx
// already carries.
func With(ctx context.Context, args ...any) context.Context {
	if len(args) == 0 {
		return ctx
	}
	return WithAttrs(ctx, slog.Group("", args...).Value.Group()...)
}

// WithAttrs is With for attributes.
func WithAttrs(ctx context.Context, as ...slog.Attr) context.Context {
	if len(as) == 0 {
		return ctx
	}
	have := Attrs(ctx)
	all := make([]slog.Attr, 0, len(have)+len(as))
	all = append(append(all, have...), as...)
	return context.WithValue(ctx, key{}, all)
}

// Attrs returns the attributes ctx carries (nil: none). The slice must not be changed.
func Attrs(ctx context.Context) []slog.Attr {
	if ctx == nil {
		return nil
	}
	as, _ := ctx.Value(key{}).([]slog.Attr)
	return as
}

// Value is what a context carrying as answers for k: as (ok) when k is the key Attrs reads and
// there are attributes. A context type of its own (one object for a long-lived stream's values)
// answers with it in its Value.
func Value(k any, as []slog.Attr) (any, bool) {
	if _, ok := k.(key); !ok || len(as) == 0 {
		return nil, false
	}
	return as, true
}

// IsKey reports whether k is the key Attrs reads: a context type of its own that keeps its
// attributes already boxed (an any holding a []slog.Attr) answers with them for it, without
// boxing them again on every read as Value does.
func IsKey(k any) bool {
	_, ok := k.(key)
	return ok
}

// Logger returns log with the attributes ctx carries added, for code that logs without a
// context (or through a logger whose handler is not wrapped by Handler).
func Logger(ctx context.Context, log *slog.Logger) *slog.Logger {
	as := Attrs(ctx)
	if len(as) == 0 {
		return log
	}
	args := make([]any, len(as))
	for i, a := range as {
		args[i] = a
	}
	return log.With(args...)
}

// Handler wraps h so that each record gets the attributes of the context it is logged with
// (before its own).
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if as := Attrs(ctx); len(as) > 0 {
		out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
		out.AddAttrs(as...)
		r.Attrs(func(a slog.Attr) bool {
			out.AddAttrs(a)
			return true
		})
		r = out
	}
	return h.next.Handle(ctx, r)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{h.next.WithAttrs(as)} }
func (h handler) WithGroup(name string) slog.Handler    { return handler{h.next.WithGroup(name)} }
