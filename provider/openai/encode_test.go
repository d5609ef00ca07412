package openai

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley"
)

func ptr[T any](v T) *T { return &v }

// withMetadata fills every Parley metadata field, none of which may reach the wire.
func withMetadata(m parley.Message) parley.Message {
	m.ID = "0198a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	m.SessionID = "0198a1b2-0000-7000-8000-000000000001"
	m.Seq = 7
	m.RunID = "run-1"
	m.Model = "gpt-4.1"
	m.LatencyMS = 812
	m.Usage = &parley.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}
	m.Success = ptr(true)
	m.ResourceID = "res-1"
	m.CreatedAt = time.Date(2025, 8, 5, 12, 0, 0, 0, time.UTC)
	return m
}

var weatherSchema = json.RawMessage(`{
  "type": "object",
  "properties": {"city": {"type": "string", "description": "City name, e.g. <Paris> & co"}},
  "required": ["city"]
}`)

var toolRound = []parley.Message{
	withMetadata(parley.Message{Role: parley.RoleUser, Content: parley.Text("Weather in Paris and time in Tokyo?")}),
	withMetadata(parley.Message{
		Role:      parley.RoleAssistant,
		Reasoning: "Two independent lookups.",
		ToolCalls: []parley.ToolCall{
			{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{ID: "call_2", Function: parley.FunctionCall{Name: "get_time"}},
		},
	}),
	withMetadata(parley.Message{Role: parley.RoleTool, Content: parley.Text(`{"result": "18°C, cloudy"}`), ToolCallID: "call_1", Name: "get_weather"}),
	withMetadata(parley.Message{Role: parley.RoleTool, Content: parley.Text(`{"result": "21:04"}`), ToolCallID: "call_2", Name: "get_time"}),
	withMetadata(parley.Message{Role: parley.RoleAssistant, Content: parley.Text("18°C and cloudy in Paris; 21:04 in Tokyo."), Reasoning: "Summarise."}),
	{Role: parley.RoleUser, Content: parley.Text("Thanks!"), Name: "alice"},
}

func TestEncodeRequestGolden(t *testing.T) {
	tests := []struct {
		name   string
		req    parley.ChatRequest
		stream bool
		opts   EncodeOptions
	}{
		{
			name: "plain_text",
			req:  parley.ChatRequest{Model: "gpt-4o-mini", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("Hello")}}},
		},
		{
			name: "system_user",
			req: parley.ChatRequest{
				Model: "gpt-4-1106-preview",
				Messages: []parley.Message{
					{Role: parley.RoleSystem, Content: parley.Text("You are terse.")},
					{Role: parley.RoleUser, Content: parley.Text("user query")},
				},
				Temperature: ptr(0.7),
				MaxTokens:   256,
			},
		},
		{
			name: "temperature_zero",
			req: parley.ChatRequest{
				Model:       "gpt-4o-mini",
				Messages:    []parley.Message{{Role: parley.RoleUser, Content: parley.Text("Pick a number.")}},
				Temperature: ptr(0.0),
			},
		},
		{
			name: "parts_image",
			req: parley.ChatRequest{Model: "gpt-4o", Messages: []parley.Message{{
				Role: parley.RoleUser,
				Content: parley.Parts(
					parley.Part{Type: "text", Text: "What is in these images?"},
					parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: "https://example.com/cat.png", Detail: "low"}},
					parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: "data:image/png;base64,iVBORw0KGgo="}},
					parley.Part{Type: "text", Text: ""},
				),
			}}},
		},
		{
			name:   "tool_round_stream",
			req:    parley.ChatRequest{Model: "gpt-4.1", Messages: toolRound},
			stream: true,
		},
		{
			name:   "tool_round_options",
			req:    parley.ChatRequest{Model: "deepseek-reasoner", Messages: toolRound, MaxTokens: 1024},
			stream: true,
			opts:   EncodeOptions{SendReasoning: true, LegacyMaxTokens: true, SendToolName: true},
		},
		{
			name: "tools_schema",
			req: parley.ChatRequest{
				Model:    "gpt-4.1",
				Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("Weather in Paris?")}},
				Tools: []parley.ToolSpec{
					{Name: "get_weather", Description: "Current weather for a city", Parameters: weatherSchema},
					{Name: "get_time"},
				},
				ToolChoice: "auto",
			},
		},
		{
			name: "tool_choice_without_tools",
			req: parley.ChatRequest{
				Model:      "gpt-4o-mini",
				Messages:   []parley.Message{{Role: parley.RoleUser, Content: parley.Text("Hi")}},
				ToolChoice: "required",
			},
			stream: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeRequestWith(&tt.req, tt.stream, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, got)
			}
			if !bytes.Equal(compact.Bytes(), got) {
				t.Errorf("body is not compact JSON:\n%s", got)
			}
			var indented bytes.Buffer
			if err := json.Indent(&indented, got, "", "  "); err != nil {
				t.Fatal(err)
			}
			indented.WriteByte('\n')
			checkGolden(t, filepath.Join("testdata", "request", tt.name+".json"), indented.Bytes())
		})
	}
}

func TestEncodeRequestDefaultsMatchEncodeRequestWith(t *testing.T) {
	req := parley.ChatRequest{Model: "m", Messages: toolRound, MaxTokens: 9}
	a, err := EncodeRequest(&req, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeRequestWith(&req, true, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("EncodeRequest differs from the zero options:\n%s\n%s", a, b)
	}
}

// The metadata fields and the defaults that must not leak are checked by name, so a golden
// file accepted by mistake cannot hide them.
func TestEncodeRequestNeverSendsMetadata(t *testing.T) {
	got, err := EncodeRequest(&parley.ChatRequest{Model: "m", Messages: toolRound}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"id":"0198`, "session_id", "seq", "run_id", `"model":"gpt-4.1"`, "latency_ms",
		"usage", "success", "resource_id", "created_at", "reasoning_content", `"name":"get_weather","tool_call_id"`, `"name":"get_time","tool_call_id"`, "stream_options"} {
		if strings.Contains(string(got), key) {
			t.Errorf("body contains %s:\n%s", key, got)
		}
	}
}

func TestEncodeRequestErrors(t *testing.T) {
	user := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("x")}}
	tests := []struct {
		name string
		req  *parley.ChatRequest
		want string
	}{
		{"nil", nil, "no request"},
		{"no model", &parley.ChatRequest{Messages: user}, "model is required"},
		{"no messages", &parley.ChatRequest{Model: "m"}, "no messages"},
		{"bad role", &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: "robot", Content: parley.Text("x")}}}, `message 0: unknown role "robot"`},
		{"bad part", &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Parts(parley.Part{Type: "audio"})}}}, `message 0: content part 0: unknown type "audio"`},
		{"image without url", &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Parts(parley.Part{Type: "image_url"})}}}, "message 0: content part 0: image_url needs a url"},
		{"tool without name", &parley.ChatRequest{Model: "m", Messages: user, Tools: []parley.ToolSpec{{}}}, "a tool has no name"},
		{"bad schema", &parley.ChatRequest{Model: "m", Messages: user, Tools: []parley.ToolSpec{{Name: "t", Parameters: json.RawMessage(`{"type":`)}}}, `tool "t": parameters are not valid JSON`},
		{"bad tool_choice", &parley.ChatRequest{Model: "m", Messages: user, ToolChoice: "always"}, `unknown tool_choice "always"`},
		{"negative max tokens", &parley.ChatRequest{Model: "m", Messages: user, MaxTokens: -1}, "max_tokens must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := EncodeRequest(tt.req, false)
			if err == nil {
				t.Fatalf("no error; body %s", body)
			}
			if parley.CodeOf(err) != parley.ECInvalid || parley.MessageOf(err) != tt.want {
				t.Errorf("got %v (%s, %q), want invalid %q", err, parley.CodeOf(err), parley.MessageOf(err), tt.want)
			}
		})
	}
}
