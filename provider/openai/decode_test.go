package openai

import (
	"encoding/json"
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

// TestChunkDecoderReusesNothingStale: the decoder decodes every chunk into the same choices; a
// chunk must not show what the one before it had (a finish, a tool call, reasoning, usage).
func TestChunkDecoderReusesNothingStale(t *testing.T) {
	d := newChunkDecoder()
	first := `{"choices":[{"index":0,"delta":{"reasoning_content":"hm","content":"a","tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"},{"index":1,"delta":{"content":"other"}}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`
	evs, err := d.decode(nil, []byte(first))
	if err != nil || len(evs) != 5 {
		t.Fatalf("first chunk: %d events %+v, %v; want reasoning, content, tool call, finish, usage", len(evs), evs, err)
	}
	evs, err = d.decode(evs[:0], []byte(`{"choices":[{"index":0,"delta":{"content":"b"}}]}`))
	if err != nil || len(evs) != 1 || evs[0].Type != parley.StreamContent || evs[0].Content != "b" {
		t.Fatalf("second chunk: %+v, %v; want only the content b", evs, err)
	}
	evs, err = d.decode(evs[:0], []byte(`{"choices":[]}`))
	if err != nil || len(evs) != 0 {
		t.Fatalf("a chunk without choices: %+v, %v", evs, err)
	}
}

// TestJSONString: the fast path for plain text gives what encoding/json gives, and escapes and
// invalid UTF-8 still go through encoding/json.
func TestJSONString(t *testing.T) {
	for _, in := range []string{`""`, `"plain text"`, `"wörld 🌍"`, `"a\"b\\c\n\u00e9\ud83c\udf0d"`, "\"bad \xff utf-8\"", `"\/"`} {
		var want string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		got, err := jsonString([]byte(in))
		if err != nil || got != want {
			t.Errorf("jsonString(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
