package ollama

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/golden"
)

// TestEncodeRequestGolden: history in, request body out, for each testdata/request case.
func TestEncodeRequestGolden(t *testing.T) {
	golden.EachRequest(t, func(c *golden.Request) ([]byte, error) {
		var opts Options
		if len(c.Options) > 0 {
			if err := json.Unmarshal(c.Options, &opts); err != nil {
				t.Fatal(err)
			}
		}
		return EncodeRequest(c.ChatRequest(), opts)
	})
}

// TestStreamGolden: an /api/chat NDJSON stream in, provider-agnostic events out.
func TestStreamGolden(t *testing.T) {
	golden.EachStream(t, ".ndjson", func(body io.ReadCloser) parley.Stream { return NewStream(body) })
}
