package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
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
	type observed struct{ tool, server, outcome string }
	var seen []observed
	r := NewRegistry(WithTimeout(50*time.Millisecond), WithObserver(func(tool, server, outcome string, d time.Duration) {
		if d <= 0 {
			t.Errorf("%s: observed without a duration", tool)
		}
		seen = append(seen, observed{tool, server, outcome})
	}))
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
		obs     observed // what the observer is told
	}{
		{tc("echo", `{"a":1}`), nil, true, `{"a":1}`, observed{"echo", "", OutcomeOK}},
		{tc("echo", ``), nil, true, `{}`, observed{"echo", "", OutcomeOK}},
		{tc("echo", `{"a":`), nil, false, "not a JSON object", observed{"echo", "", OutcomeRefused}},
		{tc("echo", `[1]`), nil, false, "not a JSON object", observed{"echo", "", OutcomeRefused}},
		{tc("echo", `{}`), map[string]bool{"other": true}, false, `unknown tool "echo"`, observed{"echo", "", OutcomeRefused}},
		{tc("nope", `{}`), nil, false, `unknown tool "nope"`, observed{"", "", OutcomeRefused}},
		{tc("fails", `{}`), nil, false, "fails failed: disk on fire", observed{"fails", "", OutcomeError}},
		{tc("soft", `{}`), nil, false, "no such file", observed{"soft", "", OutcomeError}},
		{tc("panics", `{}`), nil, false, "crashed", observed{"panics", "", OutcomeError}},
		{tc("slow", `{}`), nil, false, "timed out after 50ms", observed{"slow", "", OutcomeTimeout}},
		{tc("deaf", `{}`), nil, false, "timed out", observed{"deaf", "", OutcomeTimeout}},
	} {
		start := time.Now()
		seen = nil
		out := r.Call(context.Background(), c.call, c.allowed)
		if len(seen) != 1 || seen[0] != c.obs {
			t.Errorf("%s(%s): observed %+v, want [%+v]", c.call.Function.Name, c.call.Function.Arguments, seen, c.obs)
		}
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

// remote is a tool of an MCP server, with a time limit of its own.
type remote struct {
	*Func
	server  string
	timeout time.Duration
}

func (r remote) Server() string         { return r.server }
func (r remote) Timeout() time.Duration { return r.timeout }

func TestReplaceSwapsASourcesToolsAndKeepsOthers(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(echo()); err != nil {
		t.Fatal(err)
	}
	ok := func(name string) parley.Tool {
		return remote{Func: fn(name, func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
			return &parley.ToolResult{Content: parley.Text(name)}, nil
		}), server: "files"}
	}
	if err := r.Replace("files", []parley.Tool{ok("files__read"), ok("files__list")}); err != nil {
		t.Fatal(err)
	}
	names := func() string {
		var b []string
		for _, e := range r.Entries() {
			b = append(b, e.Name+"@"+e.Source)
		}
		return strings.Join(b, " ")
	}
	if got := names(); got != "echo@ files__list@files files__read@files" {
		t.Fatalf("after first Replace: %s", got)
	}
	// The new list drops read, adds stat; a clash with the built-in echo and an invalid tool are
	// named in the error and left out, the rest registered.
	bad := &Func{Def: parley.ToolSpec{Name: "files__bad", Parameters: json.RawMessage(`{"type":"array"}`)}}
	err := r.Replace("files", []parley.Tool{ok("files__list"), ok("files__stat"), ok("echo"), bad})
	if err == nil || !strings.Contains(err.Error(), "echo of files: the name is taken by a built-in tool") || !strings.Contains(err.Error(), "files__bad") {
		t.Fatalf("clash error: %v", err)
	}
	if got := names(); got != "echo@ files__list@files files__stat@files" {
		t.Fatalf("after second Replace: %s", got)
	}
	if err := r.Replace("other", []parley.Tool{ok("files__stat")}); err == nil || !strings.Contains(err.Error(), "taken by files") {
		t.Fatalf("clash between sources: %v", err)
	}
	// The call reports the server; a removed tool is unknown.
	out := r.Call(context.Background(), tc("files__stat", "{}"), nil)
	if !out.Success || out.Server != "files" || out.Content.String() != "files__stat" {
		t.Fatalf("call: %+v", out)
	}
	if out := r.Call(context.Background(), tc("files__read", "{}"), nil); out.Success || !strings.Contains(out.Content.String(), "unknown tool") {
		t.Fatalf("removed tool: %+v", out)
	}
	if out := r.Call(context.Background(), tc("echo", "{}"), nil); out.Server != "" {
		t.Fatalf("a built-in tool has no server: %+v", out)
	}
	if err := r.Replace("files", nil); err != nil || names() != "echo@" {
		t.Fatalf("Replace with nil: %v %s", err, names())
	}
}

func TestToolsOwnTimeoutWins(t *testing.T) {
	r := NewRegistry(WithTimeout(time.Hour))
	slow := remote{Func: fn("slow", func(ctx context.Context, _ json.RawMessage) (*parley.ToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}), server: "s", timeout: 20 * time.Millisecond}
	if err := r.Replace("s", []parley.Tool{slow}); err != nil {
		t.Fatal(err)
	}
	done := make(chan Outcome, 1)
	go func() { done <- r.Call(context.Background(), tc("slow", "{}"), nil) }()
	select {
	case out := <-done:
		if out.Success || !strings.Contains(out.Content.String(), "timed out after 20ms") {
			t.Fatalf("outcome: %+v", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tool's own 20ms timeout was not applied")
	}
}

// TestFailuresAreRedacted: the text of a failed call (a Go error, or a result marked isError)
// loses keys, paths and e-mail addresses before it is stored and sent to the model; a successful
// result is the data asked for and is kept as it is.
func TestFailuresAreRedacted(t *testing.T) {
	r := NewRegistry()
	secret := "open /home/jane/.config/key.json for jane@example.com with sk-proj-abcdefghijklmnop"
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register(fn("goerr", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		return nil, errors.New(secret)
	})))
	must(r.Register(fn("iserr", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		return &parley.ToolResult{IsError: true, Content: parley.Parts(parley.Part{Type: "text", Text: secret})}, nil
	})))
	must(r.Register(fn("ok", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		return &parley.ToolResult{Content: parley.Text(secret)}, nil
	})))
	for _, name := range []string{"goerr", "iserr"} {
		out := r.Call(context.Background(), tc(name, "{}"), nil)
		b, _ := json.Marshal(out.Content)
		if out.Success || strings.Contains(string(b), "jane") || strings.Contains(string(b), "abcdefghijklmnop") || !strings.Contains(string(b), "[path]") {
			t.Errorf("%s: %s", name, b)
		}
	}
	if out := r.Call(context.Background(), tc("ok", "{}"), nil); out.Content.String() != secret {
		t.Errorf("a successful result was changed: %q", out.Content.String())
	}
}

// TestToolBreaker: three failures in a row (an error, a panic, a timeout) open the tool's breaker;
// while open the tool is not called and the model reads why; after the cooldown one trial call
// runs, and its success closes the breaker. A result marked isError is the tool working, and a
// call the run cancelled says nothing of the tool.
func TestToolBreaker(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	r := NewRegistry(WithTimeout(30*time.Millisecond), WithBreakers(3, 30*time.Second, clock))
	// The tool's goroutine may outlive a timed-out call: what it shares with the test is atomic.
	var calls atomic.Int32
	var modeV atomic.Value
	modeV.Store("error")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register(fn("flaky", func(ctx context.Context, _ json.RawMessage) (*parley.ToolResult, error) {
		calls.Add(1)
		switch modeV.Load().(string) {
		case "error":
			return nil, errors.New("backend down")
		case "panic":
			panic("boom")
		case "hang":
			<-ctx.Done()
			return nil, ctx.Err()
		case "iserror":
			return &parley.ToolResult{IsError: true, Content: parley.Text("no such city")}, nil
		}
		return &parley.ToolResult{Content: parley.Text("fine")}, nil
	})))
	call := func() Outcome { return r.Call(context.Background(), tc("flaky", "{}"), nil) }

	// isError results and cancelled calls do not count.
	modeV.Store("iserror")
	for range 5 {
		call()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Call(ctx, tc("flaky", "{}"), nil)
	if r.BreakerState("flaky") != "closed" {
		t.Fatalf("isError results or a cancelled call opened the breaker")
	}

	for _, m := range []string{"error", "panic", "hang"} {
		modeV.Store(m)
		if out := call(); out.Success {
			t.Fatalf("%s succeeded", m)
		}
	}
	if r.BreakerState("flaky") != "open" {
		t.Fatalf("after three failures: %s", r.BreakerState("flaky"))
	}
	before := calls.Load()
	modeV.Store("ok")
	out := call()
	if out.Success || calls.Load() != before || !strings.Contains(out.Content.String(), "switched off for 30s") {
		t.Fatalf("while open: %+v, tool called %d times", out, calls.Load()-before)
	}
	now = now.Add(31 * time.Second)
	if out := call(); !out.Success || calls.Load() != before+1 || r.BreakerState("flaky") != "closed" {
		t.Fatalf("trial call: %+v, state %s", out, r.BreakerState("flaky"))
	}
}

// TestNoCallAfterTheRunEnded: a call whose run was cancelled before its turn is not started.
func TestNoCallAfterTheRunEnded(t *testing.T) {
	r := NewRegistry()
	called := false
	if err := r.Register(fn("quick", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		called = true
		return &parley.ToolResult{Content: parley.Text("done")}, nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 { // the tool answers at once: without the check, some calls would start and win
		if out := r.Call(ctx, tc("quick", "{}"), nil); out.Success || !strings.Contains(out.Content.String(), "interrupted") {
			t.Fatalf("outcome: %+v", out)
		}
	}
	if called {
		t.Fatal("the tool was started after its run was cancelled")
	}
}

func TestRerunSafe(t *testing.T) {
	r := NewRegistry()
	idem := fn("lookup", nil)
	idem.Idempotent = true
	for _, tool := range []parley.Tool{echo(), idem} {
		if err := r.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	if r.RerunSafe("echo") || !r.RerunSafe("lookup") || r.RerunSafe("unknown") {
		t.Fatalf("RerunSafe: echo %v, lookup %v, unknown %v; want false, true, false",
			r.RerunSafe("echo"), r.RerunSafe("lookup"), r.RerunSafe("unknown"))
	}
}

// List keeps its answer until the tools change: asked again it allocates nothing, and every
// Register and Replace is seen by the next List.
func TestListIsKeptUntilTheToolsChange(t *testing.T) {
	r := NewRegistry()
	names := func() string {
		var ns []string
		for _, s := range r.List() {
			ns = append(ns, s.Name)
		}
		return strings.Join(ns, ",")
	}
	if got := names(); got != "" {
		t.Fatalf("empty registry lists %q", got)
	}
	if err := r.Register(echo()); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "echo" {
		t.Fatalf("after Register: %q", got)
	}
	noop := func(context.Context, json.RawMessage) (*parley.ToolResult, error) { return nil, nil }
	if err := r.Replace("files", []parley.Tool{fn("files__read", noop), fn("a", noop)}); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "a,echo,files__read" {
		t.Fatalf("after Replace: %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.List() }); n != 0 {
		t.Errorf("List of unchanged tools: %v allocations; want 0", n)
	}
	all, _ := r.Specs(nil)
	if len(all) != cap(all) {
		t.Errorf("the shared list has spare capacity (%d of %d): an append would write into it", len(all), cap(all))
	}
	if err := r.Replace("files", nil); err != nil {
		t.Fatal(err)
	}
	if got := names(); got != "echo" {
		t.Fatalf("after Replace(nil): %q", got)
	}
}
