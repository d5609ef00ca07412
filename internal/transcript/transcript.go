// Package transcript folds a session's events into what a client that follows Parley's display
// rule shows (docs/protocol.md, "Showing streamed text"). Tests of every layer use it to check
// that the server keeps the rule: replayed from any point, a session's events show each piece of
// text exactly once.
//
// The rule: streamed chunk and reasoning events are a draft of the assistant message in progress;
// a record replaces the draft with the stored message (and a record of a message already shown,
// the same id, replaces it in place); a status "recovered" (the run was taken over after its
// server died) discards the draft, which the new server regenerates.
package transcript

import parley "github.com/parleyhq/parley"

// Transcript is the fold. Its zero value is empty; Apply the events in sequence order.
type Transcript struct {
	msgs      []parley.Message
	byID      map[string]int
	draft     string
	reasoning string
}

// Apply folds one event in.
func (t *Transcript) Apply(ev parley.Event) {
	switch {
	case ev.Type == parley.EventChunk:
		t.draft += ev.Content
	case ev.Type == parley.EventReasoning:
		t.reasoning += ev.Content
	case ev.Type == parley.EventStatus && ev.State == parley.RunRecovered:
		t.draft, t.reasoning = "", ""
	case (ev.Type == parley.EventRecord || ev.Type == parley.EventToolResult) && ev.Message != nil:
		if t.byID == nil {
			t.byID = map[string]int{}
		}
		if i, ok := t.byID[ev.Message.ID]; ok {
			t.msgs[i] = *ev.Message
		} else {
			t.byID[ev.Message.ID] = len(t.msgs)
			t.msgs = append(t.msgs, *ev.Message)
		}
		if ev.Message.Role == parley.RoleAssistant {
			t.draft, t.reasoning = "", ""
		}
	}
}

// Messages returns the messages shown, in the order they first appeared.
func (t *Transcript) Messages() []parley.Message { return append([]parley.Message(nil), t.msgs...) }

// Draft returns the text and the reasoning shown for the assistant message in progress.
func (t *Transcript) Draft() (text, reasoning string) { return t.draft, t.reasoning }

// Texts returns every piece of assistant text shown: each message's, then the draft's, if any.
func (t *Transcript) Texts() []string {
	var out []string
	for _, m := range t.msgs {
		if m.Role == parley.RoleAssistant && m.Content.String() != "" {
			out = append(out, m.Content.String())
		}
	}
	if t.draft != "" {
		out = append(out, t.draft)
	}
	return out
}
