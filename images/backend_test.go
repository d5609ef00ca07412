package images

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/parleyhq/parley/files/filestest"
)

var ctx = context.Background()

// fake is an image API upstream: it records each request and answers with handle.
func fake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) (*httptest.Server, *[]*http.Request) {
	t.Helper()
	var reqs []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		reqs = append(reqs, r)
		handle(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &reqs
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var png = filestest.PNG(4, 4)
var b64 = base64.StdEncoding.EncodeToString(png)

func TestOpenAIGenerations(t *testing.T) {
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/images/generations" || r.Header.Get("Authorization") != "Bearer sk-test" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s %v", r.Method, r.URL.Path, r.Header)
		}
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			t.Error(err)
		}
		if in["model"] != "dall-e-3" || in["prompt"] != "a red fox" || in["n"] != float64(2) || in["size"] != "1024x1024" || in["response_format"] != "b64_json" {
			t.Errorf("body %s", body)
		}
		writeJSON(w, 200, map[string]any{"created": 1713833628, "data": []any{
			map[string]any{"b64_json": b64, "revised_prompt": "a red fox, photo"}, map[string]any{"b64_json": b64}}})
	})
	o := &OpenAI{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Model: "dall-e-3"}
	imgs, err := o.Generate(ctx, Request{Prompt: "a red fox", Size: "1024x1024", N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 || !bytes.Equal(imgs[0].Data, png) || imgs[0].MediaType != "image/png" || imgs[0].Revised != "a red fox, photo" {
		t.Fatalf("images %+v", imgs)
	}
}

func TestOpenAIEditsMultipart(t *testing.T) {
	mask := filestest.PNG(4, 4)
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/v1/images/edits" {
			t.Errorf("path %s", r.URL.Path)
		}
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/form-data" {
			t.Fatalf("content type %q", r.Header.Get("Content-Type"))
		}
		form, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).ReadForm(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"model": "dall-e-2", "prompt": "add a hat", "n": "1", "size": "512x512", "response_format": "b64_json"} {
			if got := form.Value[k]; len(got) != 1 || got[0] != want {
				t.Errorf("field %s = %v, want %q", k, got, want)
			}
		}
		for _, k := range []string{"image", "mask"} {
			fh := form.File[k]
			if len(fh) != 1 || fh[0].Header.Get("Content-Type") != "image/png" || !strings.HasSuffix(fh[0].Filename, ".png") {
				t.Fatalf("file %s: %+v", k, fh)
			}
			f, _ := fh[0].Open()
			b, _ := io.ReadAll(f)
			if !bytes.Equal(b, png) {
				t.Errorf("file %s: bytes differ", k)
			}
		}
		writeJSON(w, 200, map[string]any{"created": 1, "data": []any{map[string]any{"b64_json": b64}}})
	})
	o := &OpenAI{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "dall-e-2"}
	in := &Input{MediaType: "image/png", Data: png}
	imgs, err := o.Generate(ctx, Request{Prompt: "add a hat", Size: "512x512", N: 1, Image: in, Mask: &Input{MediaType: "image/png", Data: mask}})
	if err != nil || len(imgs) != 1 {
		t.Fatalf("%v %v", imgs, err)
	}
}

// The documented error answers of each API, 429 included.
func TestErrorShapes(t *testing.T) {
	openAIErr := func(status int, retry string) func(w http.ResponseWriter, r *http.Request, _ []byte) {
		return func(w http.ResponseWriter, r *http.Request, _ []byte) {
			if retry != "" {
				w.Header().Set("Retry-After", retry)
			}
			code := any("rate_limit_exceeded")
			if status == 400 {
				code = "content_policy_violation"
			}
			writeJSON(w, status, map[string]any{"error": map[string]any{"message": "msg " + http.StatusText(status), "type": "invalid_request_error", "param": nil, "code": code}})
		}
	}
	geminiErr := func(status int, st string) func(w http.ResponseWriter, r *http.Request, _ []byte) {
		return func(w http.ResponseWriter, r *http.Request, _ []byte) {
			writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": "msg " + http.StatusText(status), "status": st}})
		}
	}
	orErr := func(status int) func(w http.ResponseWriter, r *http.Request, _ []byte) {
		return func(w http.ResponseWriter, r *http.Request, _ []byte) {
			writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": "msg " + http.StatusText(status), "metadata": map[string]any{"provider_name": "Google"}}})
		}
	}
	cases := []struct {
		name    string
		handle  func(w http.ResponseWriter, r *http.Request, _ []byte)
		backend func(url string) Backend
		status  int
		code    string
		retry   bool
	}{
		{"openai 429", openAIErr(429, "7"), func(u string) Backend { return &OpenAI{BaseURL: u, Model: "m"} }, 429, "rate_limit_exceeded", true},
		{"openai 400", openAIErr(400, ""), func(u string) Backend { return &OpenAI{BaseURL: u, Model: "m"} }, 400, "content_policy_violation", false},
		{"gemini 429", geminiErr(429, "RESOURCE_EXHAUSTED"), func(u string) Backend { return &Gemini{BaseURL: u, Model: "m"} }, 429, "RESOURCE_EXHAUSTED", false},
		{"gemini 400", geminiErr(400, "INVALID_ARGUMENT"), func(u string) Backend { return &Gemini{BaseURL: u, Model: "m"} }, 400, "INVALID_ARGUMENT", false},
		{"openrouter 429", orErr(429), func(u string) Backend { return &OpenRouter{BaseURL: u, Model: "m"} }, 429, "429", false},
		{"openrouter 402", orErr(402), func(u string) Backend { return &OpenRouter{BaseURL: u, Model: "m"} }, 402, "402", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := fake(t, c.handle)
			_, err := c.backend(srv.URL).Generate(ctx, Request{Prompt: "p", N: 1})
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an APIError", err)
			}
			if ae.Status != c.status || ae.Code != c.code || ae.Message != "msg "+http.StatusText(c.status) || ae.RateLimited() != (c.status == 429) {
				t.Fatalf("%+v", ae)
			}
			if c.retry && ae.RetryAfter.Seconds() != 7 {
				t.Fatalf("retry after %v", ae.RetryAfter)
			}
		})
	}
}

func TestGeminiInlineData(t *testing.T) {
	srv, reqs := fake(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/v1beta/models/gemini-2.5-flash-image:generateContent" || r.Header.Get("x-goog-api-key") != "g-key" {
			t.Errorf("request %s %v", r.URL.Path, r.Header)
		}
		var in struct {
			Contents []struct {
				Role  string       `json:"role"`
				Parts []geminiPart `json:"parts"`
			} `json:"contents"`
			GenerationConfig struct {
				ResponseModalities []string `json:"responseModalities"`
			} `json:"generationConfig"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatal(err)
		}
		if len(in.Contents) != 1 || in.Contents[0].Role != "user" || !strings.HasPrefix(in.Contents[0].Parts[0].Text, "make it blue") ||
			strings.Join(in.GenerationConfig.ResponseModalities, ",") != "TEXT,IMAGE" {
			t.Errorf("body %s", body)
		}
		if len(in.Contents[0].Parts) != 2 || in.Contents[0].Parts[1].InlineData == nil || in.Contents[0].Parts[1].InlineData.Data != b64 ||
			in.Contents[0].Parts[1].InlineData.MimeType != "image/png" {
			t.Errorf("the image to edit was not sent as inlineData: %s", body)
		}
		writeJSON(w, 200, map[string]any{"candidates": []any{map[string]any{
			"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Here it is."}, map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": b64}}}},
			"finishReason": "STOP"}},
			"usageMetadata": map[string]any{"promptTokenCount": 10}})
	})
	g := &Gemini{BaseURL: srv.URL, APIKey: "g-key", Model: "gemini-2.5-flash-image"}
	imgs, err := g.Generate(ctx, Request{Prompt: "make it blue", N: 2, Image: &Input{MediaType: "image/png", Data: png}})
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 || len(*reqs) != 2 || !bytes.Equal(imgs[1].Data, png) || imgs[1].MediaType != "image/png" {
		t.Fatalf("%d images in %d calls", len(imgs), len(*reqs))
	}
}

func TestGeminiBlockedPrompt(t *testing.T) {
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 200, map[string]any{"promptFeedback": map[string]any{"blockReason": "SAFETY"}})
	})
	_, err := (&Gemini{BaseURL: srv.URL, Model: "m"}).Generate(ctx, Request{Prompt: "p", N: 1})
	if !errors.Is(err, errNoImage) || !strings.Contains(err.Error(), "SAFETY") {
		t.Fatalf("%v", err)
	}
}

func TestOpenRouterImages(t *testing.T) {
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/api/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer or-key" {
			t.Errorf("request %s %v", r.URL.Path, r.Header)
		}
		var in struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Type     string `json:"type"`
					Text     string `json:"text"`
					ImageURL struct {
						URL string `json:"url"`
					} `json:"image_url"`
				} `json:"content"`
			} `json:"messages"`
			Modalities []string `json:"modalities"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatal(err)
		}
		if in.Model != "google/gemini-2.5-flash-image" || strings.Join(in.Modalities, ",") != "image,text" || len(in.Messages) != 1 ||
			in.Messages[0].Content[0].Type != "text" || in.Messages[0].Content[1].ImageURL.URL != "data:image/png;base64,"+b64 {
			t.Errorf("body %s", body)
		}
		writeJSON(w, 200, map[string]any{"id": "gen-1", "object": "chat.completion", "choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "Done.", "images": []any{
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + b64}}}}}}})
	})
	o := &OpenRouter{BaseURL: srv.URL + "/api/v1", APIKey: "or-key", Model: "google/gemini-2.5-flash-image"}
	imgs, err := o.Generate(ctx, Request{Prompt: "p", N: 1, Image: &Input{MediaType: "image/png", Data: png}})
	if err != nil || len(imgs) != 1 || !bytes.Equal(imgs[0].Data, png) || imgs[0].MediaType != "image/png" {
		t.Fatalf("%v %v", imgs, err)
	}
}

func TestOpenRouterNoImage(t *testing.T) {
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 200, map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "I cannot draw."}}}})
	})
	_, err := (&OpenRouter{BaseURL: srv.URL, Model: "m"}).Generate(ctx, Request{Prompt: "p", N: 1})
	if !errors.Is(err, errNoImage) {
		t.Fatalf("%v", err)
	}
}
