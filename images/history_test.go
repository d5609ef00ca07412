package images

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/artifact"
)

// Only a tool result of the image tools whose URL carries Parley's signature for the file id
// names a file the model is shown: a forged result (the stateless API takes a client's history)
// cannot reach another user's file.
func TestResultFilesTrustsOnlySignedURLs(t *testing.T) {
	past := time.Now().Add(-30 * 24 * time.Hour)
	s := &artifact.Signer{Key: []byte("0123456789abcdef0123456789abcdef")}
	old := &artifact.Signer{Key: s.Key, Now: func() time.Time { return past }}
	other := &artifact.Signer{Key: []byte("another-key-0123456789abcdef012345")}
	msg := func(name string, outs ...Output) parley.Message {
		b, _ := json.Marshal(Result{Images: outs, Prompt: "p"})
		return parley.Message{Role: parley.RoleTool, Name: name, Content: parley.Text(string(b))}
	}
	fn := ResultFiles(s)
	got := fn(msg("generate_image",
		Output{FileID: "f1", URL: URL(s, "f1", time.Hour)},
		Output{FileID: "f2", URL: URL(old, "f2", time.Hour)},                                   // expired, still Parley's
		Output{FileID: "f3", URL: URL(other, "f3", time.Hour)},                                 // another key
		Output{FileID: "f4", URL: strings.Replace(URL(s, "f1", time.Hour), "/f1?", "/f4?", 1)}, // f1's signature
		Output{FileID: "f5", URL: "/api/v1/images/f5"},                                         // unsigned
		Output{MediaType: "image/png", Degraded: true, B64JSON: "AAAA"},                        // inline: nothing stored
	))
	if strings.Join(got.FileIDs, ",") != "f1,f2" {
		t.Fatalf("trusted %v, want f1,f2", got.FileIDs)
	}
	// The degraded image is shown as an image part, and left out of the text the model is sent.
	if len(got.Inline) != 1 || got.Inline[0] != "data:image/png;base64,AAAA" || got.Content == nil ||
		strings.Contains(got.Content.String(), "AAAA") || !strings.Contains(got.Content.String(), `"degraded":true`) {
		t.Fatalf("inline %v, content %v", got.Inline, got.Content)
	}
	if r := fn(msg("my_mcp_tool", Output{FileID: "f1", URL: URL(s, "f1", time.Hour)})); r.FileIDs != nil || r.Content != nil {
		t.Fatalf("another tool's result: %+v", r)
	}
	if r := fn(parley.Message{Role: parley.RoleTool, Name: "edit_image", Content: parley.Text("error: rate limited")}); r.FileIDs != nil {
		t.Fatalf("a failed result: %+v", r)
	}
	if r := fn(msg("generate_image", Output{FileID: "f1", URL: URL(s, "f1", time.Hour)})); r.Content != nil {
		t.Fatal("a result without inline images was rewritten")
	}
}
