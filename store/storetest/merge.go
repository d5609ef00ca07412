package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// MergeBegins returns the begins of runs that both stores' merge tests run merged and each alone:
// three of new sessions that differ where a merged statement could go wrong (selected tools; a
// project, made here, and every column of a message; a message made after the session's
// updated_at). Each store's test adds its own turns, ends and event writes.
func MergeBegins(t *testing.T, s parley.Store, now time.Time) []*parley.RunBegin {
	t.Helper()
	proj := &parley.Project{ID: parley.NewID(), Owner: "o", Name: "p", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateProject(context.Background(), proj); err != nil {
		t.Fatal(err)
	}
	var begins []*parley.RunBegin
	for i := range 3 {
		sess := &parley.Session{ID: parley.NewID(), Owner: "o", Title: fmt.Sprintf("t%d", i), CreatedAt: now, UpdatedAt: now.Add(3 * time.Second)}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i", Attempts: i,
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now.Add(time.Second)}
		switch i {
		case 0:
			run.SelectedTools = []string{"x", "y"}
		case 1:
			sess.ProjectID = proj.ID
			m.Role, m.Content, m.Name, m.Reasoning, m.Model, m.LatencyMS = parley.RoleAssistant, parley.Content{}, "n", "because", "m", 42
			m.ToolCalls = []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "x", Arguments: "{}"}}}
			m.Usage = &parley.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, ReasoningTokens: 1, CachedTokens: 2, Cost: 0.25}
			m.ThinkingBlocks = []parley.ThinkingBlock{{Type: "thinking", Thinking: "hm", Signature: "sig"}}
			m.Error = parley.ECInvalid
		case 2:
			ok := true
			m.Role, m.Content, m.ToolCallID, m.Success, m.Server = parley.RoleTool, parley.Parts(parley.Part{Type: "text", Text: "a"}), "c0", &ok, "srv"
			m.CreatedAt = now.Add(5 * time.Second) // after the session's updated_at
		}
		begins = append(begins, &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 50, Run: run, Messages: []*parley.Message{m}})
	}
	return begins
}

// MergeStore is a store whose writes of runs a batch merges.
type MergeStore interface {
	parley.Store
	parley.EventStore
	parley.RunBeginner
	parley.EncodedEventAppender
}

// EventWrite is the arguments of one AppendEncodedEvents.
type EventWrite struct {
	SessionID string
	At        time.Time
	Events    []parley.EncodedEvent
}

// MergeFailures makes three writes of a merge test's batch fail, each its own way: the second
// begin's project is not there, a run is already running in the second turn's session
// (begins[4]), and the fourth end's session is deleted. MergeBatch, told fail, expects these.
func MergeFailures(t *testing.T, s MergeStore, now time.Time, begins []*parley.RunBegin, finishes []parley.RunFinish) {
	t.Helper()
	ctx := context.Background()
	begins[1].NewSession.ProjectID = "no-such-project"
	other := &parley.RunRecord{ID: parley.NewID(), SessionID: begins[4].SessionID, Owner: "o", Model: "m", Instance: "i",
		LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	if _, err := s.BeginRun(ctx, &parley.RunBegin{SessionID: other.SessionID, Reserve: 1, Run: other}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, finishes[3].SessionID); err != nil {
		t.Fatal(err)
	}
}

// MergeBatch sends begins (MergeBegins' three and two turns), finishes and writes at once, each
// from its own goroutine, while the store's one writer is held; once queued says all of them
// wait, it calls release (which lets the writer go, so that they make one batch) and checks what
// each write returned and left: its own error for a write MergeFailures made fail (when fail),
// a conflict for the end of a run that is another instance's (finishes[1]), and every other
// write stored as it would be alone. statements counts the statements the store ran; with want
// at 0 or more the batch must have run want of them.
func MergeBatch(t *testing.T, s MergeStore, begins []*parley.RunBegin, finishes []parley.RunFinish, writes []EventWrite,
	fail bool, queued func() int, release func(), statements func() int64, want int64) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, len(begins)+len(finishes)+len(writes))
	for i, b := range begins {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.BeginRun(ctx, b) }()
	}
	for i, f := range finishes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[len(begins)+i] = s.FinishRun(ctx, f) }()
	}
	for i, w := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[len(begins)+len(finishes)+i] = s.AppendEncodedEvents(ctx, w.SessionID, w.At, w.Events)
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for queued() < len(errs) {
		if time.Now().After(deadline) {
			release()
			wg.Wait()
			t.Fatalf("%d of %d writes queued", queued(), len(errs))
		}
		time.Sleep(time.Millisecond)
	}
	before := statements()
	release()
	wg.Wait()
	if got := statements() - before; want >= 0 && got != want {
		t.Errorf("the batch ran %d statements, want %d", got, want)
	}
	for i, err := range errs {
		switch {
		case fail && (i == 1 || i == len(begins)+3):
			if !errors.Is(err, parley.ErrNotFound) {
				t.Errorf("write %d: %v, want not found", i, err)
			}
		case i == len(begins)+1 || fail && i == 4: // the run is another instance's; a run is running
			if parley.CodeOf(err) != parley.ECConflict {
				t.Errorf("write %d: %v, want a conflict", i, err)
			}
		case err != nil:
			t.Errorf("write %d: %v", i, err)
		}
	}
	for i, b := range begins {
		if fail && i == 1 {
			if _, err := s.GetSession(ctx, b.SessionID); !errors.Is(err, parley.ErrNotFound) {
				t.Errorf("the failed begin's session: %v, want not found", err)
			}
			continue
		}
		want := int64(1)
		if b.NewSession == nil { // a turn, after a user's message and an answer
			want = 3
		}
		if fail && i == 4 {
			want = 2
		}
		msgs, err := s.History(ctx, b.SessionID)
		if err != nil || int64(len(msgs)) != want || msgs[len(msgs)-1].Seq != want || (!fail || i != 4) && b.Messages[0].Seq != want {
			t.Errorf("begin %d: history %v, %v; want %d messages", i, msgs, err, want)
		}
	}
	for i, f := range finishes {
		if fail && i == 3 {
			continue
		}
		evs, err := s.ListEvents(ctx, f.SessionID, 0, 100)
		if err != nil || len(evs) != len(f.Events) {
			t.Errorf("finish %d: %d events, %v; want %d", i, len(evs), err, len(f.Events))
		}
		if f.Messages[0].Seq != 2 {
			t.Errorf("finish %d: the answer's seq %d, want 2", i, f.Messages[0].Seq)
		}
	}
}
