package gemini

import (
	"io"
	"strings"
	"testing"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/golden"
)

// TestEncodeRequestGolden: history in, request body out, for each testdata/request case.
func TestEncodeRequestGolden(t *testing.T) {
	golden.EachRequest(t, func(c *golden.Request) ([]byte, error) {
		return EncodeRequest(c.ChatRequest(), golden.Options[Options](t, c))
	})
}

// TestStreamGolden: an upstream event stream in, provider-agnostic events out.
func TestStreamGolden(t *testing.T) {
	golden.EachStream(t, ".sse", func(body io.ReadCloser) parley.Stream { return NewStream(body) })
}

// TestDecodeResponse: a generateContent answer (not streamed) gives the same response as the
// same parts streamed.
func TestDecodeResponse(t *testing.T) {
	body := `{"candidates": [{"content": {"parts": [{"text": "Thinking about it.", "thought": true}, {"text": "Calling."},
		{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}], "role": "model"},
		"finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 7, "totalTokenCount": 22}}`
	r, err := DecodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "Calling." || r.Reasoning != "Thinking about it." || r.FinishReason != "tool_calls" || len(r.ToolCalls) != 1 {
		t.Fatalf("response %+v", r)
	}
	c := r.ToolCalls[0]
	if c.Function.Name != "get_weather" || c.Function.Arguments != `{"city": "Paris"}` || c.ThoughtSignature() != "c2ln" {
		t.Fatalf("call %+v", c)
	}
	if *r.Usage != (parley.Usage{PromptTokens: 10, CompletionTokens: 12, TotalTokens: 22, ReasoningTokens: 7}) {
		t.Fatalf("usage %+v", *r.Usage)
	}
	if _, err := DecodeResponse([]byte(`{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}`)); parley.CodeOf(err) != parley.ECUpstream {
		t.Fatalf("error body: %v", err)
	}
}

// BenchmarkStream decodes an answer of 1,000 text chunks and a chunk of two function calls: the
// adapter's cost per streamed event.
func BenchmarkStream(b *testing.B) {
	var sb strings.Builder
	for range 1000 {
		sb.WriteString(`data: {"candidates": [{"content": {"parts": [{"text": "Hello, wörld "}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"totalTokenCount": 8},"modelVersion": "gemini-2.5-flash","responseId": "r1"}` + "\r\n\r\n")
	}
	sb.WriteString(`data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f","args": {"k": 1}},"thoughtSignature": "c2ln"},{"functionCall": {"name": "g","args": {}}}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 1200,"totalTokenCount": 1208}}` + "\r\n\r\n")
	golden.BenchStream(b, []byte(sb.String()), 1004, NewStream)
}
