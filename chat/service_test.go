package chat

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

func TestTitle(t *testing.T) {
	for in, want := range map[string]string{
		"  What is 2+2?  ":          "What is 2+2?",
		"First line\nsecond line":   "First line",
		"":                          "New chat",
		"   \n  ":                   "New chat",
		strings.Repeat("é", 80):     strings.Repeat("é", 59) + "…",
		strings.Repeat("word ", 13): strings.TrimSpace(strings.Repeat("word ", 13)[:59]) + "…",
		// A title from a message holds nothing a name may not (parley.TextName).
		"a\tb\r\nc":         "a b",
		"\x1b[31mred\u202e": "[31mred",
		"\u2066\u2069":      "New chat",
	} {
		if got := Title(in); got != want {
			t.Errorf("Title(%q) = %q, want %q", in, got, want)
		}
	}
}

type nopAgent struct{}

func (nopAgent) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	return &agent.Result{FinishReason: parley.FinishStop}, nil
}

func TestSendStoresImagePartsAndDefaults(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(context.Background())
	s := &Service{Store: st, Runs: mgr, Agent: nopAgent{}, DefaultModel: "mock"}
	started, err := s.Send(context.Background(), "alice", Request{
		Message:       "What is in this picture?",
		BinaryContent: []parley.Part{{Type: "image_url", ImageURL: &parley.ImageURL{URL: "data:image/png;base64,iVBORw0KGgo="}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started.Run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end")
	}
	if !started.NewSession || started.Session.Title != "What is in this picture?" || started.Run.Model != "mock" {
		t.Fatalf("started: %+v model %q", started.Session, started.Run.Model)
	}
	h, _ := st.History(context.Background(), started.Session.ID)
	if len(h) != 1 || !h[0].Content.IsParts() || len(h[0].Content.Parts()) != 2 || h[0].Content.Parts()[1].ImageURL.URL == "" {
		t.Fatalf("stored user message: %+v", h)
	}
	// An image alone is a valid message; nothing at all is not.
	if _, err := s.Send(context.Background(), "alice", Request{SessionID: started.Session.ID,
		BinaryContent: []parley.Part{{Type: "image_url", ImageURL: &parley.ImageURL{URL: "https://example.com/a.png"}}}}); err != nil {
		t.Fatalf("image-only message: %v", err)
	}
	if _, err := s.Send(context.Background(), "alice", Request{Message: "  "}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("empty message: %v", err)
	}
}

// A model named as the client likes is run, and stored, under the full name ResolveModel gives;
// a name it refuses is the client's error.
func TestModelIsResolvedToItsFullName(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(context.Background())
	s := &Service{Store: st, Runs: mgr, Agent: nopAgent{}, DefaultModel: "openai/gpt-4o",
		ResolveModel: func(m string) (string, error) {
			if m == "gpt-4o" || m == "openai/gpt-4o" {
				return "openai/gpt-4o", nil
			}
			return "", parley.Errorf(parley.ECInvalid, "model: unknown model %q", m)
		}}
	started, err := s.Send(context.Background(), "alice", Request{Message: "hi", Model: "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	<-started.Run.Done()
	if started.Run.Model != "openai/gpt-4o" {
		t.Fatalf("run model %q", started.Run.Model)
	}
	if _, err := s.Send(context.Background(), "alice", Request{Message: "hi", Model: "nope"}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("unknown model: %v", err)
	}
}

type fakeRecovery struct {
	resumed, interrupted []agent.Input
}

func (f *fakeRecovery) Resume(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	f.resumed = append(f.resumed, in)
	return &agent.Result{FinishReason: parley.FinishStop}, nil
}

func (f *fakeRecovery) Interrupt(ctx context.Context, in agent.Input) ([]*parley.Message, error) {
	f.interrupted = append(f.interrupted, in)
	ok := false
	return []*parley.Message{{ID: "t1", Role: parley.RoleTool, ToolCallID: "c1", Content: parley.Text(agent.InterruptedText), Success: &ok}}, nil
}

// A run taken over goes on with its own request; one taken over too often is closed instead.
func TestRecoverResumesThenGivesUp(t *testing.T) {
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(context.Background())
	rec := &fakeRecovery{}
	s := &Service{Runs: mgr, Agent: nopAgent{}, Recovery: rec}
	r, err := mgr.Begin(context.Background(), runs.Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	record := parley.RunRecord{ID: "run1", SessionID: "s1", Owner: "alice", Model: "mock/echo", SelectedTools: []string{"calculator"}, Attempts: 1}
	var evs []parley.Event
	emit := func(ev parley.Event) { evs = append(evs, ev) }
	if finish, err := s.Recover(r, record)(context.Background(), emit); err != nil || finish != parley.FinishStop {
		t.Fatalf("first takeover: %q %v", finish, err)
	}
	if len(rec.resumed) != 1 || rec.resumed[0].RunID != "run1" || rec.resumed[0].User != "alice" || rec.resumed[0].Model != "mock/echo" ||
		len(rec.resumed[0].SelectedTools) != 1 || rec.resumed[0].Run == nil {
		t.Fatalf("resumed with %+v", rec.resumed)
	}
	record.Attempts = MaxRecoveries + 1
	if finish, err := s.Recover(r, record)(context.Background(), emit); err != nil || finish != parley.FinishInterrupted {
		t.Fatalf("takeover past the bound: %q %v", finish, err)
	}
	if len(rec.resumed) != 1 || len(rec.interrupted) != 1 || len(evs) != 1 || evs[0].Type != parley.EventToolResult {
		t.Fatalf("past the bound: resumed %d, interrupted %d, events %+v", len(rec.resumed), len(rec.interrupted), evs)
	}
}

// A retry answers with the model that failed, unless it is no longer offered (then the default),
// or with the model the request names.
func TestRetryPicksItsModel(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{})
	defer mgr.Shutdown(context.Background())
	offered := map[string]string{"a": "p/a", "p/a": "p/a", "p/b": "p/b", "p/def": "p/def"}
	s := &Service{Store: st, Runs: mgr, Agent: nopAgent{}, DefaultModel: "p/def",
		ResolveModel: func(m string) (string, error) {
			if full, ok := offered[m]; ok {
				return full, nil
			}
			return "", parley.Errorf(parley.ECInvalid, "model: unknown model %q", m)
		}}
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ failedWith, asked, want string }{
		{"p/b", "", "p/b"},
		{"gone/x", "", "p/def"},
		{"", "", "p/def"},
		{"p/b", "a", "p/a"},
	} {
		u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q"), CreatedAt: now}
		f := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(""), Model: tc.failedWith,
			Error: parley.ECUpstream, CreatedAt: now}
		if err := st.AppendMessages(ctx, sess.ID, u, f); err != nil {
			t.Fatal(err)
		}
		started, err := s.Retry(ctx, "alice", sess.ID, RetryRequest{Model: tc.asked})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		<-started.Run.Done()
		if started.Run.Model != tc.want || started.UserMessage.ID != u.ID {
			t.Fatalf("%+v: run model %q, answering %s", tc, started.Run.Model, started.UserMessage.ID)
		}
	}
	if _, err := s.Retry(ctx, "bob", sess.ID, RetryRequest{}); parley.CodeOf(err) != parley.ECForbidden {
		t.Fatalf("bob's retry: %v", err)
	}
	if _, err := s.Retry(ctx, "alice", sess.ID, RetryRequest{Model: "nope"}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("retry with an unknown model: %v", err)
	}
}

// blockingAgent runs until its test releases it.
type blockingAgent struct{ release chan struct{} }

func (a blockingAgent) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	select {
	case <-a.release:
	case <-ctx.Done():
	}
	return &agent.Result{FinishReason: parley.FinishStop}, nil
}

// failingAppend is a store whose AppendMessages fails.
type failingAppend struct{ parley.Store }

func (failingAppend) AppendMessages(context.Context, string, ...*parley.Message) error {
	return parley.Errorf(parley.ECUnavailable, "the store is read-only")
}

// A new chat refused after its session was made (the run budget taken meanwhile, the message not
// stored) leaves no session behind; a refused message in a new chat makes none.
func TestRefusedNewChatLeavesNoSession(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sessions := func() int {
		list, _, err := st.ListSessions(ctx, "alice", parley.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	mgr := runs.NewManager(runs.Options{MaxActive: 1})
	defer mgr.Shutdown(ctx)
	a := blockingAgent{release: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(a.release) }) }
	defer release() // before the manager's shutdown, which waits for the run
	s := &Service{Store: st, Runs: mgr, Agent: a, DefaultModel: "mock"}
	first, err := s.Send(ctx, "alice", Request{Message: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(ctx, "alice", Request{Message: "second"}); parley.CodeOf(err) != parley.ECUnavailable {
		t.Fatalf("a chat past the run budget: %v", err)
	}
	if n := sessions(); n != 1 {
		t.Fatalf("sessions after the refused chat: %d, want 1", n)
	}
	release()
	<-first.Run.Done()

	s.Store = failingAppend{st}
	if _, err := s.Send(ctx, "alice", Request{Message: "not stored"}); parley.CodeOf(err) != parley.ECUnavailable {
		t.Fatalf("a chat whose message is not stored: %v", err)
	}
	if _, err := s.Send(ctx, "alice", Request{Message: "bad\x00"}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("a NUL in a new chat's message: %v", err)
	}
	if n := sessions(); n != 1 {
		t.Fatalf("sessions after the refused chats: %d, want 1", n)
	}
}
