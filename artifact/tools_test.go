package artifact_test

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/artifact"
	"github.com/parleyhq/parley/internal/ask"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tools"
)

// scripted is a fake artifact model: it answers each call with the next of its answers and keeps
// the requests.
type scripted struct {
	mu      sync.Mutex
	answers []string
	reqs    []*parley.ChatRequest
}

func (s *scripted) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, req)
	a := s.answers[0]
	s.answers = s.answers[1:]
	return &oneShot{evs: []parley.StreamEvent{{Type: parley.StreamReasoning, Reasoning: "thinking"}, {Type: parley.StreamContent, Content: a}}}, nil
}

type oneShot struct{ evs []parley.StreamEvent }

func (o *oneShot) Next() (parley.StreamEvent, error) {
	if len(o.evs) == 0 {
		return parley.StreamEvent{}, io.EOF
	}
	ev := o.evs[0]
	o.evs = o.evs[1:]
	return ev, nil
}
func (o *oneShot) Close() error { return nil }

type fixture struct {
	store  *sqlite.Store
	reg    *tools.Registry
	sess   *parley.Session
	mu     sync.Mutex
	events []parley.Event
}

func newFixture(t *testing.T, model ask.Model) *fixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{store: st, reg: tools.NewRegistry()}
	for _, tool := range artifact.Tools(artifact.Config{Store: st, Model: model, InLineage: st.InLineage}) {
		if err := f.reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	f.sess = f.newSession(t)
	return f
}

func (f *fixture) newSession(t *testing.T) *parley.Session {
	now := time.Now().UTC().Truncate(time.Microsecond)
	s := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := f.store.CreateSession(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// call runs a tool through the registry (its schema and guard) as a run of session would.
func (f *fixture) call(t *testing.T, session, name string, args any) tools.Outcome {
	t.Helper()
	b, _ := json.Marshal(args)
	ctx := tools.WithRun(context.Background(), tools.RunInfo{SessionID: session, RunID: "run1", User: "alice",
		Emit: func(ev parley.Event) { f.mu.Lock(); f.events = append(f.events, ev); f.mu.Unlock() }})
	return f.reg.Call(ctx, parley.ToolCall{ID: "call1", Type: "function", Function: parley.FunctionCall{Name: name, Arguments: string(b)}}, nil)
}

func text(o tools.Outcome) string { return o.Content.String() }

func idOf(t *testing.T, o tools.Outcome) string {
	t.Helper()
	s := text(o)
	i := strings.Index(s, "id ")
	if !o.Success || i < 0 {
		t.Fatalf("no id in %q (success %v)", s, o.Success)
	}
	return strings.Fields(s[i+3:])[0][:36]
}

func TestCreateAndUpdateArtifact(t *testing.T) {
	f := newFixture(t, ask.Model{})
	out := f.call(t, f.sess.ID, "create_artifact", map[string]any{"type": "react", "title": "Counter",
		"content": "import { useState } from 'react'\nexport default function C() { const [n, s] = useState(0); return <button onClick={() => s(n + 1)}>{n}</button> }"})
	id := idOf(t, out)
	if !strings.Contains(text(out), "version 1") {
		t.Fatalf("result: %s", text(out))
	}
	if len(f.events) != 1 || f.events[0].Type != parley.EventArtifact || f.events[0].Artifact.ID != id || f.events[0].Artifact.Version != 1 {
		t.Fatalf("events: %+v", f.events)
	}

	// A broken update is refused with the reason, and stores nothing.
	out = f.call(t, f.sess.ID, "update_artifact", map[string]any{"id": id, "content": "export default function C() { return <div> }"})
	if out.Success || !strings.Contains(text(out), "line 1") || !strings.Contains(text(out), "call update_artifact again") {
		t.Fatalf("broken update: %v %s", out.Success, text(out))
	}
	out = f.call(t, f.sess.ID, "update_artifact", map[string]any{"id": id, "title": "Counter 2", "content": "export default () => <p>two</p>"})
	if !out.Success || !strings.Contains(text(out), "version 2") {
		t.Fatalf("update: %s", text(out))
	}
	a, err := f.store.GetArtifact(context.Background(), id, 0)
	if err != nil || a.Version != 2 || a.Title != "Counter 2" || !strings.Contains(a.Content, "two") {
		t.Fatalf("stored: %+v %v", a, err)
	}
	if v1, err := f.store.GetArtifact(context.Background(), id, 1); err != nil || !strings.Contains(v1.Content, "useState") {
		t.Fatalf("version 1 kept: %+v %v", v1, err)
	}

	// Another conversation cannot touch it.
	other := f.newSession(t)
	out = f.call(t, other.ID, "update_artifact", map[string]any{"id": id, "content": "export default () => <p/>"})
	if out.Success || !strings.Contains(text(out), "no artifact") {
		t.Fatalf("update from another session: %s", text(out))
	}

	// Content is required without an artifact model: the schema says so.
	out = f.call(t, f.sess.ID, "create_artifact", map[string]any{"type": "markdown", "title": "x"})
	if out.Success || !strings.Contains(text(out), "content") {
		t.Fatalf("no content: %s", text(out))
	}
}

// A fork's copied messages show the artifacts of the conversation it was forked from: the fork
// may not change them (that would change the source too), and is told why and what to do.
func TestUpdateInAForkOfAnArtifactFromBefore(t *testing.T) {
	f := newFixture(t, ask.Model{})
	ctx := context.Background()
	id := idOf(t, f.call(t, f.sess.ID, "create_artifact", map[string]any{"type": "markdown", "title": "Plan", "content": "# Plan\n"}))
	m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("a plan"), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := f.store.AppendMessages(ctx, f.sess.ID, m); err != nil {
		t.Fatal(err)
	}
	fork := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: m.CreatedAt, UpdatedAt: m.CreatedAt}
	if _, err := f.store.Fork(ctx, f.sess.ID, m.ID, fork); err != nil {
		t.Fatal(err)
	}

	out := f.call(t, fork.ID, "update_artifact", map[string]any{"id": id, "content": "# Plan B\n"})
	for _, want := range []string{"made before this conversation was forked", "call create_artifact (type markdown) with the changed content", "nothing was stored"} {
		if out.Success || !strings.Contains(text(out), want) {
			t.Fatalf("update in the fork: %v %q; want it refused saying %q", out.Success, text(out), want)
		}
	}
	if a, err := f.store.GetArtifact(ctx, id, 0); err != nil || a.Version != 1 || a.SessionID != f.sess.ID {
		t.Fatalf("after the refused update: %+v %v", a, err)
	}
	// What it says to do works; the source still updates its own; an unrelated conversation is
	// still told there is no such artifact.
	if out := f.call(t, fork.ID, "create_artifact", map[string]any{"type": "markdown", "title": "Plan B", "content": "# Plan B\n"}); !out.Success {
		t.Fatalf("create in the fork: %s", text(out))
	}
	if out := f.call(t, f.sess.ID, "update_artifact", map[string]any{"id": id, "content": "# Plan 2\n"}); !out.Success {
		t.Fatalf("update in the source: %s", text(out))
	}
	if out := f.call(t, f.newSession(t).ID, "update_artifact", map[string]any{"id": id, "content": "x"}); out.Success || !strings.Contains(text(out), "no artifact") {
		t.Fatalf("update from an unrelated session: %s", text(out))
	}
}

func TestCreateSVGReportsWhatWasRemoved(t *testing.T) {
	f := newFixture(t, ask.Model{})
	out := f.call(t, f.sess.ID, "create_artifact", map[string]any{"type": "svg", "title": "Dot",
		"content": `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script><circle r="4"/></svg>`})
	if !out.Success || !strings.Contains(text(out), "Removed as unsafe") || !strings.Contains(text(out), "<script> element") {
		t.Fatalf("result: %s", text(out))
	}
	a := f.events[0].Artifact
	if strings.Contains(a.Content, "alert") || !strings.Contains(a.Content, "<circle r=\"4\">") {
		t.Fatalf("stored: %s", a.Content)
	}
}

func TestArtifactModelWritesAndIsCorrected(t *testing.T) {
	model := &scripted{answers: []string{
		// The first answer does not parse; the model is told why and answers again, wrapped in a
		// whole HTML page, which is stripped.
		"Here is the clock:\n```jsx\nexport default function Clock() { return <div>{new Date().toString()</div> }\n```\nEnjoy!",
		"<!DOCTYPE html><html><head><title>x</title></head><body><div id=\"root\"></div><script type=\"text/babel\">\nexport default function Clock() { return <div>{new Date().toString()}</div> }\n</script></body></html>",
	}}
	f := newFixture(t, ask.Model{Name: "fake/artist", Resolve: func(m string) (parley.Provider, string, error) { return model, "artist", nil }})
	out := f.call(t, f.sess.ID, "create_artifact", map[string]any{"type": "react", "title": "Clock", "instructions": "a clock"})
	if !out.Success {
		t.Fatalf("create: %s", text(out))
	}
	a := f.events[0].Artifact
	if strings.Contains(a.Content, "<html") || !strings.HasPrefix(a.Content, "export default function Clock") {
		t.Fatalf("stored: %q", a.Content)
	}
	if len(model.reqs) != 2 {
		t.Fatalf("model calls: %d", len(model.reqs))
	}
	sys := model.reqs[0].Messages[0].Content.String()
	if !strings.Contains(sys, "NO HTML document structure") || model.reqs[0].Model != "artist" {
		t.Fatalf("react prompt: %s", sys)
	}
	retry := model.reqs[1].Messages[1].Content.String()
	if !strings.Contains(retry, "was refused") || !strings.Contains(retry, "line 1") {
		t.Fatalf("the second call does not say what was wrong: %s", retry)
	}
}

func TestArtifactModelGetsItsOwnTimeLimit(t *testing.T) {
	ts := artifact.Tools(artifact.Config{Model: ask.Model{Name: "x/y", Timeout: time.Minute}})
	for _, tool := range ts {
		tt, ok := tool.(tools.Timed)
		if !ok || tt.Timeout() < 2*time.Minute {
			t.Fatalf("%s: no time limit for two artifact model calls", tool.Spec().Name)
		}
	}
	for _, tool := range artifact.Tools(artifact.Config{}) {
		if _, ok := tool.(tools.Timed); ok {
			t.Fatalf("%s: its own time limit without an artifact model", tool.Spec().Name)
		}
	}
}
