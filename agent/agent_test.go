package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/transcript"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/llmctx"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tools"
)

// scripted is a Provider that answers each call with the next script step and records requests.
type scripted struct {
	mu    sync.Mutex
	steps []func(req *parley.ChatRequest) ([]parley.StreamEvent, error)
	reqs  []*parley.ChatRequest
}

func (p *scripted) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	if len(p.steps) == 0 {
		return nil, errors.New("script exhausted")
	}
	step := p.steps[0]
	if len(p.steps) > 1 {
		p.steps = p.steps[1:]
	}
	evs, err := step(req)
	return &sliceStream{ctx: ctx, evs: evs, err: err}, nil
}

func (p *scripted) requests() []*parley.ChatRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*parley.ChatRequest(nil), p.reqs...)
}

type sliceStream struct {
	ctx  context.Context
	evs  []parley.StreamEvent
	err  error
	wait bool // block until ctx ends, as a stalled provider does
}

func (s *sliceStream) Next() (parley.StreamEvent, error) {
	if s.wait {
		<-s.ctx.Done()
	}
	if err := s.ctx.Err(); err != nil {
		return parley.StreamEvent{}, err
	}
	if len(s.evs) == 0 {
		if s.err != nil {
			return parley.StreamEvent{}, s.err
		}
		return parley.StreamEvent{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}
func (s *sliceStream) Close() error { return nil }

func say(text string) func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
	return func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
		var evs []parley.StreamEvent
		for _, w := range strings.SplitAfter(text, " ") {
			evs = append(evs, parley.StreamEvent{Type: parley.StreamContent, Content: w})
		}
		return append(evs,
			parley.StreamEvent{Type: parley.StreamFinish, FinishReason: "stop"},
			parley.StreamEvent{Type: parley.StreamUsage, Usage: &parley.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}}), nil
	}
}

// callTools asks for the named tools with the given argument objects, in one response.
func callTools(reasoning string, calls ...[2]string) func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
	return func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
		var evs []parley.StreamEvent
		if reasoning != "" {
			evs = append(evs, parley.StreamEvent{Type: parley.StreamReasoning, Reasoning: reasoning})
		}
		for i, c := range calls {
			id := fmt.Sprintf("call_%d_%d", i, time.Now().UnixNano())
			half := len(c[1]) / 2
			evs = append(evs,
				parley.StreamEvent{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{Index: i, ID: id, Name: c[0], Arguments: c[1][:half]}},
				parley.StreamEvent{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{Index: i, Arguments: c[1][half:]}})
		}
		return append(evs, parley.StreamEvent{Type: parley.StreamFinish, FinishReason: "tool_calls"},
			parley.StreamEvent{Type: parley.StreamUsage, Usage: &parley.Usage{PromptTokens: 20, CompletionTokens: 8, TotalTokens: 28}}), nil
	}
}

type fixture struct {
	store *sqlite.Store
	prov  *scripted
	reg   *tools.Registry
	sess  string
	mu    sync.Mutex
	evs   []parley.Event
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{store: st, prov: &scripted{}, reg: tools.NewRegistry(tools.WithTimeout(2 * time.Second))}
	now := time.Now().UTC().Truncate(time.Microsecond)
	f.sess = parley.NewID()
	if err := st.CreateSession(context.Background(), &parley.Session{ID: f.sess, Title: "t", Owner: "u", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) tool(t *testing.T, name string, fn func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error)) {
	t.Helper()
	err := f.reg.Register(&tools.Func{Def: parley.ToolSpec{Name: name, Description: name, Parameters: json.RawMessage(`{"type":"object"}`)}, Fn: fn})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) agent(mod func(*Config)) *Agent {
	cfg := Config{
		Store:   f.store,
		Resolve: func(string) (parley.Provider, string, error) { return f.prov, "m1", nil },
		Tools:   f.reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg)
}

// run stores a user message and runs the agent for it.
func (f *fixture) run(t *testing.T, ctx context.Context, a *Agent, text string, selected []string) (*Result, error) {
	t.Helper()
	u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(text), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := f.store.AppendMessages(context.Background(), f.sess, u); err != nil {
		t.Fatal(err)
	}
	return a.Run(ctx, Input{SessionID: f.sess, RunID: "run1", SelectedTools: selected}, func(ev parley.Event) {
		f.mu.Lock()
		f.evs = append(f.evs, ev)
		f.mu.Unlock()
	})
}

func (f *fixture) history(t *testing.T) []parley.Message {
	t.Helper()
	h, err := f.store.History(context.Background(), f.sess)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (f *fixture) types() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ts []string
	for _, ev := range f.evs {
		if len(ts) > 0 && ts[len(ts)-1] == string(ev.Type) && (ev.Type == parley.EventChunk || ev.Type == parley.EventReasoning) {
			continue // runs of deltas count once
		}
		ts = append(ts, string(ev.Type))
	}
	return strings.Join(ts, " ")
}

// roles renders a history as role[:tool name] items.
func roles(h []parley.Message) string {
	var rs []string
	for _, m := range h {
		r := string(m.Role)
		if len(m.ToolCalls) > 0 {
			r += fmt.Sprintf("(%d calls)", len(m.ToolCalls))
		}
		if m.Role == parley.RoleTool {
			r += ":" + m.Name
		}
		rs = append(rs, r)
	}
	return strings.Join(rs, " ")
}

func echoTool(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
	return &parley.ToolResult{Content: parley.Text("echo " + string(args))}, nil
}

func TestTextAnswer(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, say("Hello there, friend."))
	res, err := f.run(t, context.Background(), f.agent(nil), "hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != parley.FinishStop || res.Iterations != 1 || res.Usage.TotalTokens != 15 {
		t.Fatalf("result: %+v", res)
	}
	if got := f.types(); got != "chunk usage record" {
		t.Fatalf("events: %s", got)
	}
	h := f.history(t)
	if roles(h) != "user assistant" {
		t.Fatalf("history: %s", roles(h))
	}
	a := h[1]
	if a.Content.String() != "Hello there, friend." || a.Model != "m1" || a.RunID != "run1" || a.Usage == nil || a.Usage.TotalTokens != 15 || a.ID != res.Final.ID {
		t.Fatalf("assistant message: %+v", a)
	}
}

func TestParallelToolsThenAnswer(t *testing.T) {
	f := newFixture(t)
	// Each call waits until all three have started: they can only finish if they run at once.
	var started sync.WaitGroup
	started.Add(3)
	f.tool(t, "barrier", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		started.Done()
		done := make(chan struct{})
		go func() { started.Wait(); close(done) }()
		select {
		case <-done:
			return &parley.ToolResult{Content: parley.Text("ok " + string(args))}, nil
		case <-time.After(time.Second):
			return nil, errors.New("the other calls did not start: not parallel")
		}
	})
	f.prov.steps = append(f.prov.steps,
		callTools("I need three lookups.", [2]string{"barrier", `{"n":1}`}, [2]string{"barrier", `{"n":2}`}, [2]string{"barrier", `{"n":3}`}),
		say("All three are ok."))
	res, err := f.run(t, context.Background(), f.agent(nil), "go", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != parley.FinishStop || res.Iterations != 2 || res.Usage.TotalTokens != 28+15 {
		t.Fatalf("result: %+v", res)
	}
	h := f.history(t)
	if got := roles(h); got != "user assistant(3 calls) tool:barrier tool:barrier tool:barrier assistant" {
		t.Fatalf("history: %s", got)
	}
	if h[1].Reasoning != "I need three lookups." || h[1].Content.IsNull() == false {
		t.Fatalf("tool-call message keeps reasoning, has null content: %+v", h[1])
	}
	for _, m := range h[2:5] {
		if m.Success == nil || !*m.Success || !strings.HasPrefix(m.Content.String(), "ok {\"n\":") {
			t.Fatalf("tool message: %+v %q", m, m.Content.String())
		}
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	// The second model call saw the assembled arguments and all three results.
	reqs := f.prov.requests()
	second := reqs[1].Messages
	if len(second) != 5 || second[1].ToolCalls[2].Function.Arguments != `{"n":3}` || second[4].Role != parley.RoleTool {
		t.Fatalf("second request: %s", roles(second))
	}
	// Events: reasoning streamed, the tool-call message recorded before tools_calls_start, one
	// tool_call and one tool_result per call.
	ev := f.types()
	if !strings.HasPrefix(ev, "reasoning usage record tool_calls_start tool_call") {
		t.Fatalf("events: %s", ev)
	}
	f.mu.Lock()
	counts := map[parley.EventType]int{}
	for _, e := range f.evs {
		counts[e.Type]++
	}
	f.mu.Unlock()
	if counts[parley.EventToolCall] != 3 || counts[parley.EventToolResult] != 3 || counts[parley.EventRecord] != 2 {
		t.Fatalf("event counts: %v", counts)
	}
}

func TestParallelismIsBounded(t *testing.T) {
	// Each call holds until the test lets it go, one at a time, and only once as many calls as
	// the bound allows (or as are left) are in flight: so the peak does not depend on how the
	// scheduler happens to overlap them on a loaded machine.
	f := newFixture(t)
	const calls, bound = 6, 2
	var cur, peak atomic.Int32
	gate := make(chan struct{})
	f.tool(t, "work", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer cur.Add(-1)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return nil, errors.New("never let go")
		}
		return &parley.ToolResult{Content: parley.Text("done")}, nil
	})
	var released atomic.Int32
	stuck := make(chan string, 1)
	go func() {
		for i := range calls {
			want := int32(min(bound, calls-i))
			deadline := time.Now().Add(30 * time.Second)
			for cur.Load() < want {
				if time.Now().After(deadline) {
					stuck <- fmt.Sprintf("only %d calls in flight before release %d, want %d", cur.Load(), i+1, want)
					return
				}
				time.Sleep(time.Millisecond)
			}
			// A bound that let a third call start would show it here.
			time.Sleep(5 * time.Millisecond)
			gate <- struct{}{}
			released.Add(1)
		}
	}()
	var steps [][2]string
	for i := range calls {
		steps = append(steps, [2]string{"work", fmt.Sprintf(`{"i":%d}`, i)})
	}
	f.prov.steps = append(f.prov.steps, callTools("", steps...), say("done"))
	_, err := f.run(t, context.Background(), f.agent(func(c *Config) { c.MaxParallelTools = bound }), "go", nil)
	select {
	case msg := <-stuck:
		t.Fatal(msg)
	default:
	}
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p != bound {
		t.Fatalf("peak concurrency %d, want %d", p, bound)
	}
	if r := released.Load(); r != calls {
		t.Fatalf("%d calls let go, want %d", r, calls)
	}
	if n := strings.Count(roles(f.history(t)), "tool:work"); n != calls {
		t.Fatalf("%d tool messages, want %d", n, calls)
	}
}

func TestFailingAndUnknownTools(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "broken", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		return nil, errors.New("database unreachable")
	})
	f.tool(t, "panicky", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		panic("nil map")
	})
	f.tool(t, "echo", echoTool)
	f.prov.steps = append(f.prov.steps,
		callTools("", [2]string{"broken", `{}`}, [2]string{"no_such_tool", `{}`}, [2]string{"panicky", `{}`}, [2]string{"echo", `{"a":1}`}, [2]string{"echo", `not json`}),
		say("Some tools failed."))
	res, err := f.run(t, context.Background(), f.agent(nil), "go", nil)
	if err != nil || res.FinishReason != parley.FinishStop {
		t.Fatalf("run: %+v %v", res, err)
	}
	results := map[string]parley.Message{}
	var order []string
	for _, m := range f.history(t) {
		if m.Role == parley.RoleTool {
			results[m.Content.String()] = m
			order = append(order, fmt.Sprintf("%s=%v", m.Name, *m.Success))
		}
	}
	want := map[string]bool{"broken failed: database unreachable": false, `unknown tool "no_such_tool"`: false, "crashed": false, `echo {"a":1}`: true, "not a JSON object": false}
	for frag, ok := range want {
		found := false
		for content, m := range results {
			if strings.Contains(content, frag) {
				found = true
				if *m.Success != ok {
					t.Errorf("%q: success %v, want %v", frag, *m.Success, ok)
				}
			}
		}
		if !found {
			t.Errorf("no tool result mentions %q (results: %v)", frag, order)
		}
	}
	if err := parley.CheckHistory(f.history(t)); err != nil {
		t.Fatal(err)
	}
}

func TestMaxIterations(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "echo", echoTool)
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"echo", `{"again":true}`})) // repeats forever
	res, err := f.run(t, context.Background(), f.agent(func(c *Config) { c.MaxIterations = 3 }), "loop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != parley.FinishMaxIterations || res.Iterations != 3 || len(f.prov.requests()) != 3 {
		t.Fatalf("result %+v after %d model calls", res, len(f.prov.requests()))
	}
	h := f.history(t)
	last := h[len(h)-1]
	if last.Role != parley.RoleAssistant || last.Content.String() != MaxIterationsText(3) || res.Final.ID != last.ID {
		t.Fatalf("last message: %+v", last)
	}
	if got := roles(h); got != "user assistant(1 calls) tool:echo assistant(1 calls) tool:echo assistant(1 calls) tool:echo assistant" {
		t.Fatalf("history: %s", got)
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	// A streaming client sees the message as chunks too, then its record.
	f.mu.Lock()
	evs := append([]parley.Event(nil), f.evs...)
	f.mu.Unlock()
	n := len(evs)
	if n < 2 || evs[n-2].Type != parley.EventChunk || evs[n-2].Content != MaxIterationsText(3) ||
		evs[n-1].Type != parley.EventRecord || evs[n-1].Message.ID != last.ID {
		t.Fatalf("last events: %+v", evs[max(0, n-2):])
	}
}

func TestLatencyIsRoundedUpToWholeMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {time.Nanosecond, 1}, {300 * time.Microsecond, 1}, {time.Millisecond, 1},
		{1200 * time.Microsecond, 2}, {41 * time.Millisecond, 41},
	} {
		if got := latencyMS(tc.d); got != tc.want {
			t.Errorf("latencyMS(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	// A tool call that took well under a millisecond still reports its latency.
	f := newFixture(t)
	f.tool(t, "echo", echoTool)
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"echo", `{}`}), say("done"))
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range f.history(t) {
		if m.Role == parley.RoleTool && m.LatencyMS < 1 {
			t.Fatalf("tool message without latency: %+v", m)
		}
		if m.Role == parley.RoleTool && !strings.Contains(jsonString(t, m), `"latency_ms":`) {
			t.Fatalf("latency_ms left out of %s", jsonString(t, m))
		}
	}
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSelectedTools(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "echo", echoTool)
	f.tool(t, "secret", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		t.Error("a tool that was not selected ran")
		return nil, nil
	})
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"secret", `{}`}), say("ok"))
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", []string{"echo"}); err != nil {
		t.Fatal(err)
	}
	offered := f.prov.requests()[0].Tools
	if len(offered) != 1 || offered[0].Name != "echo" {
		t.Fatalf("offered: %+v", offered)
	}
	h := f.history(t)
	if h[2].Role != parley.RoleTool || *h[2].Success || !strings.Contains(h[2].Content.String(), `unknown tool "secret"`) {
		t.Fatalf("call to an unselected tool: %+v", h[2])
	}

	// An empty selection offers no tools at all; an unknown name is refused before anything runs.
	f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){say("plain")}
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", []string{}); err != nil {
		t.Fatal(err)
	}
	if reqs := f.prov.requests(); len(reqs[len(reqs)-1].Tools) != 0 {
		t.Fatalf("empty selection offered %+v", reqs[len(reqs)-1].Tools)
	}
	if _, err := f.agent(nil).Run(context.Background(), Input{SessionID: f.sess, SelectedTools: []string{"nope"}}, func(parley.Event) {}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("unknown selected tool: %v", err)
	}
}

func TestCancelDuringTools(t *testing.T) {
	f := newFixture(t)
	entered := make(chan struct{})
	f.tool(t, "hang", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	f.tool(t, "echo", echoTool)
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"hang", `{}`}, [2]string{"echo", `{}`}))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	res, err := f.run(t, ctx, f.agent(func(c *Config) { c.MaxParallelTools = 1 }), "go", nil)
	if parley.CodeOf(err) != parley.ECCanceled {
		t.Fatalf("err = %v, want canceled", err)
	}
	if res == nil || res.Iterations != 1 {
		t.Fatalf("result: %+v", res)
	}
	h := f.history(t)
	// Both calls have a stored result, so the history stays valid as stored.
	if got := roles(h); got != "user assistant(2 calls) tool:hang tool:echo" {
		t.Fatalf("history: %s", got)
	}
	for _, m := range h[2:] {
		if *m.Success || !strings.Contains(m.Content.String(), "interrupted") {
			t.Fatalf("tool message after cancel: %q success=%v", m.Content.String(), *m.Success)
		}
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
}

func TestCancelMidStreamKeepsPartialText(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	f.prov.steps = append(f.prov.steps, func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
		return []parley.StreamEvent{{Type: parley.StreamContent, Content: "The answer is"}}, nil
	})
	a := f.agent(nil)
	var once sync.Once
	u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q"), CreatedAt: time.Now().UTC()}
	if err := f.store.AppendMessages(ctx, f.sess, u); err != nil {
		t.Fatal(err)
	}
	_, err := a.Run(ctx, Input{SessionID: f.sess}, func(ev parley.Event) {
		if ev.Type == parley.EventChunk {
			once.Do(cancel)
		}
	})
	if parley.CodeOf(err) != parley.ECCanceled {
		t.Fatalf("err = %v", err)
	}
	h := f.history(t)
	if len(h) != 2 || h[1].Content.String() != "The answer is" {
		t.Fatalf("history: %s", roles(h))
	}
}

// A run stopped before the model's first word keeps its turn as an empty one marked canceled: the
// next question is sent alone, not merged with the unanswered one, and the history stays valid.
func TestCancelBeforeTheFirstWordIsAFailedTurn(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
		cancel()
		return nil, context.Canceled
	}}
	if _, err := f.run(t, ctx, f.agent(nil), "the stopped question", nil); parley.CodeOf(err) != parley.ECCanceled {
		t.Fatalf("err = %v", err)
	}
	h := f.history(t)
	if got := roles(h); got != "user assistant" || h[1].Content.String() != "" || h[1].Error != parley.ECCanceled {
		t.Fatalf("a run stopped before its first word stored %s: %+v", got, h[len(h)-1])
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){say("fine")}
	if _, err := f.run(t, context.Background(), f.agent(nil), "next question", nil); err != nil {
		t.Fatal(err)
	}
	reqs := f.prov.requests()
	if sent := reqs[len(reqs)-1].Messages; len(sent) != 1 || sent[0].Content.String() != "next question" {
		t.Fatalf("the next turn sent %+v", sent)
	}
}

func TestProviderErrors(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
		return []parley.StreamEvent{{Type: parley.StreamContent, Content: "partial"}}, errors.New("connection reset by peer at 10.0.0.3:443")
	})
	_, err := f.run(t, context.Background(), f.agent(nil), "q", nil)
	if parley.CodeOf(err) != parley.ECUpstream || strings.Contains(parley.MessageOf(err), "10.0.0.3") {
		t.Fatalf("err = %v (client sees %q)", err, parley.MessageOf(err))
	}
	// What was streamed is kept, marked as a failed turn, and announced by a record.
	h := f.history(t)
	if got := roles(h); got != "user assistant" || h[1].Content.String() != "partial" || h[1].Error != parley.ECUpstream || h[1].RunID != "run1" {
		t.Fatalf("a failed model call stored %s: %+v", got, h[len(h)-1])
	}
	f.mu.Lock()
	last := f.evs[len(f.evs)-1]
	f.mu.Unlock()
	if last.Type != parley.EventRecord || last.Message.ID != h[1].ID || last.Message.Error != parley.ECUpstream {
		t.Fatalf("last event %+v, want the failed turn's record", last)
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	// The next turn's model call is not sent the unanswered question.
	f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){say("fine")}
	if _, err := f.run(t, context.Background(), f.agent(nil), "next question", nil); err != nil {
		t.Fatal(err)
	}
	reqs := f.prov.requests()
	sent := reqs[len(reqs)-1].Messages
	if len(sent) != 1 || sent[0].Content.String() != "next question" {
		t.Fatalf("the next turn sent %+v", sent)
	}
	// A client following the display rule shows what was streamed once, as stored.
	var tr transcript.Transcript
	f.mu.Lock()
	for _, ev := range f.evs {
		tr.Apply(ev)
	}
	f.mu.Unlock()
	if texts := tr.Texts(); len(texts) < 1 || texts[0] != "partial" || strings.Count(strings.Join(texts, "|"), "partial") != 1 {
		t.Fatalf("a client following the display rule shows %q, want partial once", texts)
	}

	resolveErr := parley.Errorf(parley.ECInvalid, "model: unknown")
	a := f.agent(func(c *Config) {
		c.Resolve = func(string) (parley.Provider, string, error) { return nil, "", resolveErr }
	})
	if _, err := a.Run(context.Background(), Input{SessionID: f.sess}, func(parley.Event) {}); !errors.Is(err, resolveErr) {
		t.Fatalf("resolve error: %v", err)
	}
}

func TestHistoryIsTruncatedForTheModel(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "echo", echoTool)
	f.prov.steps = append(f.prov.steps,
		callTools("", [2]string{"echo", `{"step":1}`}),
		callTools("", [2]string{"echo", `{"step":2}`}),
		say("done"))
	if _, err := f.run(t, context.Background(), f.agent(func(c *Config) { c.ToolHistoryRounds = 1; c.SystemPrompt = "sys" }), "go", nil); err != nil {
		t.Fatal(err)
	}
	last := f.prov.requests()[2].Messages
	if last[0].Role != parley.RoleSystem || last[2].ToolCalls[0].Function.Arguments != llmctx.OmittedArguments ||
		last[3].Content.String() != llmctx.OmittedResult || last[4].ToolCalls[0].Function.Arguments != `{"step":2}` {
		t.Fatalf("third request: %+v", last)
	}
	// The store keeps everything whole.
	if h := f.history(t); h[1].ToolCalls[0].Function.Arguments != `{"step":1}` {
		t.Fatalf("stored call changed: %+v", h[1])
	}
}

func TestMissingToolCallIDsAreFilled(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "echo", echoTool)
	f.prov.steps = append(f.prov.steps, func(*parley.ChatRequest) ([]parley.StreamEvent, error) {
		return []parley.StreamEvent{
			{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{Index: 0, Name: "echo", Arguments: "{}"}},
			{Type: parley.StreamToolCall, ToolCall: &parley.ToolCallDelta{Index: 1, Name: "echo", Arguments: "{}"}},
		}, nil
	}, say("ok"))
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", nil); err != nil {
		t.Fatal(err)
	}
	h := f.history(t)
	if h[1].ToolCalls[0].ID == "" || h[1].ToolCalls[0].ID == h[1].ToolCalls[1].ID {
		t.Fatalf("ids: %+v", h[1].ToolCalls)
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
}

// A NUL in what a model or a tool produced cannot be stored (PostgreSQL refuses it); the run goes
// on with U+FFFD in its place instead of failing.
func TestNULBytesAreScrubbed(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "bin", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		return &parley.ToolResult{Content: parley.Text("ELF\x00\x01")}, nil
	})
	f.prov.steps = append(f.prov.steps, callTools("think\x00", [2]string{"bin", "{\"p\":\"a\x00\"}"}), say("done\x00"))
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", nil); err != nil {
		t.Fatal(err)
	}
	h := f.history(t)
	if roles(h) != "user assistant(1 calls) tool:bin assistant" {
		t.Fatalf("history: %s", roles(h))
	}
	if h[1].Reasoning != "think\uFFFD" || h[2].Content.String() != "ELF\uFFFD\x01" || h[3].Content.String() != "done\uFFFD" {
		t.Fatalf("stored: %q %q %q", h[1].Reasoning, h[2].Content.String(), h[3].Content.String())
	}
	if args := h[1].ToolCalls[0].Function.Arguments; args != "{\"p\":\"a\uFFFD\"}" {
		t.Fatalf("arguments: %q", args)
	}
}

// reporting wraps a provider so that its streams say another model answered, as a router that
// fell back does.
type reporting struct {
	parley.Provider
	model string
}

type reportingStream struct {
	parley.Stream
	model string
}

func (s reportingStream) Model() string { return s.model }

func (p reporting) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	s, err := p.Provider.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	return reportingStream{s, p.model}, nil
}

// The assistant message records the model that answered, and keeps the signed thinking blocks
// of the answer; a block holding a NUL is dropped (it cannot be edited without breaking its
// signature), the others kept.
func TestAnsweringModelAndThinkingBlocksAreStored(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, func(req *parley.ChatRequest) ([]parley.StreamEvent, error) {
		evs, _ := say("hi")(req)
		return append([]parley.StreamEvent{
			{Type: parley.StreamThinking, Thinking: &parley.ThinkingBlock{Type: "thinking", Thinking: "plan", Signature: "c2ln"}},
			{Type: parley.StreamThinking, Thinking: &parley.ThinkingBlock{Type: "thinking", Thinking: "bad\x00", Signature: "c2ln"}},
			{Type: parley.StreamThinking, Thinking: &parley.ThinkingBlock{Type: "redacted_thinking", Data: "ZGF0YQ=="}},
		}, evs...), nil
	})
	a := f.agent(func(c *Config) {
		c.Resolve = func(string) (parley.Provider, string, error) {
			return reporting{f.prov, "spare/small"}, "main/big", nil
		}
	})
	if _, err := f.run(t, context.Background(), a, "q", nil); err != nil {
		t.Fatal(err)
	}
	m := f.history(t)[1]
	if m.Model != "spare/small" {
		t.Fatalf("model %q, want the one that answered", m.Model)
	}
	if len(m.ThinkingBlocks) != 2 || m.ThinkingBlocks[0].Thinking != "plan" || m.ThinkingBlocks[1].Type != "redacted_thinking" {
		t.Fatalf("thinking blocks %+v", m.ThinkingBlocks)
	}
}

// A model call over ModelTimeout ends the run with a timeout error.
func TestModelTimeout(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, say("never"))
	slow := blocking{}
	a := f.agent(func(c *Config) {
		c.ModelTimeout = 50 * time.Millisecond
		c.Resolve = func(string) (parley.Provider, string, error) { return slow, "m1", nil }
	})
	_, err := f.run(t, context.Background(), a, "q", nil)
	if parley.CodeOf(err) != parley.ECTimeout {
		t.Fatalf("err %v, want a timeout", err)
	}
}

// blocking is a provider whose stream waits for its context.
type blocking struct{}

func (blocking) Stream(ctx context.Context, _ *parley.ChatRequest) (parley.Stream, error) {
	return &sliceStream{ctx: ctx, evs: nil, err: nil, wait: true}, nil
}

// TestMaxToolCallsPerRequest: a run may make MaxToolCalls tool calls over all its model answers;
// the calls past it are answered with an error result, not run, and the history stays valid.
func TestMaxToolCallsPerRequest(t *testing.T) {
	f := newFixture(t)
	var ran atomic.Int32
	// The run's user reaches the registry (for its quotas): a quota of 1 call per user shows it.
	mem := limit.NewMemory()
	f.reg = tools.NewRegistry(tools.WithGuard(tools.Guard{Quotas: mem, UserRate: limit.Rate{Count: 100, Per: time.Hour, Burst: 100}}))
	f.tool(t, "count", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		ran.Add(1)
		return &parley.ToolResult{Content: parley.Text("ok")}, nil
	})
	f.prov.steps = append(f.prov.steps,
		callTools("", [2]string{"count", `{"n":1}`}, [2]string{"count", `{"n":2}`}),
		callTools("", [2]string{"count", `{"n":3}`}, [2]string{"count", `{"n":4}`}),
		say("done"))
	a := f.agent(func(c *Config) { c.MaxToolCalls = 3 })
	u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := f.store.AppendMessages(context.Background(), f.sess, u); err != nil {
		t.Fatal(err)
	}
	res, err := a.Run(context.Background(), Input{SessionID: f.sess, RunID: "run1", User: "erin"}, func(parley.Event) {})
	if err != nil || res.FinishReason != parley.FinishStop {
		t.Fatalf("run: %+v %v", res, err)
	}
	if ran.Load() != 3 {
		t.Fatalf("%d calls ran, want 3", ran.Load())
	}
	h := f.history(t)
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, m := range h {
		if m.Role == parley.RoleTool && !*m.Success {
			if !strings.Contains(m.Content.String(), "at most 3 tool calls") {
				t.Fatalf("failed tool message: %q", m.Content.String())
			}
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("%d calls refused, want 1 (the 4th)", refused)
	}
	// The user's quota was charged for the 3 calls that ran (100 burst - 3).
	for i := range 97 {
		if d, _ := mem.Allow(context.Background(), "tu:erin", limit.Rate{Count: 100, Per: time.Hour, Burst: 100}); !d.Allowed {
			t.Fatalf("quota spent after %d more: the run charged more than 3", i)
		}
	}
	if d, _ := mem.Allow(context.Background(), "tu:erin", limit.Rate{Count: 100, Per: time.Hour, Burst: 100}); d.Allowed {
		t.Fatal("the run's calls were not charged to erin")
	}
}

// The gate is passed before each model call and each batch of tool calls; a run stopped at the
// gate before its tools ran answers every call with "not run", so the history stays valid.
func TestGateBeforeEachStep(t *testing.T) {
	f := newFixture(t)
	ran := false
	f.tool(t, "echo", func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
		ran = true
		return echoTool(ctx, args)
	})
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"echo", `{"a":1}`}, [2]string{"echo", `{"b":2}`}))
	gates := 0
	a := f.agent(nil)
	u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := f.store.AppendMessages(context.Background(), f.sess, u); err != nil {
		t.Fatal(err)
	}
	_, err := a.Run(context.Background(), Input{SessionID: f.sess, RunID: "run1", Gate: func(ctx context.Context) error {
		gates++
		if gates == 2 { // before the tools: the run is stopped here
			return parley.Errorf(parley.ECCanceled, "stopped while paused")
		}
		return nil
	}}, func(parley.Event) {})
	if parley.CodeOf(err) != parley.ECCanceled || gates != 2 || ran {
		t.Fatalf("err %v, gates %d, tool ran %v", err, gates, ran)
	}
	h := f.history(t)
	if got := roles(h); got != "user assistant(2 calls) tool:echo tool:echo" {
		t.Fatalf("history: %s", got)
	}
	for _, m := range h[2:] {
		if *m.Success || !strings.Contains(m.Content.String(), "not run") {
			t.Fatalf("tool message: %q", m.Content.String())
		}
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
}

// A conversation held outside the store (WithStore, the OpenAI-compatible API's stateless
// requests) is not offered the tools that keep state of a stored session, cannot call them, and
// cannot name them; the agent on the store offers them.
func TestSessionToolsNeedAStoredSession(t *testing.T) {
	f := newFixture(t)
	f.tool(t, "echo", echoTool)
	err := f.reg.Register(&tools.Func{Def: parley.ToolSpec{Name: "todo", Description: "todo", Parameters: json.RawMessage(`{"type":"object"}`)},
		Session: true, Fn: func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
			t.Error("a session tool ran for a conversation outside the store")
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	stateless := f.agent(nil).WithStore(f.store)
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"todo", `{}`}), say("ok"))
	if _, err := f.run(t, context.Background(), stateless, "go", nil); err != nil {
		t.Fatal(err)
	}
	if offered := f.prov.requests()[0].Tools; len(offered) != 1 || offered[0].Name != "echo" {
		t.Fatalf("offered: %+v", offered)
	}
	if h := f.history(t); h[2].Role != parley.RoleTool || *h[2].Success || !strings.Contains(h[2].Content.String(), `unknown tool "todo"`) {
		t.Fatalf("call to a session tool: %+v", h[2])
	}
	_, err = stateless.Run(context.Background(), Input{SessionID: f.sess, SelectedTools: []string{"echo", "todo"}}, func(parley.Event) {})
	if parley.CodeOf(err) != parley.ECInvalid || !strings.Contains(err.Error(), `"todo"`) {
		t.Fatalf("naming a session tool: %v", err)
	}

	f.prov.steps = []func(*parley.ChatRequest) ([]parley.StreamEvent, error){say("plain")}
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", nil); err != nil {
		t.Fatal(err)
	}
	if reqs := f.prov.requests(); len(reqs[len(reqs)-1].Tools) != 2 {
		t.Fatalf("the agent on the store offered %+v", reqs[len(reqs)-1].Tools)
	}
}
