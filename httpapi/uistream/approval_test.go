package uistream

import (
	"encoding/json"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// useChat's request after addToolApprovalResponse: the last message is the assistant's, its tool
// parts answered; those are the request's answers, and it makes no turn.
func TestRequestAnswers(t *testing.T) {
	body := `{"id":"c1","trigger":"submit-message","messageId":"run1","messages":[
		{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]},
		{"id":"run1","role":"assistant","parts":[
			{"type":"tool-rm","toolCallId":"call_a","state":"approval-responded","input":{},"approval":{"id":"call_a","approved":true}},
			{"type":"tool-rm","toolCallId":"call_b","state":"approval-responded","input":{},"approval":{"id":"call_b","approved":false,"reason":"no"}},
			{"type":"tool-ls","toolCallId":"call_c","state":"output-available","input":{},"output":"x"}]}]}`
	var r Request
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if len(r.Answers) != 2 || r.Answers[0] != (Answer{CallID: "call_a", Approved: true}) || r.Answers[1] != (Answer{CallID: "call_b", Reason: "no"}) {
		t.Fatalf("answers %+v", r.Answers)
	}
	for _, bad := range []string{
		// an assistant message last without answers
		`{"id":"c1","messages":[{"id":"a","role":"assistant","parts":[{"type":"text","text":"x"}]}]}`,
		// answered without saying how
		`{"id":"c1","messages":[{"id":"a","role":"assistant","parts":[{"type":"tool-rm","toolCallId":"c","state":"approval-responded","approval":{"id":"c"}}]}]}`,
	} {
		var r Request
		if err := json.Unmarshal([]byte(bad), &r); err != nil {
			t.Fatal(err)
		}
		if err := r.Check(); parley.CodeOf(err) != parley.ECInvalid {
			t.Errorf("%s: %v, want invalid", bad, err)
		}
	}
}

// A continuation sends nothing of what the client has, starts the same message at the answered
// call's resolution, and a denial is tool-output-denied (not the refusal as an error too).
func TestContinuation(t *testing.T) {
	call := parley.ToolCall{ID: "call_a", Type: "function", Function: parley.FunctionCall{Name: "rm", Arguments: "{}"}}
	no := false
	evs := []parley.Event{
		{Type: parley.EventStart},
		{Type: parley.EventRecord, Message: &parley.Message{ID: "m1", Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{call}}},
		{Type: parley.EventApprovalRequired, Approval: &parley.Approval{CallID: "call_a", Tool: "rm"}},
		{Type: parley.EventStatus, State: parley.RunAwaitingApproval},
		{Type: parley.EventApprovalResolved, Approval: &parley.Approval{CallID: "call_a", Decision: parley.ApprovalDenied}},
		{Type: parley.EventStatus, State: parley.RunResumed},
		{Type: parley.EventToolResult, Message: &parley.Message{Role: parley.RoleTool, ToolCallID: "call_a", Content: parley.Text("error: not run"), Success: &no}},
		{Type: parley.EventDone, FinishReason: parley.FinishStop},
	}
	run := func(tr *Translator) string {
		var out []string
		for i := range evs {
			ev := evs[i]
			ev.RunID = "run1"
			tr.Event(&ev, func(c Chunk) { out = append(out, c.Type) })
		}
		return strings.Join(out, " ")
	}
	if got, want := run(NewTranslator("run1")), "start start-step tool-input-start tool-input-delta tool-input-available tool-approval-request data-parley-status finish-step finish"; got != want {
		t.Fatalf("first stream:\n got %s\nwant %s", got, want)
	}
	if got, want := run(NewContinuation("run1", []string{"call_a"})), "start tool-output-denied data-parley-status finish"; got != want {
		t.Fatalf("continuation:\n got %s\nwant %s", got, want)
	}
}
