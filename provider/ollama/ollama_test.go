package ollama

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

// TestStreamGolden: an /api/chat NDJSON stream in, provider-agnostic events out.
func TestStreamGolden(t *testing.T) {
	golden.EachStream(t, ".ndjson", func(body io.ReadCloser) parley.Stream { return NewStream(body) })
}

// BenchmarkStream decodes an answer of 1,000 content lines and a line of two tool calls: the
// adapter's cost per streamed event.
func BenchmarkStream(b *testing.B) {
	var sb strings.Builder
	for range 1000 {
		sb.WriteString(`{"model":"llama3.2","created_at":"2025-08-04T08:52:19.385406455-07:00","message":{"role":"assistant","content":"Hello, wörld "},"done":false}` + "\n")
	}
	sb.WriteString(`{"model":"llama3.2","created_at":"2025-08-04T08:52:19Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"k":1}}},{"function":{"name":"g","arguments":{}}}]},"done":false}` + "\n")
	sb.WriteString(`{"model":"llama3.2","created_at":"2025-08-04T08:52:20Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":26,"eval_count":1200}` + "\n")
	golden.BenchStream(b, []byte(sb.String()), 1004, NewStream)
}
