package chat

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// canWait answers as answeringAgent does and notes whether each run could wait for an approval.
type canWait struct {
	answeringAgent
	mu    sync.Mutex
	waits []bool
}

func (a *canWait) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	a.mu.Lock()
	a.waits = append(a.waits, in.AwaitApproval != nil || in.Run != nil)
	a.mu.Unlock()
	return a.answeringAgent.Run(ctx, in, emit)
}

// Every way a run starts (a message, an edit, a regeneration) lets it wait for tool approval: a
// run that could not would refuse every call that asks.
func TestEveryRunCanWaitForApproval(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(ctx)
	ag := &canWait{answeringAgent: answeringAgent{st}}
	s := &Service{Store: st, Runs: mgr, Agent: ag, DefaultModel: "mock/a"}
	first, err := s.Send(ctx, "alice", Request{Message: "q1"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, first)
	sid := first.Session.ID
	h, _ := st.History(ctx, sid)
	ed, err := s.Edit(ctx, "alice", sid, h[0].ID, Request{Message: "q1 again"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, ed)
	h, _ = st.History(ctx, sid)
	re, err := s.Regenerate(ctx, "alice", sid, h[len(h)-1].ID, RetryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, re)
	if len(ag.waits) != 3 || !ag.waits[0] || !ag.waits[1] || !ag.waits[2] {
		t.Fatalf("runs that could wait: %v", ag.waits)
	}
}
