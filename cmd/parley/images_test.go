package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/provider/llmtest"
)

// fakeOpenAIImages speaks OpenAI's images API (generations, b64_json).
func fakeOpenAIImages(t *testing.T, png []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/v1/images/generations" || r.Header.Get("Authorization") != "Bearer sk-img" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"created": 1, "data": []any{map[string]any{"b64_json": base64.StdEncoding.EncodeToString(png)}}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// generate_image end to end: the image is a file of the session, an image event carries its
// signed URL, the URL serves it without a key, and the next model calls are sent the image as an
// image_url part of a user message after the tool result, which stays a string.
func TestImagesEndToEnd(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	png := filestest.PNG(5, 5)
	imgs := fakeOpenAIImages(t, png)
	base := startInProcess(t, map[string]string{"IMG_KEY": "sk-img"}, "--openai-base-url", hs.URL+"/v1", "--openai-api-key", "sk-test",
		"--model", "openai/gpt-4o", "--image-backend", "openai", "--image-model", "dall-e-2", "--image-base-url", imgs.URL+"/v1",
		"--image-api-key-env", "IMG_KEY")

	names := map[string]bool{}
	for _, tool := range getTools(t, base).Tools {
		names[tool.Name] = true
	}
	if !names["generate_image"] || !names["edit_image"] {
		t.Fatalf("tools: %v", names)
	}

	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_i", Type: "function",
		Function: parley.FunctionCall{Name: "generate_image", Arguments: `{"prompt":"a small red square","size":"256x256"}`}}}},
		llmtest.Turn{Content: "Here is your square."}, llmtest.Turn{Content: "It is red."})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := postStream(t, ctx, base, map[string]any{"message": "Draw a red square."})
	var (
		session string
		img     *parley.ImageInfo
		seqs    []int64
	)
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		seqs = append(seqs, ev.Data.Seq)
		switch ev.Data.Type {
		case parley.EventStart:
			session = ev.Data.SessionID
		case parley.EventImage:
			if ev.Event != "image" {
				t.Errorf("SSE event name %q", ev.Event)
			}
			img = ev.Data.Image
		case parley.EventError:
			t.Errorf("error event: %+v", ev.Data.Error)
		}
		return ev.Data.Type != parley.EventDone
	})
	resp.Body.Close()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("sequence numbers not consecutive: %v", seqs)
		}
	}
	if img == nil || img.FileID == "" || img.Degraded || img.MediaType != "image/png" || img.Prompt != "a small red square" || img.ToolCallID != "call_i" ||
		!strings.HasPrefix(img.URL, "/api/v1/images/"+img.FileID+"?") {
		t.Fatalf("image event: %+v", img)
	}
	// The signed URL needs no key.
	r, err := http.Get(base + img.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !bytes.Equal(got, png) {
		t.Fatalf("GET %s: %d", img.URL, r.StatusCode)
	}
	// The image is a file of the session.
	var list struct {
		Files []parley.File `json:"files"`
	}
	if code := getJSON(t, base+"/api/v1/sessions/"+session+"/files", &list); code != 200 || len(list.Files) != 1 || list.Files[0].ID != img.FileID {
		t.Fatalf("session files: %d %+v", code, list.Files)
	}

	// A later turn: the model is sent the image.
	if _, answer, errs := chatTurn(t, base, session, "", "What colour is it?"); len(errs) > 0 || answer != "It is red." {
		t.Fatalf("answer %q, errors %+v", answer, errs)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests", len(reqs))
	}
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	for _, i := range []int{1, 2} {
		var body struct {
			Messages []struct {
				Role       string          `json:"role"`
				Content    json.RawMessage `json:"content"`
				ToolCallID string          `json:"tool_call_id"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(reqs[i].Raw, &body); err != nil {
			t.Fatal(err)
		}
		at := -1
		for j, m := range body.Messages {
			if m.Role == "tool" && m.ToolCallID == "call_i" {
				at = j
				var s string
				if json.Unmarshal(m.Content, &s) != nil || !strings.Contains(s, img.FileID) {
					t.Fatalf("request %d: the tool result is not a string naming the file: %s", i, m.Content)
				}
			}
		}
		if at < 0 || at+1 >= len(body.Messages) || body.Messages[at+1].Role != "user" {
			t.Fatalf("request %d: no user message after the tool result: %s", i, reqs[i].Raw)
		}
		var parts []struct {
			Type     string `json:"type"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if err := json.Unmarshal(body.Messages[at+1].Content, &parts); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range parts {
			found = found || (p.Type == "image_url" && p.ImageURL.URL == dataURL)
		}
		if !found {
			t.Fatalf("request %d: the image is not an image_url part: %s", i, body.Messages[at+1].Content)
		}
	}
	// The stored history stays OpenAI-valid: the tool message is text, no message was added.
	for _, m := range getMessages(t, base, session) {
		if m.Role == parley.RoleTool && m.Content.IsParts() {
			t.Fatalf("stored tool message has parts: %+v", m)
		}
	}
	if n := len(getMessages(t, base, session)); n != 6 {
		t.Fatalf("%d stored messages, want 6 (user, call, result, answer, user, answer)", n)
	}
}

func TestImageSettingsAreChecked(t *testing.T) {
	for _, args := range [][]string{
		{"--image-backend", "midjourney", "--image-model", "m"},
		{"--image-backend", "openai"},
		{"--image-backend", "gemini", "--image-model", "m", "--image-timeout", "0s"},
	} {
		c := &executorConfig{ImageTimeout: time.Second, ImageURLTTL: time.Hour, ArtifactURLTTL: time.Hour, SearchAttempts: 1, FetchMaxBytes: 1, FetchTimeout: time.Second}
		for i := 0; i+1 < len(args); i += 2 {
			switch args[i] {
			case "--image-backend":
				c.ImageBackend = args[i+1]
			case "--image-model":
				c.ImageModel = args[i+1]
			case "--image-timeout":
				c.ImageTimeout = 0
			}
		}
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "image-") {
			t.Errorf("%v: %v", args, err)
		}
	}
	if _, err := imageBackend(&executorConfig{ImageBackend: "gemini", ImageModel: "m"}, func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "GEMINI_API_KEY") {
		t.Fatalf("missing key: %v", err)
	}
}
