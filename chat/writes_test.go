package chat

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// countingStore counts the durable writes a chat makes, by kind.
type countingStore struct {
	*sqlite.Store
	mu     sync.Mutex
	writes []string
	// failBegin makes BeginRun fail (after nothing was stored).
	failBegin bool
}

func (c *countingStore) count(kind string) {
	c.mu.Lock()
	c.writes = append(c.writes, kind)
	c.mu.Unlock()
}

func (c *countingStore) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.writes...)
}

func (c *countingStore) CreateSession(ctx context.Context, s *parley.Session) error {
	c.count("CreateSession")
	return c.Store.CreateSession(ctx, s)
}
func (c *countingStore) AppendMessages(ctx context.Context, id string, msgs ...*parley.Message) error {
	c.count("AppendMessages")
	return c.Store.AppendMessages(ctx, id, msgs...)
}
func (c *countingStore) ReserveEventSeqs(ctx context.Context, id string, n int64) (int64, error) {
	c.count("ReserveEventSeqs")
	return c.Store.ReserveEventSeqs(ctx, id, n)
}
func (c *countingStore) ReleaseEventSeqs(ctx context.Context, id string, limit, last int64) error {
	c.count("ReleaseEventSeqs")
	return c.Store.ReleaseEventSeqs(ctx, id, limit, last)
}
func (c *countingStore) CreateRun(ctx context.Context, r *parley.RunRecord) error {
	c.count("CreateRun")
	return c.Store.CreateRun(ctx, r)
}
func (c *countingStore) EndRun(ctx context.Context, id, instance, finish string, at time.Time) error {
	c.count("EndRun")
	return c.Store.EndRun(ctx, id, instance, finish, at)
}
func (c *countingStore) BeginRun(ctx context.Context, b *parley.RunBegin) (int64, error) {
	c.count("BeginRun")
	if c.failBegin {
		return 0, parley.Errorf(parley.ECUnavailable, "the store is read-only")
	}
	return c.Store.BeginRun(ctx, b)
}
func (c *countingStore) SetLeaf(ctx context.Context, id, messageID string) error {
	c.count("SetLeaf")
	return c.Store.SetLeaf(ctx, id, messageID)
}
func (c *countingStore) FinishRun(ctx context.Context, f parley.RunFinish) error {
	c.count("FinishRun")
	return c.Store.FinishRun(ctx, f)
}
func (c *countingStore) AppendEvents(ctx context.Context, id string, at time.Time, evs []parley.Event) error {
	c.count("AppendEvents")
	return c.Store.AppendEvents(ctx, id, at, evs)
}

// modelAgent stands for the agent loop: at its model call it notes the writes made so far and
// whether the user's message is stored, then stores its answer as the loop does.
type modelAgent struct {
	st      *countingStore
	before  chan []string
	visible chan bool
}

func (a modelAgent) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	// A new session's model call starts while its beginning is written (runs.Manager.Launch):
	// like the agent, this one stores nothing before that write is durable.
	if in.Begun != nil {
		if err := in.Begun(); err != nil {
			return nil, err
		}
	}
	// The run's event writer stores its events beside the run, without delaying it: the writes
	// the chat waits for are the others.
	var waited []string
	for _, w := range a.st.snapshot() {
		if w != "AppendEvents" {
			waited = append(waited, w)
		}
	}
	a.before <- waited
	h, err := a.st.Store.History(ctx, in.SessionID)
	a.visible <- err == nil && len(h) == 1 && h[0].Role == parley.RoleUser && h[0].RunID == in.RunID
	answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("hi"), RunID: in.RunID, CreatedAt: time.Now().UTC()}
	if err := a.st.AppendMessages(ctx, in.SessionID, answer); err != nil {
		return nil, err
	}
	emit(parley.Event{Type: parley.EventRecord, Message: answer})
	return &agent.Result{FinishReason: parley.FinishStop}, nil
}

func newCountingChat(t *testing.T) (*Service, *countingStore, modelAgent) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cs := &countingStore{Store: st}
	mgr := runs.NewManager(runs.Options{Events: cs, Runs: cs, Instance: "i1"})
	t.Cleanup(func() { mgr.Shutdown(context.Background()) })
	if !mgr.OneWrite() {
		t.Fatal("a manager on a RunBeginner store does not write a run's beginning in one write")
	}
	a := modelAgent{st: cs, before: make(chan []string, 1), visible: make(chan bool, 1)}
	return &Service{Store: cs, Runs: mgr, Agent: a, DefaultModel: "mock"}, cs, a
}

// A chat of a new session makes one durable write before its model call (the session, the run's
// event numbers and record, the user's message), and one to end its run.
func TestAChatWritesOnceBeforeTheModelCall(t *testing.T) {
	s, cs, a := newCountingChat(t)
	started, err := s.Send(context.Background(), "alice", Request{Message: "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started.Run.Done():
	case <-time.After(time.Minute):
		t.Fatal("the run did not end")
	}
	before := <-a.before
	if len(before) != 1 || before[0] != "BeginRun" {
		t.Errorf("writes before the model call: %v, want [BeginRun]", before)
	}
	if !<-a.visible {
		t.Error("the user's message was not stored, with its run's id, before the model call")
	}
	if started.UserMessage.Seq != 1 || started.UserMessage.RunID != started.Run.ID {
		t.Errorf("the user's message: seq %d, run %q", started.UserMessage.Seq, started.UserMessage.RunID)
	}
	after := cs.snapshot()[1:]
	counts := map[string]int{}
	for _, w := range after {
		counts[w]++
	}
	// The answer (the agent's), the run's end with its unused numbers, its events.
	if counts["FinishRun"] != 1 || counts["AppendMessages"] != 1 || counts["EndRun"]+counts["ReleaseEventSeqs"]+counts["CreateRun"]+counts["ReserveEventSeqs"] != 0 {
		t.Errorf("writes after the model call: %v", after)
	}
	// The run is over in the store and its events are there.
	if _, err := cs.Store.ActiveRun(context.Background(), started.Session.ID); parley.CodeOf(err) != parley.ECNotFound {
		t.Errorf("the run is still running in the store: %v", err)
	}
	evs, err := cs.Store.ListEvents(context.Background(), started.Session.ID, 0, 100)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != parley.EventDone {
		t.Errorf("stored events: %d, %v", len(evs), err)
	}
	// The next chat of the session: again one write before its model call, after the last
	// event's number.
	cs.mu.Lock()
	cs.writes = nil
	cs.mu.Unlock()
	next, err := s.Send(context.Background(), "alice", Request{Message: "Again", SessionID: started.Session.ID})
	if err != nil {
		t.Fatal(err)
	}
	<-next.Run.Done()
	if before := <-a.before; len(before) != 1 || before[0] != "BeginRun" {
		t.Errorf("writes before the second model call: %v, want [BeginRun]", before)
	}
	<-a.visible
	if next.Run.FirstSeq() != evs[len(evs)-1].Seq+1 {
		t.Errorf("the second run starts at %d, want %d", next.Run.FirstSeq(), evs[len(evs)-1].Seq+1)
	}
}

// A new chat whose one write fails leaves nothing behind.
func TestAFailedBeginLeavesNoSession(t *testing.T) {
	s, cs, _ := newCountingChat(t)
	cs.failBegin = true
	if _, err := s.Send(context.Background(), "alice", Request{Message: "Hello"}); parley.CodeOf(err) != parley.ECUnavailable {
		t.Fatalf("a chat whose write fails: %v", err)
	}
	list, _, err := cs.Store.ListSessions(context.Background(), "alice", parley.Page{Limit: 10})
	if err != nil || len(list) != 0 {
		t.Fatalf("sessions after the failed chat: %d, %v", len(list), err)
	}
	if _, ok := s.Runs.Active(""); ok {
		t.Fatal("a run is active")
	}
}

// When Send returns, the run's stream holds its start and the user's message together: a
// client's stream of the chat sends them in one write, not the start alone and the question a
// moment later.
func TestSendReturnsWithTheQuestionInTheStream(t *testing.T) {
	s, _, a := newCountingChat(t)
	for i := range 20 {
		started, err := s.Send(context.Background(), "alice", Request{Message: "Hello"})
		if err != nil {
			t.Fatal(err)
		}
		sub := s.Runs.Subscribe(context.Background(), started.Session.ID, started.Run.FirstSeq()-1)
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) < 2 || frames[0].Type != parley.EventStart || frames[1].Type != parley.EventRecord || frames[1].Event().Message == nil || frames[1].Event().Message.ID != started.UserMessage.ID {
			var got []parley.EventType
			for _, f := range frames {
				got = append(got, f.Type)
			}
			t.Fatalf("chat %d: the stream when Send returned: %v, want start and the question", i, got)
		}
		sub.Close()
		<-a.before
		<-a.visible
		<-started.Run.Done()
	}
}

// A regeneration makes one durable write before its model call: the run's record with the
// session's leaf at the question, so that no crash leaves the run to answer after the old answer.
func TestARegenerationWritesOnceBeforeTheModelCall(t *testing.T) {
	s, cs, a := newCountingChat(t)
	ctx := context.Background()
	started, err := s.Send(ctx, "alice", Request{Message: "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	<-started.Run.Done()
	<-a.before
	<-a.visible
	h, err := cs.Store.History(ctx, started.Session.ID)
	if err != nil || len(h) != 2 {
		t.Fatalf("history: %d messages, %v", len(h), err)
	}
	cs.mu.Lock()
	cs.writes = nil
	cs.mu.Unlock()
	re, err := s.Regenerate(ctx, "alice", started.Session.ID, h[1].ID, RetryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-re.Run.Done()
	if before := <-a.before; len(before) != 1 || before[0] != "BeginRun" {
		t.Errorf("writes before the regeneration's model call: %v, want [BeginRun]", before)
	}
	<-a.visible
	for _, w := range cs.snapshot() {
		if w == "SetLeaf" {
			t.Errorf("the regeneration set the leaf in a write of its own: %v", cs.snapshot())
		}
	}
	_, nodes, err := cs.Store.Tree(ctx, started.Session.ID)
	if err != nil || len(nodes) != 3 || nodes[2].ParentID != h[0].ID {
		t.Fatalf("the new answer is no sibling of the old one: %+v, %v", nodes, err)
	}
}
