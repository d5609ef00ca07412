package chat

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// answeringAgent stores "re: <question>" at the active leaf, by the run's model, as the agent
// loop would.
type answeringAgent struct{ st parley.Store }

func (a answeringAgent) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	h, err := a.st.History(ctx, in.SessionID)
	if err != nil {
		return nil, err
	}
	q := h[len(h)-1].Content.String()
	m := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("re: " + q), Model: in.Model,
		RunID: in.RunID, CreatedAt: time.Now().UTC()}
	if err := a.st.AppendMessages(ctx, in.SessionID, m); err != nil {
		return nil, err
	}
	emit(parley.Event{Type: parley.EventRecord, Message: m})
	return &agent.Result{FinishReason: parley.FinishStop, Final: m}, nil
}

func wait(t *testing.T, s *Started) {
	t.Helper()
	select {
	case <-s.Run.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end")
	}
}

func texts(t *testing.T, st parley.Store, sid string) string {
	t.Helper()
	h, err := st.History(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range h {
		out = append(out, m.Content.String())
	}
	return strings.Join(out, " | ")
}

func TestEditRegenerateSwitchFork(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(ctx)
	s := &Service{Store: st, Runs: mgr, Agent: answeringAgent{st}, DefaultModel: "mock/a",
		ResolveModel: func(m string) (string, error) {
			if m == "mock/a" || m == "mock/b" {
				return m, nil
			}
			return "", parley.Errorf(parley.ECInvalid, "model: unknown model %q", m)
		}}
	first, err := s.Send(ctx, "alice", Request{Message: "q1"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, first)
	sid := first.Session.ID
	second, err := s.Send(ctx, "alice", Request{Message: "q2", SessionID: sid, Model: "mock/b"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, second)
	h, _ := st.History(ctx, sid)
	q1, a1, q2, a2 := h[0], h[1], h[2], h[3]

	// Edit q2: a sibling, answered.
	ed, err := s.Edit(ctx, "alice", sid, q2.ID, Request{Message: "q2 edited"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ed)
	if ed.UserMessage.ParentID != a1.ID || texts(t, st, sid) != "q1 | re: q1 | q2 edited | re: q2 edited" {
		t.Fatalf("after the edit: parent %q, %q", ed.UserMessage.ParentID, texts(t, st, sid))
	}
	// Edit q1: a new root.
	root, err := s.Edit(ctx, "alice", sid, q1.ID, Request{Message: "q1 edited"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, root)
	if root.UserMessage.ParentID != "" || texts(t, st, sid) != "q1 edited | re: q1 edited" {
		t.Fatalf("after the root edit: %q", texts(t, st, sid))
	}
	// Regenerate a2 (answered by mock/b): the same question, a sibling answer, by mock/b.
	re, err := s.Regenerate(ctx, "alice", sid, a2.ID, RetryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, re)
	after, _ := st.History(ctx, sid)
	if re.UserMessage.ID != q2.ID || re.Run.Model != "mock/b" || len(after) != 4 || after[3].ID == a2.ID || after[3].ParentID != q2.ID {
		t.Fatalf("regenerated: user %q model %q, %q", re.UserMessage.ID, re.Run.Model, texts(t, st, sid))
	}
	// Regenerate from the user message, with another model.
	re2, err := s.Regenerate(ctx, "alice", sid, q1.ID, RetryRequest{Model: "mock/b"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, re2)
	if got := texts(t, st, sid); got != "q1 | re: q1" || re2.Run.Model != "mock/b" {
		t.Fatalf("regenerated from q1: %q %q", got, re2.Run.Model)
	}
	_, nodes, _ := st.Tree(ctx, sid)
	answers := 0
	for _, n := range nodes {
		if n.ParentID == q1.ID {
			answers++
		}
	}
	if answers != 2 {
		t.Fatalf("q1 has %d answers, want 2", answers)
	}
	// Switch back to the first answer of q2.
	leaf, err := s.SwitchBranch(ctx, "alice", sid, a2.ID)
	if err != nil || leaf != a2.ID || texts(t, st, sid) != "q1 | re: q1 | q2 | re: q2" {
		t.Fatalf("switched: %q %v %q", leaf, err, texts(t, st, sid))
	}
	// Fork at a1: a new session of alice's with q1 and its answer.
	fork, err := s.Fork(ctx, "alice", sid, a1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if fork.ID == sid || fork.Owner != "alice" || fork.Title != "q1 (fork)" || texts(t, st, fork.ID) != "q1 | re: q1" {
		t.Fatalf("fork: %+v %q", fork, texts(t, st, fork.ID))
	}
	// Bad input, and another user.
	for name, err := range map[string]error{
		"edit an answer":     func() error { _, err := s.Edit(ctx, "alice", sid, a1.ID, Request{Message: "x"}); return err }(),
		"regenerate nothing": func() error { _, err := s.Regenerate(ctx, "alice", sid, parley.NewID(), RetryRequest{}); return err }(),
		"edit nothing":       func() error { _, err := s.Edit(ctx, "alice", sid, parley.NewID(), Request{Message: "x"}); return err }(),
		"switch to nothing":  func() error { _, err := s.SwitchBranch(ctx, "alice", sid, parley.NewID()); return err }(),
		"fork at nothing":    func() error { _, err := s.Fork(ctx, "alice", sid, parley.NewID()); return err }(),
		"bob edits":          func() error { _, err := s.Edit(ctx, "bob", sid, q2.ID, Request{Message: "x"}); return err }(),
		"bob regenerates":    func() error { _, err := s.Regenerate(ctx, "bob", sid, a2.ID, RetryRequest{}); return err }(),
		"bob switches":       func() error { _, err := s.SwitchBranch(ctx, "bob", sid, a2.ID); return err }(),
		"bob forks":          func() error { _, err := s.Fork(ctx, "bob", sid, a2.ID); return err }(),
		"a parent without session": func() error {
			_, err := s.Send(ctx, "alice", Request{Message: "x", ParentID: a1.ID})
			return err
		}(),
		"a parent of another session": func() error {
			_, err := s.Send(ctx, "alice", Request{Message: "x", SessionID: fork.ID, ParentID: a1.ID})
			return err
		}(),
	} {
		want := map[bool]parley.ErrorCode{true: parley.ECForbidden, false: parley.ECNotFound}[strings.HasPrefix(name, "bob")]
		if strings.HasPrefix(name, "edit an") || strings.HasPrefix(name, "a parent") {
			want = parley.ECInvalid
		}
		if parley.CodeOf(err) != want {
			t.Errorf("%s: %v, want %s", name, err, want)
		}
	}
	if got := texts(t, st, sid); got != "q1 | re: q1 | q2 | re: q2" {
		t.Fatalf("refused requests changed the session: %q", got)
	}
	// No switch while a run is in progress.
	release := make(chan struct{})
	s.Agent = blockingAgent{release}
	busy, err := s.Send(ctx, "alice", Request{Message: "q3", SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwitchBranch(ctx, "alice", sid, q1.ID); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("switch during a run: %v", err)
	}
	close(release)
	wait(t, busy)
	if _, err := s.SwitchBranch(ctx, "alice", sid, q1.ID); err != nil {
		t.Fatalf("switch after the run: %v", err)
	}
}

// A fork at an assistant message that called tools takes its tool results along: the fork's
// history is whole, with no call left open.
func TestForkAtAToolCallKeepsItsResults(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(ctx)
	s := &Service{Store: st, Runs: mgr, Agent: nopAgent{}, DefaultModel: "mock"}
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	call := func(id string) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: "calc", Arguments: "{}"}}
	}
	q := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q"), CreatedAt: now}
	ask := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{call("c1"), call("c2")}, CreatedAt: now}
	r1 := &parley.Message{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "c2", Name: "calc", Content: parley.Text("2"), CreatedAt: now}
	r2 := &parley.Message{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "c1", Name: "calc", Content: parley.Text("1"), CreatedAt: now}
	a := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("3"), CreatedAt: now}
	if err := st.AppendMessages(ctx, sess.ID, q, ask, r1, r2, a); err != nil {
		t.Fatal(err)
	}
	fork, err := s.Fork(ctx, "alice", sess.ID, ask.ID)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := st.History(ctx, fork.ID)
	if len(h) != 4 || h[3].ToolCallID != "c1" {
		t.Fatalf("fork: %+v", h)
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatalf("the fork's history: %v", err)
	}
	if open, _ := st.SessionsWithOpenToolCalls(ctx, "", 10); len(open) != 0 {
		t.Fatalf("open tool calls in %v", open)
	}
	// At a message that called no tool, the fork ends there.
	fork2, err := s.Fork(ctx, "alice", sess.ID, q.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := st.History(ctx, fork2.ID); len(h) != 1 {
		t.Fatalf("fork at the question: %+v", h)
	}
}
