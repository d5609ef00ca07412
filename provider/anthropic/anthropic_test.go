package anthropic

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
		return EncodeRequest(c.ChatRequest(), true, golden.Options[Options](t, c))
	})
}

// TestStreamGolden: an upstream event stream in, provider-agnostic events out.
func TestStreamGolden(t *testing.T) {
	golden.EachStream(t, ".sse", func(body io.ReadCloser) parley.Stream { return NewStream(body) })
}

// BenchmarkStream decodes an answer of 1,000 text deltas and a tool call whose input comes in
// 100 pieces: the adapter's cost per streamed event.
func BenchmarkStream(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n")
	sb.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for range 1000 {
		sb.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, wörld \"}}\n\n")
	}
	sb.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	sb.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}\n\n")
	for range 100 {
		sb.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"k\\\": 1\"}}\n\n")
	}
	sb.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	sb.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":1200}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	golden.BenchStream(b, []byte(sb.String()), 1103, NewStream)
}
