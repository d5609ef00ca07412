package uistream

import (
	"encoding/json"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// FuzzRequest decodes and checks arbitrary bodies: never a panic; a refusal is always a 400
// (invalid) with a message; an accepted request has a valid chat id, a user message last, and a
// turn whose text is that message's text parts.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(`{"id":"abc","messages":[{"id":"m","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"submit-message"}`))
	f.Add([]byte(`{"id":"abc","messages":[{"role":"user","parts":[{"type":"file","mediaType":"image/png","url":"data:image/png;base64,AA=="}]}],"trigger":"regenerate-message","messageId":"x"}`))
	f.Add([]byte(`{"id":"","messages":null}`))
	f.Add([]byte(`{"id":"a","messages":[{"role":"assistant","parts":[]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r Request
		if json.Unmarshal(body, &r) != nil {
			return
		}
		err := r.Check()
		if err != nil {
			if parley.CodeOf(err) != parley.ECInvalid || parley.MessageOf(err) == "" {
				t.Fatalf("refusal %v is not a 400 with a reason", err)
			}
			return
		}
		last := r.Messages[len(r.Messages)-1]
		if !ValidChatID(r.ID) || last.Role != "user" {
			t.Fatalf("accepted %q", body)
		}
		var text []string
		images := 0
		for _, p := range last.Parts {
			switch p.Type {
			case "text":
				text = append(text, p.Text)
			case "file":
				images++
			}
		}
		if r.Turn.Message != strings.Join(text, "\n") || len(r.Turn.BinaryContent) != images {
			t.Fatalf("turn %+v from %q", r.Turn, body)
		}
		for _, p := range r.Turn.BinaryContent {
			if p.Type != "image_url" || p.ImageURL == nil {
				t.Fatalf("turn part %+v", p)
			}
		}
	})
}
