package agent

import (
	"context"
	"errors"
	"testing"

	parley "github.com/parleyhq/parley"
)

// A run started while its beginning is written (Input.Begun) makes its first model call from the
// history and session it was given, and stores its answer only once the beginning is durable.
func TestFirstCallFromTheGivenHistory(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, say("hello there"), say("again"))
	var prompted []*parley.Session
	a := f.agent(func(c *Config) {
		c.SessionPrompt = func(_ context.Context, _ string, sess *parley.Session) (string, error) {
			prompted = append(prompted, sess)
			return "", nil
		}
	})
	// The store holds nothing yet: what the model is sent comes from the input.
	given := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("from the chat")}}
	sess := &parley.Session{ID: f.sess, Owner: "u"}
	begun := false
	res, err := a.Run(context.Background(), Input{SessionID: f.sess, RunID: "run1", History: given, Session: sess,
		Begun: func() error {
			if len(f.history(t)) != 0 {
				t.Error("stored before the beginning was durable")
			}
			begun = true
			return nil
		}}, func(parley.Event) {})
	if err != nil || res.FinishReason != parley.FinishStop || !begun {
		t.Fatalf("run: %+v %v, begun %v", res, err, begun)
	}
	reqs := f.prov.requests()
	if len(reqs) != 1 || len(reqs[0].Messages) != 1 || reqs[0].Messages[0].Content.String() != "from the chat" {
		t.Fatalf("the model was sent %+v", reqs)
	}
	if len(prompted) != 1 || prompted[0] != sess {
		t.Fatalf("the session prompt was given %v, want the input's session", prompted)
	}
	if h := f.history(t); len(h) != 1 || h[0].Content.String() != "hello there" {
		t.Fatalf("stored %+v", h)
	}
}

// When the beginning's write fails, the run stores nothing, not even the answer it streamed.
func TestNothingStoredWhenTheBeginningFails(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, say("hello there"))
	a := f.agent(nil)
	boom := errors.New("disk full")
	_, err := a.Run(context.Background(), Input{SessionID: f.sess, RunID: "run1",
		History: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}},
		Begun:   func() error { return boom }}, func(parley.Event) {})
	if !errors.Is(err, boom) {
		t.Fatalf("run: %v, want the write's error", err)
	}
	if h := f.history(t); len(h) != 0 {
		t.Fatalf("stored %+v, want nothing", h)
	}
}
