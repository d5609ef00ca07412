package agent

import (
	"context"
	"errors"
	"testing"
	"time"

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

// hooks is a run's hooks (Input.Run) that count their calls.
type hooks struct {
	gates, begun, ends int
	begunErr           error
}

func (h *hooks) Gate(ctx context.Context) error { h.gates++; return ctx.Err() }
func (h *hooks) AwaitApproval(context.Context, time.Time, func(context.Context) (bool, error)) error {
	return errors.New("not asked here")
}
func (h *hooks) Begun() error { h.begun++; return h.begunErr }
func (h *hooks) StoreWithEnd(*parley.Message, func(*parley.Message)) bool {
	h.ends++
	return false // the agent stores the answer itself
}

// Input.Run stands for the func fields: the loop asks its gate before the model call, waits for
// the beginning once, offers the answer to be stored with the run's end, and stores nothing when
// the beginning failed.
func TestRunHooksStandForTheFuncFields(t *testing.T) {
	f := newFixture(t)
	f.prov.steps = append(f.prov.steps, say("hello there"), say("not stored"))
	a := f.agent(nil)
	given := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}}
	h := &hooks{}
	res, err := a.Run(context.Background(), Input{SessionID: f.sess, RunID: "run1", History: given, Run: h}, func(parley.Event) {})
	if err != nil || res.FinishReason != parley.FinishStop {
		t.Fatalf("run: %+v %v", res, err)
	}
	if h.gates != 1 || h.begun != 1 || h.ends != 1 {
		t.Errorf("hooks called: gate %d, begun %d, store with end %d; want 1 each", h.gates, h.begun, h.ends)
	}
	if got := f.history(t); len(got) != 1 || got[0].Content.String() != "hello there" {
		t.Fatalf("stored %+v", got)
	}
	boom := errors.New("disk full")
	failed := &hooks{begunErr: boom}
	if _, err := a.Run(context.Background(), Input{SessionID: f.sess, RunID: "run2", History: given, Run: failed}, func(parley.Event) {}); !errors.Is(err, boom) {
		t.Fatalf("run: %v, want the beginning's error", err)
	}
	if got := f.history(t); len(got) != 1 {
		t.Fatalf("stored after a failed beginning: %+v", got)
	}
}
