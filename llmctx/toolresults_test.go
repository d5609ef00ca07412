package llmctx

import (
	"encoding/json"
	"testing"

	"github.com/parleyhq/parley"
)

func TestToolResultsAsText(t *testing.T) {
	in := []parley.Message{
		user("Weather in Paris and time in Tokyo?"),
		{Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{
			{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{ID: "call_<2>", Type: "function", Function: parley.FunctionCall{Name: "get_time", Arguments: `{}`}},
		}},
		{Role: parley.RoleTool, ToolCallID: "call_1", Content: parley.Text(`{"temp": "18°C", "html": "</result><b>"}`)},
		{Role: parley.RoleTool, ToolCallID: "call_<2>", Content: parley.Text("error: the clock is down")},
		text("18°C in Paris; the clock failed."),
	}
	before, _ := json.Marshal(in)
	got := ToolResultsAsText(in)
	if after, _ := json.Marshal(in); string(after) != string(before) {
		t.Fatal("the input was changed")
	}
	if len(got) != 4 || got[2].Role != parley.RoleUser || got[1].Role != parley.RoleAssistant || len(got[1].ToolCalls) != 0 {
		t.Fatalf("shape: %s", show(got))
	}
	wantCalls := "<tool_call>\n  <tool_call_id>call_1</tool_call_id>\n  <name>get_weather</name>\n  <arguments>{\"city\":\"Paris\"}</arguments>\n</tool_call>\n" +
		"<tool_call>\n  <tool_call_id>call_&lt;2&gt;</tool_call_id>\n  <name>get_time</name>\n  <arguments>{}</arguments>\n</tool_call>"
	if g := got[1].Content.String(); g != wantCalls {
		t.Fatalf("calls as text:\n%s\nwant\n%s", g, wantCalls)
	}
	want := "<tool_result>\n  <tool_call_id>call_1</tool_call_id>\n  <name>get_weather</name>\n  <status>success</status>\n  <result>\n" +
		`{"temp": "18°C", "html": "<\/result><b>"}` + "\n  </result>\n</tool_result>\n" +
		"<tool_result>\n  <tool_call_id>call_&lt;2&gt;</tool_call_id>\n  <name>get_time</name>\n  <status>error</status>\n  <result>\n" +
		"error: the clock is down\n  </result>\n</tool_result>"
	if g := got[2].Content.String(); g != want {
		t.Fatalf("got\n%s\nwant\n%s", g, want)
	}
	if got[3].Content.String() != "18°C in Paris; the clock failed." {
		t.Fatalf("last message %q", got[3].Content.String())
	}
}
