package agent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/tools"
)

func askEverything(f *fixture) func(*Config) {
	policy, _ := approval.Parse("*=ask")
	return func(c *Config) { c.Approvals = &approval.Resolver{Server: policy, Store: f.store} }
}

// A run taken over after its calls were decided (the process died while they waited, and the
// owner answered before another took the run) applies the stored decisions without waiting: the
// approved call runs with the edited arguments, the denied one is answered with the reason.
func TestResumeAppliesStoredDecisions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var mu sync.Mutex
	var ranWith []string
	if err := f.reg.Register(&tools.Func{Def: parley.ToolSpec{Name: "rm", Parameters: json.RawMessage(`{"type":"object"}`)},
		Fn: func(_ context.Context, args json.RawMessage) (*parley.ToolResult, error) {
			mu.Lock()
			ranWith = append(ranWith, string(args))
			mu.Unlock()
			return &parley.ToolResult{Content: parley.Text("removed")}, nil
		}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	call := func(id string) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: "rm", Arguments: `{"path":"/"}`}}
	}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("clean up"), CreatedAt: now}
	ask := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, RunID: "run1", CreatedAt: now, ToolCalls: []parley.ToolCall{call("c_ok"), call("c_no")}}
	if err := f.store.AppendMessages(ctx, f.sess, user, ask); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c_ok", "c_no"} {
		if _, err := f.store.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: f.sess, CallID: id, RunID: "run1", Tool: "rm",
			Arguments: `{"path":"/"}`, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.DecideApproval(ctx, f.sess, "c_ok", parley.ApprovalDecision{State: parley.ApprovalApproved, RunArguments: `{"path":"/tmp"}`, Edited: true, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.DecideApproval(ctx, f.sess, "c_no", parley.ApprovalDecision{State: parley.ApprovalDenied, Answer: "never /", At: now}); err != nil {
		t.Fatal(err)
	}
	f.prov.steps = append(f.prov.steps, say("done"))
	in := Input{SessionID: f.sess, RunID: "run1", AwaitApproval: func(context.Context, time.Time, func(context.Context) (bool, error)) error {
		t.Error("the run waited for calls already decided")
		return nil
	}}
	res, err := f.agent(askEverything(f)).Resume(ctx, in, f.record)
	if err != nil || res.FinishReason != parley.FinishStop {
		t.Fatalf("Resume: %+v %v", res, err)
	}
	if len(ranWith) != 1 || ranWith[0] != `{"path":"/tmp"}` {
		t.Fatalf("rm ran with %v, want once with the edit", ranWith)
	}
	results := map[string]string{}
	h := f.history(t)
	for _, m := range h {
		if m.Role == parley.RoleTool {
			results[m.ToolCallID] = m.Content.String()
		}
	}
	if results["c_ok"] != editedNote(`{"path":"/tmp"}`)+"removed" || results["c_no"] != "error: not run: the user denied this call of rm, saying: never /" {
		t.Fatalf("results: %q", results)
	}
	if h[1].ToolCalls[0].Function.Arguments != `{"path":"/"}` {
		t.Fatalf("the model's call was changed: %+v", h[1].ToolCalls[0])
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	if got := f.types(); strings.Count(got, string(parley.EventApprovalResolved)) != 2 || strings.Contains(got, string(parley.EventApprovalRequired)) {
		t.Fatalf("events: %s", got)
	}
}

// A run stopped while its call waits closes the call (the history stays valid) and denies the
// pending approval, so that no client shows it waiting any more.
func TestStoppedWhileWaitingDeniesTheApproval(t *testing.T) {
	f := newFixture(t)
	ran := 0
	f.tool(t, "rm", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		ran++
		return &parley.ToolResult{Content: parley.Text("x")}, nil
	})
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"rm", `{}`}))
	ctx, cancel := context.WithCancel(context.Background())
	a := f.agent(askEverything(f))
	u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: time.Now().UTC()}
	if err := f.store.AppendMessages(ctx, f.sess, u); err != nil {
		t.Fatal(err)
	}
	in := Input{SessionID: f.sess, RunID: "run1", AwaitApproval: func(ctx context.Context, _ time.Time, check func(context.Context) (bool, error)) error {
		if over, err := check(ctx); over || err != nil {
			t.Errorf("check: %v %v before any decision", over, err)
		}
		cancel()
		return ctx.Err()
	}}
	_, err := a.Run(ctx, in, f.record)
	if parley.CodeOf(err) != parley.ECCanceled {
		t.Fatalf("Run: %v, want canceled", err)
	}
	list, _ := f.store.ListApprovals(context.Background(), f.sess, false)
	if len(list) != 1 || list[0].State != parley.ApprovalDenied || list[0].Answer != stoppedAnswer || ran != 0 {
		t.Fatalf("approvals %+v, ran %d", list, ran)
	}
	if err := parley.CheckHistory(f.history(t)); err != nil {
		t.Fatal(err)
	}
	if got := f.types(); !strings.Contains(got, "approval_required") || !strings.Contains(got, "approval_resolved") {
		t.Fatalf("events: %s", got)
	}
}

// Without a way to wait (the OpenAI-compatible API's stateless requests), a call that asks is
// refused with a text saying why; nothing is stored as an approval.
func TestCannotAskRefuses(t *testing.T) {
	f := newFixture(t)
	ran := 0
	f.tool(t, "rm", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		ran++
		return &parley.ToolResult{Content: parley.Text("x")}, nil
	})
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"rm", `{}`}), say("fine"))
	if _, err := f.run(t, context.Background(), f.agent(askEverything(f)), "go", nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range f.history(t) {
		if m.Role == parley.RoleTool && m.Content.String() != "error: not run: rm needs a person's approval, which cannot be asked for in this request" {
			t.Fatalf("result: %q", m.Content.String())
		}
	}
	if list, _ := f.store.ListApprovals(context.Background(), f.sess, false); len(list) != 0 || ran != 0 {
		t.Fatalf("approvals %+v, ran %d", list, ran)
	}
}

// noSessions is a Resolver store that knows no session, as the store knows none of a stateless
// request's conversation.
type noSessions struct{ parley.Store }

func (noSessions) GetSession(context.Context, string) (*parley.Session, error) {
	return nil, parley.ErrNotFound
}

// A conversation held outside the store (WithStore: the stateless OpenAI API) is decided by the
// server's policy alone: no session is looked up, a call that runs runs, one that asks is refused.
func TestSessionlessUsesTheServerPolicy(t *testing.T) {
	f := newFixture(t)
	ran := 0
	f.tool(t, "rm", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		ran++
		return &parley.ToolResult{Content: parley.Text("x")}, nil
	})
	f.tool(t, "ls", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
		ran++
		return &parley.ToolResult{Content: parley.Text("x")}, nil
	})
	f.prov.steps = append(f.prov.steps, callTools("", [2]string{"rm", `{}`}, [2]string{"ls", `{}`}), say("fine"))
	policy, _ := approval.Parse("rm=ask")
	a := f.agent(func(c *Config) { c.Approvals = &approval.Resolver{Server: policy, Store: noSessions{f.store}} }).WithStore(f.store)
	if _, err := f.run(t, context.Background(), a, "go", nil); err != nil {
		t.Fatal(err)
	}
	results := map[string]string{}
	for _, m := range f.history(t) {
		if m.Role == parley.RoleTool {
			results[m.Name] = m.Content.String()
		}
	}
	if ran != 1 || results["ls"] != "x" || !strings.Contains(results["rm"], "cannot be asked for") {
		t.Fatalf("ran %d, results %q", ran, results)
	}
}

// A run taken over while its call waits finds the pending approval its first process stored.
// It sends approval_required again only when the session's stored stream does not hold it (it
// was lost with that process): a client never sees the request twice.
func TestTakeoverAnnouncesAPendingApprovalOnce(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(map[bool]string{true: "stored", false: "lost"}[stored], func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			f.tool(t, "rm", func(context.Context, json.RawMessage) (*parley.ToolResult, error) {
				return &parley.ToolResult{Content: parley.Text("removed")}, nil
			})
			before := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
			first, err := f.store.ReserveEventSeqs(ctx, f.sess, 100)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.store.CreateRun(ctx, &parley.RunRecord{ID: "run1", SessionID: f.sess, Owner: "u", Instance: "i",
				FirstSeq: first, LeaseUntil: before.Add(time.Hour), CreatedAt: before}); err != nil {
				t.Fatal(err)
			}
			call := parley.ToolCall{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "rm", Arguments: `{}`}}
			user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("go"), CreatedAt: before}
			ask := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, RunID: "run1", CreatedAt: before, ToolCalls: []parley.ToolCall{call}}
			if err := f.store.AppendMessages(ctx, f.sess, user, ask); err != nil {
				t.Fatal(err)
			}
			rec, err := f.store.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: f.sess, CallID: "c1", RunID: "run1", Tool: "rm",
				Arguments: `{}`, CreatedAt: before, ExpiresAt: before.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			// The first process's events: chunks, then (when stored) the request.
			var evs []parley.Event
			for i := range 300 { // more than one page of announced's reads
				evs = append(evs, parley.Event{Seq: first + int64(i), Type: parley.EventChunk, SessionID: f.sess, RunID: "run1", Content: "x"})
			}
			if stored {
				evs = append(evs, parley.Event{Seq: first + 300, Type: parley.EventApprovalRequired, SessionID: f.sess, RunID: "run1", Approval: rec.Required()})
			}
			if err := f.store.AppendEvents(ctx, f.sess, before, evs); err != nil {
				t.Fatal(err)
			}
			f.prov.steps = append(f.prov.steps, say("done"))
			in := Input{SessionID: f.sess, RunID: "run1", AwaitApproval: func(ctx context.Context, _ time.Time, check func(context.Context) (bool, error)) error {
				if _, err := f.store.DecideApproval(ctx, f.sess, "c1", parley.ApprovalDecision{State: parley.ApprovalApproved, At: time.Now().UTC()}); err != nil {
					return err
				}
				over, err := check(ctx)
				if !over && err == nil {
					t.Error("check: not over after the decision")
				}
				return err
			}}
			res, err := f.agent(askEverything(f)).Resume(ctx, in, f.record)
			if err != nil || res.FinishReason != parley.FinishStop {
				t.Fatalf("Resume: %+v %v", res, err)
			}
			want := 0
			if !stored {
				want = 1
			}
			if got := f.types(); strings.Count(got, string(parley.EventApprovalRequired)) != want || strings.Count(got, string(parley.EventApprovalResolved)) != 1 {
				t.Fatalf("events: %s; want approval_required %d times and approval_resolved once", got, want)
			}
		})
	}
}
