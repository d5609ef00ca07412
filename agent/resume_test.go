package agent

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
)

// counted registers a tool that counts its calls; idempotent tools may be run again after a crash.
func (f *fixture) counted(t *testing.T, name string, idempotent bool, calls map[string]int, mu *sync.Mutex) {
	t.Helper()
	err := f.reg.Register(&tools.Func{Def: parley.ToolSpec{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)},
		Idempotent: idempotent,
		Fn: func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
			mu.Lock()
			calls[name]++
			mu.Unlock()
			return &parley.ToolResult{Content: parley.Text(name + " ran")}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) record(ev parley.Event) {
	f.mu.Lock()
	f.evs = append(f.evs, ev)
	f.mu.Unlock()
}

func TestLedgerIsWrittenBeforeAndAfterEachCall(t *testing.T) {
	f := newFixture(t)
	var during []string
	f.tool(t, "probe", func(ctx context.Context, _ json.RawMessage) (*parley.ToolResult, error) {
		h := f.history(t)
		id := h[len(h)-1].ToolCalls[0].ID
		st, err := f.store.ToolCallStates(ctx, f.sess, []string{id})
		if err != nil {
			return nil, err
		}
		during = append(during, st[id])
		return &parley.ToolResult{Content: parley.Text("ok")}, nil
	})
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"probe", `{}`}), say("done"))
	if _, err := f.run(t, context.Background(), f.agent(nil), "go", nil); err != nil {
		t.Fatal(err)
	}
	h := f.history(t)
	id := h[1].ToolCalls[0].ID
	after, err := f.store.ToolCallStates(context.Background(), f.sess, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || during[0] != parley.ToolCallStarted || after[id] != parley.ToolCallDone {
		t.Fatalf("ledger while the tool ran %v, after %q; want [started] and done", during, after[id])
	}
}

// A run whose process died during its tool calls: one call done, one never started, one in doubt
// of a tool that may run twice, one in doubt of a tool that may not.
func TestResumeSettlesEachOpenCallByTheLedger(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var mu sync.Mutex
	calls := map[string]int{}
	for name, idem := range map[string]bool{"done": false, "never": false, "lookup": true, "send_email": false} {
		f.counted(t, name, idem, calls, &mu)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	call := func(id, name string) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: name, Arguments: "{}"}}
	}
	ask := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, RunID: "run1", CreatedAt: now,
		ToolCalls: []parley.ToolCall{call("c_done", "done"), call("c_never", "never"), call("c_lookup", "lookup"), call("c_send", "send_email")}}
	result := &parley.Message{ID: parley.NewID(), Role: parley.RoleTool, Content: parley.Text("done ran"), Name: "done", ToolCallID: "c_done", RunID: "run1", CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: now}
	if err := f.store.AppendMessages(ctx, f.sess, user, ask, result); err != nil {
		t.Fatal(err)
	}
	for id, st := range map[string]string{"c_done": parley.ToolCallDone, "c_lookup": parley.ToolCallStarted, "c_send": parley.ToolCallStarted} {
		if err := f.store.MarkToolCall(ctx, f.sess, "run1", id, "x", st, now); err != nil {
			t.Fatal(err)
		}
	}
	f.prov.steps = append(f.prov.steps, say("all settled"))

	res, err := f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "run1"}, f.record)
	if err != nil || res.FinishReason != parley.FinishStop {
		t.Fatalf("Resume: %+v %v", res, err)
	}
	if want := map[string]int{"never": 1, "lookup": 1}; len(calls) != 2 || calls["never"] != 1 || calls["lookup"] != 1 {
		t.Fatalf("tools run on resume: %v, want %v (done never again, send_email not twice)", calls, want)
	}
	h := f.history(t)
	if err := parley.CheckHistory(h); err != nil {
		t.Fatalf("history after resume: %v", err)
	}
	byCall := map[string]string{}
	for _, m := range h {
		if m.Role == parley.RoleTool {
			byCall[m.ToolCallID] = m.Content.String()
		}
	}
	if byCall["c_send"] != InterruptedText || byCall["c_never"] != "never ran" || byCall["c_lookup"] != "lookup ran" || byCall["c_done"] != "done ran" {
		t.Fatalf("results: %v", byCall)
	}
	if last := h[len(h)-1]; last.Role != parley.RoleAssistant || last.Content.String() != "all settled" {
		t.Fatalf("last message %+v, want the model's answer", last)
	}
	// The model saw every call answered.
	reqs := f.prov.requests()
	if len(reqs) != 1 || len(reqs[0].Messages) != 6 {
		t.Fatalf("model requests: %d, messages %d; want 1 request with user, assistant and 4 results", len(reqs), len(reqs[0].Messages))
	}
}

func TestResumeAfterTheAnswerOrBeforeIt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), CreatedAt: now}
	if err := f.store.AppendMessages(ctx, f.sess, user); err != nil {
		t.Fatal(err)
	}
	// Died during the model call: the model is asked again.
	f.prov.steps = append(f.prov.steps, say("hello"))
	res, err := f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "run1"}, f.record)
	if err != nil || res.FinishReason != parley.FinishStop || len(f.prov.requests()) != 1 {
		t.Fatalf("resume before the answer: %+v %v, %d model calls", res, err, len(f.prov.requests()))
	}
	// Died after storing its answer: nothing more to do but record the answer again (its record
	// may not have reached the event log), the same message, so that a client following the
	// display rule shows it, once, in place of the chunks streamed before the crash.
	f.mu.Lock()
	f.evs = nil
	f.mu.Unlock()
	res, err = f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "run1"}, f.record)
	h := f.history(t)
	if err != nil || res.FinishReason != parley.FinishStop || len(f.prov.requests()) != 1 || len(h) != 2 {
		t.Fatalf("resume after the answer: %+v %v, %d model calls, %d messages", res, err, len(f.prov.requests()), len(h))
	}
	f.mu.Lock()
	evs := f.evs
	f.mu.Unlock()
	if len(evs) != 1 || evs[0].Type != parley.EventRecord || evs[0].Message.ID != h[1].ID || evs[0].Message.Content.String() != "hello" {
		t.Fatalf("events of a resume after the answer: %+v, want the answer's record", evs)
	}
}

// A run that died after storing its failed turn ended with that failure; a retry that died before
// storing anything answers the failed turn's question again.
func TestResumeAfterAFailedTurn(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: "run1", CreatedAt: now}
	failed := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("hel"), RunID: "run1",
		Error: parley.ECUpstream, CreatedAt: now}
	if err := f.store.AppendMessages(ctx, f.sess, user, failed); err != nil {
		t.Fatal(err)
	}
	_, err := f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "run1"}, f.record)
	if parley.CodeOf(err) != parley.ECUpstream || len(f.prov.requests()) != 0 {
		t.Fatalf("resume of the failed run: %v, %d model calls", err, len(f.prov.requests()))
	}
	f.prov.steps = append(f.prov.steps, say("hello"))
	res, err := f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "retry1"}, f.record)
	if err != nil || res.FinishReason != parley.FinishStop || len(f.prov.requests()) != 1 {
		t.Fatalf("resume of the retry: %+v %v, %d model calls", res, err, len(f.prov.requests()))
	}
	if sent := f.prov.requests()[0].Messages; len(sent) != 1 || sent[0].Content.String() != "hi" {
		t.Fatalf("the retry sent %+v", sent)
	}
}

// A run that its old instance stopped before the model's first word (it lost the run's lease) left
// an empty turn marked canceled: the instance that took the run over goes on and answers.
func TestResumeAfterItsOwnStoppedCall(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: "run1", CreatedAt: now}
	stopped := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(""), RunID: "run1",
		Error: parley.ECCanceled, CreatedAt: now}
	if err := f.store.AppendMessages(ctx, f.sess, user, stopped); err != nil {
		t.Fatal(err)
	}
	f.prov.steps = append(f.prov.steps, say("hello"))
	res, err := f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "run1"}, f.record)
	if err != nil || res.FinishReason != parley.FinishStop || len(f.prov.requests()) != 1 {
		t.Fatalf("resume after a stopped call: %+v %v, %d model calls", res, err, len(f.prov.requests()))
	}
	if sent := f.prov.requests()[0].Messages; len(sent) != 1 || sent[0].Content.String() != "hi" {
		t.Fatalf("the resumed run sent %+v", sent)
	}
}

func TestInterruptAnswersOpenCallsWithoutRunningThem(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var mu sync.Mutex
	calls := map[string]int{}
	f.counted(t, "lookup", true, calls, &mu)
	now := time.Now().UTC().Truncate(time.Microsecond)
	ask := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, CreatedAt: now,
		ToolCalls: []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "lookup", Arguments: "{}"}}}}
	if err := f.store.AppendMessages(ctx, f.sess, &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: now}, ask); err != nil {
		t.Fatal(err)
	}
	msgs, err := f.agent(nil).Interrupt(ctx, Input{SessionID: f.sess, RunID: "run1"})
	if err != nil || len(msgs) != 1 || msgs[0].ToolCallID != "c1" || msgs[0].Content.String() != InterruptedText || calls["lookup"] != 0 {
		t.Fatalf("Interrupt: %v %v, tool ran %d times", msgs, err, calls["lookup"])
	}
	if err := parley.CheckHistory(f.history(t)); err != nil {
		t.Fatal(err)
	}
}

// A regeneration whose process died before it stored anything goes on from the question it
// answers again: the active leaf is that question (chat.Service.Regenerate set it), so the model
// is not sent the old answer, and the new answer is its sibling.
func TestResumeOfARegenerationAnswersOnItsBranch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	q := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q"), RunID: "run1", CreatedAt: now}
	old := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("old"), RunID: "run1", CreatedAt: now}
	if err := f.store.AppendMessages(ctx, f.sess, q, old); err != nil {
		t.Fatal(err)
	}
	if err := f.store.SetLeaf(ctx, f.sess, q.ID); err != nil {
		t.Fatal(err)
	}
	f.prov.steps = append(f.prov.steps, say("new"))
	res, err := f.agent(nil).Resume(ctx, Input{SessionID: f.sess, RunID: "run2"}, f.record)
	if err != nil || res.FinishReason != parley.FinishStop || res.Final == nil || res.Final.ParentID != q.ID {
		t.Fatalf("Resume: %+v %v", res, err)
	}
	if h := f.history(t); len(h) != 2 || h[1].Content.String() != "new" {
		t.Fatalf("active branch after the resume: %+v", h)
	}
	reqs := f.prov.requests()
	if len(reqs) != 1 || len(reqs[0].Messages) != 1 || reqs[0].Messages[0].Content.String() != "q" {
		t.Fatalf("the model was sent %+v, want the question alone", reqs)
	}
	_, nodes, _ := f.store.Tree(ctx, f.sess)
	if len(nodes) != 3 || nodes[2].ParentID != q.ID {
		t.Fatalf("tree: %+v", nodes)
	}
}
