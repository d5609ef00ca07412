package httpapi

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/runs"
)

// A client whose replies pile up (it sends frames and reads none) is dropped once its outbox is
// full, rather than buffered without bound.
func TestFloodingClientIsDropped(t *testing.T) {
	var cause error
	w := &wsConn{cancel: func(err error) { cause = err }, outbox: make(chan []byte, wsOutboxSize)}
	for range wsOutboxSize {
		w.reply(wsOut{Type: "pong"})
	}
	if cause != nil {
		t.Fatalf("dropped with %d replies waiting: %v", wsOutboxSize, cause)
	}
	w.reply(wsOut{Type: "pong"})
	if !errors.Is(cause, errWSFlood) || len(w.outbox) != wsOutboxSize {
		t.Fatalf("one reply past the outbox: cause %v, %d waiting", cause, len(w.outbox))
	}
}

// A connection without a conversation follows the one its first message creates from that run's
// first event, even when the run is over before its writer subscribes (a fast model, a busy
// machine): joining the session then would start after the run, and the client would never see
// its answer.
func TestNewConversationIsFollowedFromItsFirstRun(t *testing.T) {
	s := fuzzServer(t)
	s.Runs = runs.NewManager(runs.Options{Events: s.Store})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Runs.Shutdown(ctx)
	})
	s.Chat.Store, s.Chat.Runs = s.Store, s.Runs
	s.Chat.Agent = runnerFunc(func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		emit(parley.Event{Type: parley.EventChunk, Content: "hi"})
		return &agent.Result{FinishReason: parley.FinishStop}, nil
	})
	s.Auth = nil
	w := &wsConn{
		s: s, id: auth.Identity{User: "alice"}, ip: "127.0.0.1", cancel: func(error) {}, r: httptest.NewRequest("GET", "/api/ws", nil),
		outbox: make(chan []byte, wsOutboxSize), session: make(chan follow, 1), activity: make(chan struct{}, 1),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w.handle(ctx, []byte(`{"type":"user_message","id":"m1","data":{"text":"Hello"}}`))
	var f follow
	select {
	case f = <-w.session:
	default:
		t.Fatalf("no session to follow; reply %s", <-w.outbox)
	}
	// The run ends (its stream is closed) before anyone subscribes.
	run, ok := s.Runs.Latest(f.sessionID)
	if !ok {
		t.Fatal("no run of the new session")
	}
	select {
	case <-run.Done():
	case <-ctx.Done():
		t.Fatal("the run did not end")
	}
	p := &pump{s: s}
	p.subscribe(ctx, f.sessionID, f.after)
	defer p.sub.Close()
	var got []parley.EventType
	for len(got) == 0 || got[len(got)-1] != parley.EventDone {
		select {
		case <-p.sub.Ready():
		case <-ctx.Done():
			t.Fatalf("the writer saw %v of the run, then nothing", got)
		}
		frames, err := p.sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range frames {
			got = append(got, fr.Type)
		}
	}
	if got[0] != parley.EventStart && got[0] != parley.EventRecord {
		t.Fatalf("the writer's first event is %s, want the run's first (%v)", got[0], got)
	}
}
