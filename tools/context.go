package tools

import (
	"context"

	parley "github.com/parleyhq/parley"
)

// Shorthands over RunInfo for tools that keep per-session state (the todo and memory tools).

// SessionOf is the session of the run a call belongs to ("" outside a run).
func SessionOf(ctx context.Context) string { return RunOf(ctx).SessionID }

// UserOf is the user the run acts for ("" outside a run).
func UserOf(ctx context.Context) string { return userOf(ctx) }

// Emit sends ev to the run's event stream; it reports false when ctx carries no run.
func Emit(ctx context.Context, ev parley.Event) bool {
	ri := RunOf(ctx)
	if ri.Emit == nil {
		return false
	}
	ri.Emit(ev)
	return true
}
