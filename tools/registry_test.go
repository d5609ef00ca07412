package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func fn(name string, f func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error)) *Func {
	return &Func{Def: parley.ToolSpec{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)}, Fn: f}
}

func echo() *Func {
	return fn("echo", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		return &parley.ToolResult{Content: parley.Text(string(args)), ResourceID: "r1"}, nil
	})
}

func tc(name, args string) parley.ToolCall {
	return parley.ToolCall{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: name, Arguments: args}}
}

func TestRegisterValidates(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(echo()); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(echo()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate: %v", err)
	}
	bad := fn("has space", nil)
	if err := r.Register(bad); err == nil {
		t.Fatal("invalid name accepted")
	}
	noSchema := &Func{Def: parley.ToolSpec{Name: "x", Parameters: json.RawMessage(`{"type":"string"}`)}}
	if err := r.Register(noSchema); err == nil {
		t.Fatal("non-object schema accepted")
	}
}

func TestSpecsSelection(t *testing.T) {
	r := NewRegistry()
	for _, n := range []string{"b", "a", "c"} {
		if err := r.Register(fn(n, nil)); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := r.Specs(nil)
	if len(all) != 3 || all[0].Name != "a" {
		t.Fatalf("all: %+v", all)
	}
	sel, err := r.Specs([]string{"c", "a", "c"})
	if err != nil || len(sel) != 2 || sel[0].Name != "c" || sel[1].Name != "a" {
		t.Fatalf("selected: %+v %v", sel, err)
	}
	none, err := r.Specs([]string{})
	if err != nil || len(none) != 0 {
		t.Fatalf("empty selection: %+v %v", none, err)
	}
	if _, err := r.Specs([]string{"a", "zzz"}); parley.CodeOf(err) != parley.ECInvalid || !strings.Contains(err.Error(), "zzz") {
		t.Fatalf("unknown selection: %v", err)
	}
}

func TestCallOutcomes(t *testing.T) {
	r := NewRegistry(WithTimeout(50 * time.Millisecond))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register(echo()))
	must(r.Register(fn("fails", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		return nil, errors.New("disk on fire")
	})))
	must(r.Register(fn("soft", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		return &parley.ToolResult{Content: parley.Text("no such file"), IsError: true}, nil
	})))
	must(r.Register(fn("panics", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		panic("boom")
	})))
	must(r.Register(fn("slow", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})))
	must(r.Register(fn("deaf", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		time.Sleep(300 * time.Millisecond) // ignores its context
		return &parley.ToolResult{Content: parley.Text("late")}, nil
	})))

	for _, c := range []struct {
		call    parley.ToolCall
		allowed map[string]bool
		ok      bool
		want    string
	}{
		{tc("echo", `{"a":1}`), nil, true, `{"a":1}`},
		{tc("echo", ``), nil, true, `{}`},
		{tc("echo", `{"a":`), nil, false, "not a JSON object"},
		{tc("echo", `[1]`), nil, false, "not a JSON object"},
		{tc("echo", `{}`), map[string]bool{"other": true}, false, `unknown tool "echo"`},
		{tc("nope", `{}`), nil, false, `unknown tool "nope"`},
		{tc("fails", `{}`), nil, false, "fails failed: disk on fire"},
		{tc("soft", `{}`), nil, false, "no such file"},
		{tc("panics", `{}`), nil, false, "crashed"},
		{tc("slow", `{}`), nil, false, "timed out after 50ms"},
		{tc("deaf", `{}`), nil, false, "timed out"},
	} {
		start := time.Now()
		out := r.Call(context.Background(), c.call, c.allowed)
		if out.Success != c.ok || !strings.Contains(out.Content.String(), c.want) {
			t.Errorf("%s(%s): success=%v %q, want %v %q", c.call.Function.Name, c.call.Function.Arguments, out.Success, out.Content.String(), c.ok, c.want)
		}
		if time.Since(start) > 250*time.Millisecond {
			t.Errorf("%s took %s: the timeout did not bound it", c.call.Function.Name, time.Since(start))
		}
		if out.Latency <= 0 {
			t.Errorf("%s: latency not measured", c.call.Function.Name)
		}
	}
	if out := r.Call(context.Background(), tc("echo", `{}`), nil); out.ResourceID != "r1" {
		t.Fatalf("resource id not carried: %+v", out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out := r.Call(ctx, tc("slow", `{}`), nil); out.Success || !strings.Contains(out.Content.String(), "interrupted") {
		t.Fatalf("cancelled call: %q", out.Content.String())
	}
}
