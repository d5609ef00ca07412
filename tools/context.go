package tools

import (
	"context"

	parley "github.com/parleyhq/parley"
)

// What a tool call knows of the run it belongs to. The agent loop puts it into the context of
// every call; tools that keep per-session state (the todo and memory tools) read it from there.

type (
	sessionKey struct{}
	emitKey    struct{}
)

// WithSession returns ctx carrying the session a run belongs to.
func WithSession(ctx context.Context, sessionID string) context.Context {
	return context.WithValue(ctx, sessionKey{}, sessionID)
}

// SessionOf is the session of the run a call belongs to ("" outside a run).
func SessionOf(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}

// UserOf is the user the run acts for ("" outside a run).
func UserOf(ctx context.Context) string { return userOf(ctx) }

// WithEmit returns ctx carrying the run's event sink, so that a tool can announce a change it made
// (a todo_update, a memory_update) in the session's numbered event stream.
func WithEmit(ctx context.Context, emit func(parley.Event)) context.Context {
	return context.WithValue(ctx, emitKey{}, emit)
}

// Emit sends ev to the run's event stream; it reports false when ctx carries no run.
func Emit(ctx context.Context, ev parley.Event) bool {
	emit, _ := ctx.Value(emitKey{}).(func(parley.Event))
	if emit == nil {
		return false
	}
	emit(ev)
	return true
}
