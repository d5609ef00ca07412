package runs

import (
	"context"
	"testing"

	parley "github.com/parleyhq/parley"
)

// The events given to Go follow the start event before Go returns: a reader that subscribes
// then finds them together, whatever the run's body is doing.
func TestGoEmitsItsFirstEventsBeforeReturning(t *testing.T) {
	m := NewManager(Options{})
	defer m.Shutdown(context.Background())
	r, err := m.Begin(context.Background(), Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	question := &parley.Message{ID: "m1", Role: parley.RoleUser, Content: parley.Text("hi")}
	r.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		<-release
		return parley.FinishStop, nil
	}, parley.Event{Type: parley.EventRecord, Message: question})
	sub := m.Subscribe(context.Background(), "s1", r.FirstSeq()-1)
	defer sub.Close()
	frames, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || frames[0].Type != parley.EventStart || frames[1].Type != parley.EventRecord || frames[1].Event().Message.ID != "m1" {
		var got []parley.EventType
		for _, f := range frames {
			got = append(got, f.Type)
		}
		t.Fatalf("frames %v, want start then the record", got)
	}
	close(release)
	<-r.Done()
}
