package openai

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parleyhq/parley"
)

func TestDecodeResponseGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "response", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, file := range files {
		if strings.HasSuffix(file, ".golden.json") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Response *parley.Response `json:"response,omitempty"`
				Error    *goldenEnd       `json:"error,omitempty"`
			}
			r, err := DecodeResponse(body)
			if err != nil {
				out.Error = &goldenEnd{Code: parley.CodeOf(err), Message: parley.MessageOf(err), Log: err.Error()}
			} else {
				out.Response = r
			}
			checkGolden(t, filepath.Join("testdata", "response", name+".golden.json"), indentJSON(t, out))
		})
	}
	if n == 0 {
		t.Fatal("no fixtures")
	}
}

func TestDecodeResponse(t *testing.T) {
	tests := []struct {
		name string
		body string
		want parley.Response
		code parley.ErrorCode
	}{
		{
			name: "refusal becomes content",
			body: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`,
			want: parley.Response{Content: "I can't help with that.", FinishReason: "stop"},
		},
		{
			name: "content as parts",
			body: `{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"x"},{"type":"text","text":"b"}]},"finish_reason":"stop"}]}`,
			want: parley.Response{Content: "ab", FinishReason: "stop"},
		},
		{
			name: "missing type and total",
			body: `{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
			want: parley.Response{
				ToolCalls:    []parley.ToolCall{{ID: "c", Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: "{}"}}},
				FinishReason: "tool_calls",
				Usage:        &parley.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7},
			},
		},
		{
			name: "reasoning_content preferred over reasoning",
			body: `{"choices":[{"message":{"content":"x","reasoning_content":"A","reasoning":"B"}}]}`,
			want: parley.Response{Content: "x", Reasoning: "A"},
		},
		{name: "content of a wrong type", body: `{"choices":[{"message":{"content":5}}]}`, code: parley.ECUpstream},
		{name: "error as a string", body: `{"error":"model overloaded"}`, code: parley.ECUpstream},
		{name: "empty body", body: ``, code: parley.ECUpstream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeResponse([]byte(tt.body))
			if tt.code != "" {
				if parley.CodeOf(err) != tt.code {
					t.Fatalf("err = %v, want code %s", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(indentJSON(t, r)), string(indentJSON(t, tt.want)); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}
