package upstream

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/parleyhq/parley"
)

// framer returns a Framer that hands out frames, each a list of contents, then io.EOF.
func framer(frames [][]string) Framer {
	i := 0
	return func(out []parley.StreamEvent) ([]parley.StreamEvent, error) {
		if i == len(frames) {
			return out, io.EOF
		}
		for _, c := range frames[i] {
			out = append(out, parley.StreamEvent{Type: parley.StreamContent, Content: c})
		}
		i++
		return out, nil
	}
}

func TestStreamHandsOutEveryEventInOrder(t *testing.T) {
	frames := [][]string{{"a"}, {}, {"b", "c", "d"}, {"e"}, {"f", "g"}}
	s := NewStream(context.Background(), io.NopCloser(nil), "[DONE]", framer(frames))
	var got string
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got += ev.Content
	}
	if got != "abcdefg" {
		t.Fatalf("events %q, want %q", got, "abcdefg")
	}
	if _, err := s.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %v, want io.EOF", err)
	}
}

// A stream reuses its queue's backing array from frame to frame: a model's answer of one event a
// chunk (the usual) costs no allocation per chunk here.
func TestStreamReusesItsQueue(t *testing.T) {
	frames := make([][]string, 1000)
	for i := range frames {
		frames[i] = []string{strconv.Itoa(i % 10)}
	}
	s := NewStream(context.Background(), io.NopCloser(nil), "[DONE]", framer(frames))
	if _, err := s.Next(); err != nil { // the first frame makes the queue
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(500, func() {
		if _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Next allocated %.1f times an event, want 0", allocs)
	}
}

// What the queue handed out is not kept by it: the events' strings and pointers are the
// caller's alone.
func TestStreamKeepsNoEventHandedOut(t *testing.T) {
	s := NewStream(context.Background(), io.NopCloser(nil), "[DONE]", framer([][]string{{"a", "b"}}))
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	if s.queue[0] != (parley.StreamEvent{}) {
		t.Fatalf("the queue still holds the event handed out: %+v", s.queue[0])
	}
}
