package tools

import (
	"context"

	parley "github.com/parleyhq/parley"
)

// RunInfo is what a tool may know of the run that calls it: where it stores what it makes
// (artifacts, cost records) and how it tells the run's clients (events such as artifact and
// web_search, numbered with the run's other events).
type RunInfo struct {
	SessionID  string
	RunID      string
	User       string
	ToolCallID string // set by Registry.Call for each call
	// Emit sends an event (Type and payload) into the run's stream; nil outside a run.
	Emit func(parley.Event)
}

type runKey struct{}

// WithRun returns ctx carrying the run's info for the tools it calls, and its user for the tool
// quotas (as WithUser).
func WithRun(ctx context.Context, ri RunInfo) context.Context {
	return context.WithValue(WithUser(ctx, ri.User), runKey{}, ri)
}

// RunOf returns the run info ctx carries (zero outside a run).
func RunOf(ctx context.Context) RunInfo {
	ri, _ := ctx.Value(runKey{}).(RunInfo)
	return ri
}

// EmitEvent sends ev into the stream of the run ctx belongs to, when there is one.
func (ri RunInfo) EmitEvent(ev parley.Event) {
	if ri.Emit != nil {
		ri.Emit(ev)
	}
}

func withCallID(ctx context.Context, id string) context.Context {
	ri, ok := ctx.Value(runKey{}).(RunInfo)
	if !ok {
		ri = RunInfo{User: userOf(ctx)}
	}
	ri.ToolCallID = id
	return context.WithValue(ctx, runKey{}, ri)
}
