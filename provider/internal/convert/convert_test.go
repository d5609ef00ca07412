package convert

import (
	"testing"

	"github.com/parleyhq/parley"
)

func TestParseDataURL(t *testing.T) {
	for _, tt := range []struct {
		in       string
		ok, bad  bool
		mt, data string
	}{
		{"data:image/png;base64,iVBORw0KGgo=", true, false, "image/png", "iVBORw0KGgo="},
		{"https://example.com/a.png", false, false, "", ""},
		{"data:image/png,raw", true, true, "", ""},
		{"data:;base64,iVBORw0KGgo=", true, true, "", ""},
		{"data:image/png;base64,not base64!", true, true, "", ""},
		{"data:image/png;base64", true, true, "", ""},
	} {
		d, ok, err := ParseDataURL(tt.in)
		if ok != tt.ok || (err != nil) != tt.bad || (!tt.bad && (d.MediaType != tt.mt || d.Data != tt.data)) {
			t.Errorf("ParseDataURL(%q) = %+v, %v, %v", tt.in, d, ok, err)
		}
	}
}

func TestArgsObject(t *testing.T) {
	for in, want := range map[string]string{"": "{}", "  ": "{}", `{"a":1}`: `{"a":1}`, ` {"a":1} `: `{"a":1}`, "[1]": "{}", "{broken": "{}", `"s"`: "{}"} {
		if got := string(ArgsObject(in)); got != want {
			t.Errorf("ArgsObject(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestTurnStartAndSystemText(t *testing.T) {
	msgs := []parley.Message{
		{Role: parley.RoleSystem, Content: parley.Text("a")},
		{Role: parley.RoleUser, Content: parley.Text("q1")},
		{Role: parley.RoleSystem, Content: parley.Text("b")},
		{Role: parley.RoleUser, Content: parley.Text("q2")},
		{Role: parley.RoleAssistant},
		{Role: parley.RoleTool},
	}
	if got := TurnStart(msgs); got != 3 {
		t.Errorf("TurnStart = %d, want 3", got)
	}
	if got := TurnStart(msgs[:1]); got != 0 {
		t.Errorf("TurnStart without a user message = %d", got)
	}
	if got := SystemText(msgs); got != "a\n\nb" {
		t.Errorf("SystemText = %q", got)
	}
	if err := CheckRequest(&parley.ChatRequest{Model: "m", Messages: msgs, ToolChoice: "sometimes"}); parley.CodeOf(err) != parley.ECInvalid {
		t.Errorf("bad tool_choice: %v", err)
	}
}
