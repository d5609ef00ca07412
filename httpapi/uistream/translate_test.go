package uistream

import (
	"encoding/json"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// feed translates evs (stamped with run "run1") one at a time and returns each event's chunks as
// JSON lines, one line per event, "-" for none.
func feed(t *testing.T, evs ...parley.Event) []string {
	t.Helper()
	tr := NewTranslator("run1")
	var out []string
	for i := range evs {
		if evs[i].RunID == "" {
			evs[i].RunID = "run1"
		}
		var line []string
		tr.Event(&evs[i], func(c Chunk) {
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			line = append(line, string(b))
		})
		if len(line) == 0 {
			line = []string{"-"}
		}
		out = append(out, strings.Join(line, " "))
	}
	return out
}

func check(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func assistant(id, content string) *parley.Message {
	return &parley.Message{ID: id, Role: parley.RoleAssistant, Content: parley.Text(content), Model: "m"}
}

// The error chunk waits for the run's end: useChat lets its user send again as soon as it reads
// an error, and the session takes a new turn only once done is out.
func TestErrorGoesOutWithTheEnd(t *testing.T) {
	got := feed(t,
		parley.Event{Type: parley.EventStart},
		parley.Event{Type: parley.EventError, Error: &parley.ErrorBody{Code: parley.ECUpstream, Message: "provider returned HTTP 500"}},
		parley.Event{Type: parley.EventDone, FinishReason: parley.FinishError},
	)
	check(t, got,
		`{"type":"start","messageId":"run1"}`,
		`-`,
		`{"type":"error","errorText":"provider returned HTTP 500"} {"type":"finish","finishReason":"error"}`,
	)
}

// A message that was not streamed (a provider that does not stream) is sent whole from its
// record; a record seen again (a run taken over records its last step again) adds nothing; a
// recovered status closes the dead server's draft and the regenerated answer is a new step.
func TestRecordsTakeoverAndRecovery(t *testing.T) {
	m1 := assistant("a1", "whole answer")
	got := feed(t,
		parley.Event{Type: parley.EventStart},
		parley.Event{Type: parley.EventRecord, Message: m1},
		parley.Event{Type: parley.EventRecord, Message: m1},
		parley.Event{Type: parley.EventStatus, State: parley.RunRecovered},
		parley.Event{Type: parley.EventChunk, Content: "again"},
		parley.Event{Type: parley.EventDone, FinishReason: parley.FinishAborted},
		parley.Event{Type: parley.EventChunk, Content: "late"},
	)
	check(t, got,
		`{"type":"start","messageId":"run1"}`,
		`{"type":"start-step"} {"type":"text-start","id":"t1"} {"type":"text-delta","id":"t1","delta":"whole answer"} {"type":"text-end","id":"t1"}`,
		`-`,
		`{"type":"data-parley-status","data":{"state":"recovered"},"transient":true}`,
		`{"type":"finish-step"} {"type":"start-step"} {"type":"text-start","id":"t2"} {"type":"text-delta","id":"t2","delta":"again"}`,
		`{"type":"text-end","id":"t2"} {"type":"finish-step"} {"type":"abort","reason":"aborted"} {"type":"finish","finishReason":"other","messageMetadata":{"model":"m"}}`,
		`-`,
	)
}

// Events of another run (a stream that follows the session) and tool results of calls this
// stream did not announce are left out; arguments that are not JSON are a JSON string.
func TestForeignEventsAndOddArguments(t *testing.T) {
	call := &parley.Message{ID: "a1", Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{{ID: "c1", Type: "function",
		Function: parley.FunctionCall{Name: "calc", Arguments: "not json"}}}}
	no := false
	got := feed(t,
		parley.Event{Type: parley.EventStart},
		parley.Event{Type: parley.EventChunk, Content: "other run", RunID: "run0"},
		parley.Event{Type: parley.EventRecord, Message: call},
		parley.Event{Type: parley.EventToolResult, Message: &parley.Message{Role: parley.RoleTool, ToolCallID: "c9", Content: parley.Text("x")}},
		parley.Event{Type: parley.EventToolResult, Message: &parley.Message{Role: parley.RoleTool, ToolCallID: "c1", Content: parley.Text(""), Success: &no}},
		parley.Event{Type: parley.EventUsage, Usage: &parley.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}},
	)
	check(t, got,
		`{"type":"start","messageId":"run1"}`,
		`-`,
		`{"type":"start-step"} {"type":"tool-input-start","toolCallId":"c1","toolName":"calc","providerExecuted":true} {"type":"tool-input-delta","toolCallId":"c1","inputTextDelta":"not json"} {"type":"tool-input-available","toolCallId":"c1","toolName":"calc","input":"not json","providerExecuted":true}`,
		`-`,
		`{"type":"tool-output-error","toolCallId":"c1","providerExecuted":true,"errorText":"the tool failed"}`,
		`-`,
	)
}

func TestSessionIDs(t *testing.T) {
	a, b := SessionID("alice", "abc"), SessionID("bob", "abc")
	if a == b || a != SessionID("alice", "abc") || len(a) != 36 {
		t.Fatalf("derived ids: %s %s", a, b)
	}
	const sid = "01a20c13-16eb-7c83-9e19-3d53a3d7b63b"
	if SessionID("alice", sid) != sid || SessionID("bob", sid) != sid {
		t.Fatal("a session id is not used as it is")
	}
}

// BenchmarkTranslate measures the UI stream's own cost per run event: a run of 1,000 text chunks
// and a stored answer, translated and each chunk encoded as JSON (what uiStream writes).
func BenchmarkTranslate(b *testing.B) {
	evs := []parley.Event{{Type: parley.EventStart, RunID: "run1"}}
	for range 1000 {
		evs = append(evs, parley.Event{Type: parley.EventChunk, RunID: "run1", Content: "a token "})
	}
	evs = append(evs,
		parley.Event{Type: parley.EventRecord, RunID: "run1", Message: assistant("a1", strings.Repeat("a token ", 1000))},
		parley.Event{Type: parley.EventUsage, RunID: "run1", Usage: &parley.Usage{PromptTokens: 10, CompletionTokens: 1000, TotalTokens: 1010}},
		parley.Event{Type: parley.EventDone, RunID: "run1", FinishReason: parley.FinishStop})
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tr := NewTranslator("run1")
		for i := range evs {
			tr.Event(&evs[i], func(c Chunk) {
				if _, err := json.Marshal(c); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
