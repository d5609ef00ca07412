package httpapi

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/internal/logctx"
)

type otherKey struct{}

// A request's context is one object that answers for what observe and the pipeline add (the
// request id among the parent's log attributes, the requestInfo, the identity, the body) and for
// the rest as its parent does, and ends with its parent.
func TestRequestCtxCarriesWhatTheLayersAdd(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(logctx.With(context.Background(), "conn", "c1"), otherKey{}, "v"))
	c := newRequestCtx(parent, "r1")
	as := logctx.Attrs(c)
	if len(as) != 2 || as[0].String() != "conn=c1" || as[1].String() != "request_id=r1" {
		t.Fatalf("log attributes %v; want conn=c1 request_id=r1", as)
	}
	if c.Value(otherKey{}) != "v" {
		t.Errorf("the parent's value is not seen")
	}
	if c.Value(identityKey) != nil || c.Value(bodyKey) != nil {
		t.Errorf("identity or body before the pipeline set them")
	}
	noteUser(c, "alice")
	if c.info.user != "alice" {
		t.Errorf("noteUser did not reach observe's requestInfo")
	}

	id, body := auth.Identity{User: "alice", KeyID: "k1"}, &struct{ X int }{7}
	var got context.Context
	var changed bool
	if n := testing.AllocsPerRun(1, func() {
		c.piped = false
		got, changed = withPipeline(c, id, body)
	}); n > 1 {
		t.Errorf("withPipeline on observe's context: %v allocations; want at most 1 (the identity boxed)", n)
	}
	if got != context.Context(c) || changed {
		t.Errorf("withPipeline made a new context for observe's own")
	}
	if v, _ := got.Value(identityKey).(auth.Identity); v != id {
		t.Errorf("identity %+v; want %+v", v, id)
	}
	if got.Value(bodyKey) != body {
		t.Errorf("body not carried")
	}

	// On any other context (a handler tested without observe, or a layer that wrapped it) the
	// pipeline's values go in context.WithValue as before.
	wrapped := context.WithValue(newRequestCtx(parent, "r2"), otherKey{}, "w")
	got2, changed2 := withPipeline(wrapped, auth.Identity{User: "bob"}, nil)
	if !changed2 || got2.Value(identityKey).(auth.Identity).User != "bob" || got2.Value(bodyKey) != nil {
		t.Errorf("withPipeline on a wrapped context: changed %v, identity %v, body %v", changed2, got2.Value(identityKey), got2.Value(bodyKey))
	}

	child, stop := context.WithCancel(c)
	defer stop()
	cancel()
	for _, ctx := range []context.Context{c, child} {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the request's context did not end with its parent")
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("Err %v; want context.Canceled", ctx.Err())
		}
	}
}
