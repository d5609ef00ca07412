package transcript

import (
	"slices"
	"testing"

	parley "github.com/parleyhq/parley"
)

func TestTranscriptFollowsTheDisplayRule(t *testing.T) {
	chunk := func(s string) parley.Event { return parley.Event{Type: parley.EventChunk, Content: s} }
	reasoning := func(s string) parley.Event { return parley.Event{Type: parley.EventReasoning, Content: s} }
	record := func(id, text string) parley.Event {
		return parley.Event{Type: parley.EventRecord, Message: &parley.Message{ID: id, Role: parley.RoleAssistant, Content: parley.Text(text)}}
	}
	user := parley.Event{Type: parley.EventRecord, Message: &parley.Message{ID: "u", Role: parley.RoleUser, Content: parley.Text("q")}}
	recovered := parley.Event{Type: parley.EventStatus, State: parley.RunRecovered}
	for _, tc := range []struct {
		name   string
		events []parley.Event
		texts  []string
		draft  string
	}{
		{"a record replaces the draft", []parley.Event{user, reasoning("hm"), chunk("Hel"), chunk("lo"), record("a", "Hello")}, []string{"Hello"}, ""},
		{"recovered discards the draft", []parley.Event{user, chunk("Hel"), recovered, chunk("Hello"), record("a", "Hello")}, []string{"Hello"}, ""},
		{"a repeated record replaces its message", []parley.Event{user, chunk("Hi"), record("a", "Hi"), recovered, record("a", "Hi")}, []string{"Hi"}, ""},
		{"a draft in progress shows once", []parley.Event{user, record("a", "first"), chunk("sec"), chunk("ond")}, []string{"first", "second"}, "second"},
		{"a status other than recovered keeps the draft", []parley.Event{chunk("a"), {Type: parley.EventStatus, State: parley.RunPaused}, chunk("b")}, []string{"ab"}, "ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Transcript
			for _, ev := range tc.events {
				tr.Apply(ev)
			}
			if got := tr.Texts(); !slices.Equal(got, tc.texts) {
				t.Fatalf("texts %q, want %q", got, tc.texts)
			}
			if text, _ := tr.Draft(); text != tc.draft {
				t.Fatalf("draft %q, want %q", text, tc.draft)
			}
		})
	}
}
