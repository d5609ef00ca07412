package llmtest_test

import (
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/anthropic"
	"github.com/parleyhq/parley/provider/gemini"
	"github.com/parleyhq/parley/provider/ollama"
	"github.com/parleyhq/parley/provider/openai"
)

// fileRequest holds a user message with a resolved document (a file part with data and its
// text) and a reference nobody resolved (a file part with an id only).
func fileRequest() *parley.ChatRequest {
	return &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Parts(
		parley.Part{Type: "text", Text: "Read this"},
		parley.Part{Type: "file", File: &parley.FileRef{Filename: "a.pdf", FileData: "data:application/pdf;base64,JVBERi0xLjQ=", Text: "the extracted text"}},
		parley.Part{Type: "file", File: &parley.FileRef{FileID: "0193-parley-id", Filename: "b.pdf"}},
	)}}}
}

// TestFilePartsInEachFormat: each adapter's encoding of file parts, at the unit level (the
// end-to-end path is cmd/parley's TestAttachmentsReachEachProvider).
func TestFilePartsInEachFormat(t *testing.T) {
	enc := map[string]func() ([]byte, error){
		"openai": func() ([]byte, error) { return openai.EncodeRequestWith(fileRequest(), false, openai.EncodeOptions{}) },
		"openai documents_as_text": func() ([]byte, error) {
			return openai.EncodeRequestWith(fileRequest(), false, openai.EncodeOptions{DocumentsAsText: true})
		},
		"anthropic": func() ([]byte, error) { return anthropic.EncodeRequest(fileRequest(), false, anthropic.Options{}) },
		"gemini":    func() ([]byte, error) { return gemini.EncodeRequest(fileRequest(), gemini.Options{}) },
		"ollama":    func() ([]byte, error) { return ollama.EncodeRequest(fileRequest(), ollama.Options{}) },
	}
	want := map[string][]string{
		"openai": {`{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0xLjQ="}}`,
			`{"type":"text","text":"[Attached file \"b.pdf\"]"}`},
		"openai documents_as_text": {`{"type":"text","text":"the extracted text"}`, `{"type":"text","text":"[Attached file \"b.pdf\"]"}`},
		"anthropic": {`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQ="},"title":"a.pdf"}`,
			`{"type":"text","text":"[Attached file \"b.pdf\"]"}`},
		"gemini": {`{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0xLjQ="}}`, `{"text":"[Attached file \"b.pdf\"]"}`},
		"ollama": {`"content":"Read this\nthe extracted text\n[Attached file \"b.pdf\"]"`},
	}
	for name, f := range enc {
		b, err := f()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, w := range want[name] {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: the body lacks %s:\n%s", name, w, b)
			}
		}
		if strings.Contains(string(b), "0193-parley-id") {
			t.Errorf("%s: a Parley file id reached the provider: %s", name, b)
		}
		if name == "ollama" || name == "openai documents_as_text" {
			if strings.Contains(string(b), "JVBERi0xLjQ=") {
				t.Errorf("%s: the document's bytes were sent to a provider without document input", name)
			}
		}
	}
}
