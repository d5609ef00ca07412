package stream

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// storedSeqs returns the numbers of the session's stored events.
func storedSeqs(m *memEvents, session string) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int64
	for _, ev := range m.events[session] {
		out = append(out, ev.Seq)
	}
	return out
}

// waitStored waits until the session's stored events number n.
func waitStored(t *testing.T, m *memEvents, session string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); len(storedSeqs(m, session)) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("stored %v, want %d events", storedSeqs(m, session), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// writeNow makes the store writer write what it has now, if it waits for events to gather.
func writeNow(w *Writer) {
	w.s.mu.Lock()
	urged := w.urgeLocked()
	w.s.mu.Unlock()
	if urged {
		go w.flush()
	}
}

// A run's end writes, in one write, the events the store writer has not taken and the run's
// last events; readers see those only once the write returned, and nothing is written twice.
func TestFinishWritesWhatIsLeftWithTheTail(t *testing.T) {
	mem := newMemEvents()
	h := New(Options{Store: mem, FlushEvery: time.Hour})
	w, err := h.Open(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "a"})
	}
	writeNow(w) // the store writer writes what it has now
	waitStored(t, mem, "s1", 3)
	for range 2 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "b"})
	}
	sub := h.Subscribe(context.Background(), "s1", 0)
	defer sub.Close()

	var got []parley.EncodedEvent
	tail, err := w.Finish([]parley.Event{{Type: parley.EventDone, FinishReason: parley.FinishStop}}, func(evs []parley.EncodedEvent) error {
		got = append(got, evs...)
		w.s.mu.Lock()
		last := w.s.last
		w.s.mu.Unlock()
		if last != 5 {
			t.Errorf("while the end is written, the ring goes up to %d, want 5", last)
		}
		var list []parley.Event
		for i, e := range evs {
			if e.JSON == nil {
				b, err := json.Marshal(e.Event)
				if err != nil {
					return err
				}
				evs[i].JSON = b
			}
			var ev parley.Event
			if err := json.Unmarshal(evs[i].JSON, &ev); err != nil {
				return err
			}
			list = append(list, ev)
		}
		return mem.AppendEvents(context.Background(), "s1", time.Now(), list)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != 1 || tail[0].Seq != 6 {
		t.Fatalf("the tail as stamped: %+v, want one event numbered 6", tail)
	}
	if len(got) != 3 || got[0].Seq != 4 || got[1].Seq != 5 || got[2].Seq != 6 {
		t.Fatalf("the end's write got %d events: %+v, want 4, 5 and 6", len(got), got)
	}
	if got[0].JSON == nil || got[1].JSON == nil || got[2].JSON != nil || got[2].Event.Type != parley.EventDone {
		t.Fatal("the end's write: the ring's events come with their JSON, the tail's without")
	}
	w.Close()
	w.Drop()
	if seqs := storedSeqs(mem, "s1"); len(seqs) != 6 || seqs[5] != 6 {
		t.Fatalf("stored %v, want 1 to 6", seqs)
	}
	var seen []int64
	for len(seen) < 6 {
		select {
		case <-sub.Ready():
		case <-time.After(time.Minute):
			t.Fatalf("read %v, and no more", seen)
		}
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			seen = append(seen, f.Seq)
		}
	}
	if seen[5] != 6 {
		t.Fatalf("read %v", seen)
	}
}

// When the end's write fails, nothing of the tail is appended, and the store writer still
// writes the ring's events.
func TestFinishThatFailsAppendsNothing(t *testing.T) {
	mem := newMemEvents()
	h := New(Options{Store: mem, FlushEvery: time.Hour})
	w, err := h.Open(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "a"})
	}
	failed := errors.New("the store is down")
	if _, err := w.Finish([]parley.Event{{Type: parley.EventDone}}, func([]parley.EncodedEvent) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("Finish: %v, want the write's error", err)
	}
	if w.Next() != 3 {
		t.Fatalf("after a failed end the next number is %d, want 3", w.Next())
	}
	if ev := w.Append(parley.Event{Type: parley.EventDone}); ev.Seq != 3 {
		t.Fatalf("done appended after a failed end: seq %d, want 3", ev.Seq)
	}
	w.Close()
	w.Drop()
	if seqs := storedSeqs(mem, "s1"); len(seqs) != 3 {
		t.Fatalf("stored %v, want 1 to 3", seqs)
	}
}

// encodedMem is a memEvents that takes events encoded, and keeps the JSON it was given.
type encodedMem struct {
	*memEvents
	json [][]byte
}

func (m *encodedMem) AppendEncodedEvents(ctx context.Context, s string, at time.Time, evs []parley.EncodedEvent) error {
	list := make([]parley.Event, len(evs))
	m.mu.Lock()
	for i, e := range evs {
		m.json = append(m.json, e.JSON)
		if e.Event != nil {
			list[i] = *e.Event
		} else if err := json.Unmarshal(e.JSON, &list[i]); err != nil { // a text delta's frame keeps no Event
			m.mu.Unlock()
			return err
		}
	}
	m.mu.Unlock()
	return m.AppendEvents(ctx, s, at, list)
}

// A store that takes encoded events gets the very bytes the readers get: each event is encoded
// once.
func TestTheStoreGetsTheFramesJSON(t *testing.T) {
	mem := &encodedMem{memEvents: newMemEvents()}
	h := New(Options{Store: mem, FlushEvery: time.Millisecond})
	w, err := h.Open(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	sub := h.Subscribe(context.Background(), "s1", 0)
	defer sub.Close()
	for range 3 {
		w.Append(parley.Event{Type: parley.EventChunk, Content: "a"})
	}
	var frames []*Frame
	for len(frames) < 3 {
		<-sub.Ready()
		fs, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, fs...)
	}
	w.Close()
	w.Drop()
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if len(mem.json) != 3 {
		t.Fatalf("the store got %d encoded events, want 3", len(mem.json))
	}
	for i, f := range frames {
		if &mem.json[i][0] != &f.JSON[0] {
			t.Errorf("event %d: the store got other bytes than the readers' frame", f.Seq)
		}
	}
}

// The frames Finish appends keep the tail's events as Finish stamped them, not copies of them:
// the run's record and done events are not copied once more for the session's readers (main
// copied the tail, and then each event again into its frame).
func TestFinishFramesKeepTheTail(t *testing.T) {
	mem := newMemEvents()
	h := New(Options{Store: mem, FlushEvery: time.Hour})
	w, err := h.Open(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	w.Append(parley.Event{Type: parley.EventChunk, Content: "a"})
	sub := h.Subscribe(context.Background(), "s1", 0)
	defer sub.Close()
	tail := []parley.Event{
		{Type: parley.EventRecord, Message: &parley.Message{ID: "m1", Role: parley.RoleAssistant}},
		{Type: parley.EventDone, FinishReason: parley.FinishStop},
	}
	stamped, err := w.Finish(tail, func(evs []parley.EncodedEvent) error {
		for i := range evs {
			if evs[i].JSON == nil {
				b, err := json.Marshal(evs[i].Event)
				if err != nil {
					return err
				}
				evs[i].JSON = b
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if &stamped[0] != &tail[0] || tail[0].Seq != 2 || tail[1].Seq != 3 {
		t.Fatalf("Finish returned %+v for the tail %+v: want the tail, numbered 2 and 3", stamped, tail)
	}
	var seen []*Frame
	for len(seen) < 3 {
		select {
		case <-sub.Ready():
		case <-time.After(time.Minute):
			t.Fatalf("read %d frames, and no more", len(seen))
		}
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, frames...)
	}
	for j, f := range seen[1:] {
		if f.ev != &tail[j] {
			t.Errorf("the frame of %s keeps a copy of the event, not the tail's", f.Type)
		}
		if got := f.Event(); !reflect.DeepEqual(got, tail[j]) {
			t.Errorf("the frame gives %+v, want %+v", got, tail[j])
		}
	}
	w.Close()
}
