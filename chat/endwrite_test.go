package chat

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// answerer is a model that answers every call with the same chunks of text.
type answerer []string

func (a answerer) Stream(context.Context, *parley.ChatRequest) (parley.Stream, error) {
	return &chunkStream{chunks: a}, nil
}

type chunkStream struct {
	chunks []string
	i      int
}

func (s *chunkStream) Next() (parley.StreamEvent, error) {
	if s.i == len(s.chunks) {
		return parley.StreamEvent{}, io.EOF
	}
	s.i++
	return parley.StreamEvent{Type: parley.StreamContent, Content: s.chunks[s.i-1]}, nil
}

func (s *chunkStream) Close() error { return nil }

// gatedEnd is a store whose run ends (FinishRun) wait until the test lets them commit.
type gatedEnd struct {
	*sqlite.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gatedEnd) FinishRun(ctx context.Context, f parley.RunFinish) error {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.FinishRun(ctx, f)
}

// newAgentChat returns a chat service with the real agent loop on a SQLite store (wrapped by
// wrap, if set), whose runs write their events only with their end (FlushEvery is long), and a
// count of the store's transactions.
func newAgentChat(t *testing.T, wrap func(*sqlite.Store) parley.Store) (*Service, *runs.Manager, *sqlite.Store, func() int) {
	t.Helper()
	var mu sync.Mutex
	commits := 0
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"), sqlite.OnCommit(func(int, error) {
		mu.Lock()
		commits++
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var store parley.Store = st
	if wrap != nil {
		store = wrap(st)
	}
	es := store.(parley.EventStore)
	rs := store.(parley.RunStore)
	mgr := runs.NewManager(runs.Options{Events: es, Runs: rs, Instance: "i1", FlushEvery: time.Hour})
	t.Cleanup(func() { mgr.Shutdown(context.Background()) })
	ag := agent.New(agent.Config{Store: store, Resolve: func(string) (parley.Provider, string, error) {
		return answerer{"Hel", "lo ", "there"}, "m1", nil
	}})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return commits
	}
	return &Service{Store: store, Runs: mgr, Agent: ag, DefaultModel: "m1"}, mgr, st, count
}

// A simple chat (one model call, no tools) makes two transactions in all: one before its model
// call (session, run, event numbers, the user's message) and one after it (the answer, the
// run's events, its unused numbers and its end). Every event a reader saw is stored, byte for
// byte as it was sent.
func TestASimpleChatWritesOnceAfterTheModel(t *testing.T) {
	s, mgr, st, commits := newAgentChat(t, nil)
	for round, sessionID := 0, ""; round < 2; round++ {
		before := commits()
		started, err := s.Send(context.Background(), "alice", Request{Message: "Hello", SessionID: sessionID})
		if err != nil {
			t.Fatal(err)
		}
		sessionID = started.Session.ID
		var seen []*json.RawMessage
		for f, err := range mgr.After(context.Background(), sessionID, started.Run.FirstSeq()-1) {
			if err != nil {
				t.Fatal(err)
			}
			raw := json.RawMessage(f.JSON)
			seen = append(seen, &raw)
			if f.Type == parley.EventDone {
				break
			}
		}
		<-started.Run.Done()
		if n := commits() - before; n != 2 {
			t.Errorf("round %d: a simple chat made %d transactions, want 2 (one before the model call, one after)", round, n)
		}
		h, err := st.History(context.Background(), sessionID)
		if err != nil || len(h) != 2*(round+1) || h[len(h)-1].Content.String() != "Hello there" {
			t.Fatalf("round %d: history %d messages, %v", round, len(h), err)
		}
		stored, err := st.ListEvents(context.Background(), sessionID, started.Run.FirstSeq()-1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != len(seen) {
			t.Fatalf("round %d: %d events stored, %d seen", round, len(stored), len(seen))
		}
		for i := range stored {
			b, err := json.Marshal(&stored[i])
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(*seen[i]) {
				t.Errorf("round %d: event %d as stored:\n%s\nas seen:\n%s", round, i, b, *seen[i])
			}
		}
		last := stored[len(stored)-2]
		if last.Type != parley.EventRecord || last.Message == nil || last.Message.Seq != h[len(h)-1].Seq || last.Message.ParentID != h[len(h)-2].ID {
			t.Errorf("round %d: the answer's record event: %+v", round, last)
		}
	}
}

// The answer's record event and the done event reach a reader only once the run's end is
// durable: while its one write waits, a reader has the chunks but neither.
func TestTheAnswerIsSeenOnlyOnceStored(t *testing.T) {
	g := &gatedEnd{entered: make(chan struct{}, 1), release: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	s, mgr, st, _ := newAgentChat(t, func(st *sqlite.Store) parley.Store { g.Store = st; return g })
	t.Cleanup(release) // before the manager's shutdown, which waits for the run
	started, err := s.Send(context.Background(), "alice", Request{Message: "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal("the run did not end")
	}
	sub := mgr.Subscribe(context.Background(), started.Session.ID, started.Run.FirstSeq()-1)
	defer sub.Close()
	// Everything before the end is out: read up to the third chunk, the last of them.
	var types []parley.EventType
	for len(types) < 5 {
		select {
		case <-sub.Ready():
		case <-time.After(time.Minute):
			t.Fatalf("events seen: %v, and no more", types)
		}
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			types = append(types, f.Type)
		}
	}
	want := []parley.EventType{parley.EventStart, parley.EventRecord, parley.EventChunk, parley.EventChunk, parley.EventChunk}
	if !slices.Equal(types, want) {
		t.Fatalf("events seen while the end waits: %v, want %v", types, want)
	}
	select {
	case <-sub.Ready():
		frames, _ := sub.Next(context.Background())
		for _, f := range frames {
			t.Errorf("a %s event was seen before the run's end was stored", f.Type)
		}
	default:
	}
	if h, _ := st.History(context.Background(), started.Session.ID); len(h) != 1 {
		t.Fatalf("the answer was stored before the run's end: %d messages", len(h))
	}
	release()
	<-started.Run.Done()
	if h, _ := st.History(context.Background(), started.Session.ID); len(h) != 2 {
		t.Fatalf("after the run's end: %d messages, want 2", len(h))
	}
}

// failedEnd is a store whose run ends in one write (FinishRun) fail, storing nothing.
type failedEnd struct{ *sqlite.Store }

func (failedEnd) FinishRun(context.Context, parley.RunFinish) error {
	return parley.Errorf(parley.ECInvalid, "refused")
}

// When the run's end cannot be written in one write, it is written piece by piece, as with a
// store that cannot: the answer, the events, the numbers and the end are all stored.
func TestAFailedEndIsWrittenPieceByPiece(t *testing.T) {
	s, _, st, _ := newAgentChat(t, func(st *sqlite.Store) parley.Store { return failedEnd{st} })
	started, err := s.Send(context.Background(), "alice", Request{Message: "Hello"})
	if err != nil {
		t.Fatal(err)
	}
	<-started.Run.Done()
	if finish, err := started.Run.Result(); finish != parley.FinishStop || err != nil {
		t.Fatalf("the run finished %q, %v; want stop", finish, err)
	}
	h, err := st.History(context.Background(), started.Session.ID)
	if err != nil || len(h) != 2 || h[1].Content.String() != "Hello there" {
		t.Fatalf("history: %d messages, %v", len(h), err)
	}
	if _, err := st.ActiveRun(context.Background(), started.Session.ID); parley.CodeOf(err) != parley.ECNotFound {
		t.Fatalf("the run is still running in the store: %v", err)
	}
	evs, err := st.ListEvents(context.Background(), started.Session.ID, 0, 100)
	if err != nil || len(evs) < 3 {
		t.Fatalf("stored events: %d, %v", len(evs), err)
	}
	rec, done := evs[len(evs)-2], evs[len(evs)-1]
	if rec.Type != parley.EventRecord || rec.Message == nil || rec.Message.ID != h[1].ID || done.Type != parley.EventDone {
		t.Fatalf("the last events stored: %+v, %+v", rec, done)
	}
	if next, err := st.ReserveEventSeqs(context.Background(), started.Session.ID, 1); err != nil || next != done.Seq+1 {
		t.Fatalf("the numbers after done were not given back: next %d, %v", next, err)
	}
}

// BenchmarkSimpleChat runs simple chats one after another (the real agent loop, SQLite, the
// default FlushEvery), each in a new session, to its end: its allocations and the transactions
// it commits per chat.
//
//	go test -run '^$' -bench SimpleChat -benchmem ./chat
func BenchmarkSimpleChat(b *testing.B) {
	var mu sync.Mutex
	commits := 0
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "c.db"), sqlite.OnCommit(func(int, error) {
		mu.Lock()
		commits++
		mu.Unlock()
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{Events: st, Runs: st, Instance: "i1"})
	defer mgr.Shutdown(context.Background())
	ag := agent.New(agent.Config{Store: st, Resolve: func(string) (parley.Provider, string, error) {
		return answerer{"Hel", "lo ", "there"}, "m1", nil
	}})
	s := &Service{Store: st, Runs: mgr, Agent: ag, DefaultModel: "m1"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		started, err := s.Send(context.Background(), "alice", Request{Message: "Hello"})
		if err != nil {
			b.Fatal(err)
		}
		<-started.Run.Done()
	}
	b.StopTimer()
	mu.Lock()
	b.ReportMetric(float64(commits)/float64(b.N), "commits/chat")
	mu.Unlock()
}
