package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/provider/llmtest"
)

// uploadFiles posts files (name → bytes, in order of names) to a server without auth and returns
// their ids.
func uploadFiles(t *testing.T, url string, names []string, data map[string][]byte) []string {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, n := range names {
		w, _ := mw.CreateFormFile("file", n)
		w.Write(data[n])
	}
	mw.Close()
	resp, err := http.Post(url+"/api/v1/files", mw.FormDataContentType(), &b)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Files []parley.File `json:"files"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || json.Unmarshal(raw, &out) != nil || len(out.Files) != len(names) {
		t.Fatalf("upload: %d %s", resp.StatusCode, raw)
	}
	ids := make([]string, len(out.Files))
	for i, f := range out.Files {
		ids[i] = f.ID
	}
	return ids
}

// chatWithFiles runs one batch chat and returns its session.
func chatWithFiles(t *testing.T, url, session, model, message string, fileIDs []string) string {
	t.Helper()
	body := map[string]any{"message": message, "model": model}
	if session != "" {
		body["session_id"] = session
	}
	if fileIDs != nil {
		body["file_ids"] = fileIDs
	}
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/chat", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		SessionID string `json:"session_id"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("%s chat: %d %s", model, resp.StatusCode, raw)
	}
	return out.SessionID
}

// TestAttachmentsReachEachProvider uploads an image, a PDF and a Markdown file, attaches them to a
// chat with each provider format, and checks the request body the fake upstream received: the
// image as that format's image part, the PDF as its document input (Anthropic document block,
// Gemini inline data, OpenAI file part) or as extracted text (Ollama), the Markdown as text with
// its name. A second turn in the same session sends them again, rebuilt from the blob store;
// the stored history holds references only, and stays valid.
func TestAttachmentsReachEachProvider(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	url := startInProcess(t, map[string]string{"TEST_ANTHROPIC_KEY": "sk-ant-test"}, "--config", fourProviders(t, hs.URL),
		"--attachment-text-bytes", "200")

	img := filestest.PNG(5, 5)
	pdf := filestest.PDF("Quarterly revenue grew by 12 percent")
	notes := []byte("# Meeting notes\n\nShip the files API.\n" + strings.Repeat("filler line\n", 40))
	data := map[string][]byte{"chart.png": img, "report.pdf": pdf, "notes.md": notes}
	b64img, b64pdf := base64.StdEncoding.EncodeToString(img), base64.StdEncoding.EncodeToString(pdf)

	cases := []struct {
		model string
		want  []string // substrings of the raw request body
		not   []string
	}{
		{"oa/gpt-4o", []string{
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64img + `"}}`,
			`{"type":"file","file":{"filename":"report.pdf","file_data":"data:application/pdf;base64,` + b64pdf + `"}}`,
		}, nil},
		{"claude/claude-sonnet-4-5", []string{
			`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64img + `"}}`,
			`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + b64pdf + `"},"title":"report.pdf"}`,
		}, nil},
		{"gem/gemini-3-pro-preview", []string{
			`{"inlineData":{"mimeType":"image/png","data":"` + b64img + `"}}`,
			`{"inlineData":{"mimeType":"application/pdf","data":"` + b64pdf + `"}}`,
		}, nil},
		{"local/qwen3", []string{
			`"images":["` + b64img + `"]`,
			`Quarterly revenue grew by 12 percent`,
		}, []string{b64pdf}},
	}
	for _, c := range cases {
		t.Run(strings.Split(c.model, "/")[0], func(t *testing.T) {
			ids := uploadFiles(t, url, []string{"chart.png", "report.pdf", "notes.md"}, data)
			fake.Enqueue(llmtest.Turn{Content: "I see a chart, a report and notes."}, llmtest.Turn{Content: "Still here."})
			n := len(fake.Requests())
			session := chatWithFiles(t, url, "", c.model, "What is in these files?", ids)
			session = chatWithFiles(t, url, session, c.model, "And again?", nil)
			reqs := fake.Requests()[n:]
			if len(reqs) != 2 {
				t.Fatalf("%d upstream requests, want 2", len(reqs))
			}
			for turn, r := range reqs {
				raw := string(r.Raw)
				for _, w := range append(c.want, `Attached file \"notes.md\" (text/markdown`, "# Meeting notes", "[The file was cut: only its first 200 of") {
					if !strings.Contains(raw, w) {
						t.Errorf("turn %d: the request body lacks %.120s", turn+1, w)
					}
				}
				for _, w := range c.not {
					if strings.Contains(raw, w) {
						t.Errorf("turn %d: the request body holds %.60s…", turn+1, w)
					}
				}
			}
			msgs := validHistory(t, url, session)
			stored, _ := json.Marshal(msgs[0].Content)
			if strings.Contains(string(stored), "base64") || !strings.Contains(string(stored), `"file_id":"`+ids[1]+`","filename":"report.pdf"`) {
				t.Fatalf("the stored user message must hold references, not bytes: %s", stored)
			}
		})
	}
	if t.Failed() {
		for _, r := range fake.Requests() {
			fmt.Printf("%.600s\n", r.Raw)
		}
	}
}
