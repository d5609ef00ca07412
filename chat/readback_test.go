package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/historycache"
	"github.com/parleyhq/parley/store/sqlite"
)

// readingStore counts the reads of a session and of its history.
type readingStore struct {
	*sqlite.Store
	mu    sync.Mutex
	reads map[string]int
}

func (r *readingStore) count(kind string) {
	r.mu.Lock()
	r.reads[kind]++
	r.mu.Unlock()
}

func (r *readingStore) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.reads {
		out[k] = v
	}
	return out
}

func (r *readingStore) GetSession(ctx context.Context, id string) (*parley.Session, error) {
	r.count("GetSession")
	return r.Store.GetSession(ctx, id)
}
func (r *readingStore) ModelHistory(ctx context.Context, id string) ([]parley.Message, error) {
	r.count("ModelHistory")
	return r.Store.ModelHistory(ctx, id)
}
func (r *readingStore) ModelBranch(ctx context.Context, id, leaf string) ([]parley.Message, parley.BranchTip, error) {
	r.count("ModelBranch")
	return r.Store.ModelBranch(ctx, id, leaf)
}
func (r *readingStore) ListBranch(ctx context.Context, id, leaf string, after int64, limit int) ([]parley.Message, parley.BranchTip, error) {
	r.count("ListBranch")
	return r.Store.ListBranch(ctx, id, leaf, after, limit)
}

// echo answers every call with the text of the last message it was sent, noting what it was sent.
type echo struct {
	mu   sync.Mutex
	sent [][]parley.Message
}

func (e *echo) Stream(_ context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	e.mu.Lock()
	e.sent = append(e.sent, append([]parley.Message(nil), req.Messages...))
	e.mu.Unlock()
	return &echoStream{text: req.Messages[len(req.Messages)-1].Content.String()}, nil
}

type echoStream struct {
	text string
	done bool
}

func (s *echoStream) Next() (parley.StreamEvent, error) {
	if s.done {
		return parley.StreamEvent{}, io.EOF
	}
	s.done = true
	return parley.StreamEvent{Type: parley.StreamContent, Content: s.text}, nil
}
func (s *echoStream) Close() error { return nil }

// The agent is given what the chat knows: a new session's chat reads back neither the session
// (for its project's prompt) nor the history it just wrote, and the session's next chat finds
// its history in the cache, extended by the writes, without reading it.
func TestAChatDoesNotReadBackWhatItWrote(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rs := &readingStore{Store: st, reads: map[string]int{}}
	mgr := runs.NewManager(runs.Options{Events: rs, Runs: rs, Instance: "i1"})
	t.Cleanup(func() { mgr.Shutdown(context.Background()) })
	model := &echo{}
	cache := historycache.New(rs, 1<<20)
	var prompts []*parley.Session
	var pmu sync.Mutex
	ag := agent.New(agent.Config{Store: rs, History: cache,
		Resolve: func(string) (parley.Provider, string, error) { return model, "m", nil },
		SessionPrompt: func(ctx context.Context, id string, sess *parley.Session) (string, error) {
			pmu.Lock()
			prompts = append(prompts, sess)
			pmu.Unlock()
			if sess == nil {
				if _, err := rs.GetSession(ctx, id); err != nil {
					return "", err
				}
			}
			return "", nil
		}})
	launched := &noting{Runner: ag}
	s := &Service{Store: rs, Runs: mgr, Agent: launched, History: cache, DefaultModel: "m"}
	wait := func(st *Started) {
		t.Helper()
		select {
		case <-st.Run.Done():
		case <-time.After(time.Minute):
			t.Fatal("the run did not end")
		}
		if finish, err := st.Run.Result(); finish != parley.FinishStop || err != nil {
			t.Fatalf("the run: %q %v", finish, err)
		}
	}

	first, err := s.Send(context.Background(), "alice", Request{Message: "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	wait(first)
	if reads := rs.snapshot(); len(reads) != 0 {
		t.Errorf("a new session's chat read %v back", reads)
	}
	if len(prompts) != 1 || prompts[0] == nil || prompts[0].ID != first.Session.ID || prompts[0].Owner != "alice" {
		t.Errorf("the session given to the prompt: %+v", prompts)
	}

	second, err := s.Send(context.Background(), "alice", Request{Message: "Again", SessionID: first.Session.ID})
	if err != nil {
		t.Fatal(err)
	}
	wait(second)
	// The chat reads the session (its owner, once); the history is the cached view, extended
	// by the answer and the new message as they were written: nothing of it is read.
	if reads := rs.snapshot(); reads["GetSession"] != 1 || len(reads) != 1 {
		t.Errorf("the second chat read %v, want the session once", reads)
	}
	// Both model calls started while their chat's beginning was being written.
	if got := launched.overlapped(); len(got) != 2 || !got[0] || !got[1] {
		t.Errorf("model calls started before the write committed: %v, want both", got)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.sent) != 2 {
		t.Fatalf("model calls: %d", len(model.sent))
	}
	var got []string
	for _, m := range model.sent[1] {
		got = append(got, string(m.Role)+":"+m.Content.String())
	}
	if want := []string{"user:Hello", "assistant:Hello", "user:Again"}; !slices.Equal(got, want) {
		t.Fatalf("the second call was sent %v, want %v", got, want)
	}
	// What the cache holds is what the store holds.
	stored, err := st.ModelHistory(context.Background(), first.Session.ID)
	if err != nil {
		t.Fatal(err)
	}
	cached, err := cache.ModelHistory(context.Background(), first.Session.ID)
	if err != nil || len(cached) != len(stored) || len(stored) != 4 {
		t.Fatalf("cached %d, stored %d messages: %v", len(cached), len(stored), err)
	}
	for i := range stored {
		if cached[i].Role != stored[i].Role || cached[i].Content.String() != stored[i].Content.String() {
			t.Fatalf("message %d: cached %+v, stored %+v", i, cached[i], stored[i])
		}
	}
}

// Two instances sharing a store, each with its cache, take turns in one session: each model call
// is sent exactly the branch the store holds up to the new message, though half of the history
// was written by the other instance behind each cache's back.
func TestCachedHistoryAcrossInstances(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	type instance struct {
		s     *Service
		model *echo
	}
	var insts []instance
	for _, name := range []string{"a", "b"} {
		mgr := runs.NewManager(runs.Options{Events: st, Runs: st, Instance: name})
		t.Cleanup(func() { mgr.Shutdown(context.Background()) })
		model := &echo{}
		cache := historycache.New(st, 1<<20)
		ag := agent.New(agent.Config{Store: st, History: cache,
			Resolve: func(string) (parley.Provider, string, error) { return model, "m", nil }})
		insts = append(insts, instance{&Service{Store: st, Runs: mgr, Agent: ag, History: cache, DefaultModel: "m"}, model})
	}
	session := ""
	for i := range 8 {
		in := insts[i%2]
		if i == 5 {
			in = insts[0] // twice in a row on one instance too
		}
		started, err := in.s.Send(context.Background(), "alice", Request{Message: fmt.Sprintf("q%d", i), SessionID: session})
		if err != nil {
			t.Fatal(err)
		}
		session = started.Session.ID
		<-started.Run.Done()
		if finish, err := started.Run.Result(); finish != parley.FinishStop || err != nil {
			t.Fatalf("chat %d: %q %v", i, finish, err)
		}
		stored, err := st.ModelHistory(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		in.model.mu.Lock()
		sent := in.model.sent[len(in.model.sent)-1]
		in.model.mu.Unlock()
		if len(stored) != 2*(i+1) || js(sent) != js(stored[:len(stored)-1]) {
			t.Fatalf("chat %d: the model was sent %s\nthe store holds %s", i, js(sent), js(stored))
		}
	}
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

// noting is a Runner that notes whether each run was started before its beginning was durable.
type noting struct {
	Runner
	mu   sync.Mutex
	runs []bool
}

func (n *noting) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	n.mu.Lock()
	n.runs = append(n.runs, in.Begun != nil)
	n.mu.Unlock()
	return n.Runner.Run(ctx, in, emit)
}

func (n *noting) overlapped() []bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]bool(nil), n.runs...)
}
