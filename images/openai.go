package images

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// OpenAI is OpenAI's images API: POST /v1/images/generations (JSON) and POST /v1/images/edits
// (multipart, the image and an optional mask), both asking for response_format b64_json.
type OpenAI struct {
	BaseURL string // default https://api.openai.com/v1
	APIKey  string
	Model   string // e.g. dall-e-2, dall-e-3, gpt-image-1
	Client  *http.Client
	// NoResponseFormat leaves response_format out (gpt-image-1 always answers b64_json and
	// refuses the parameter).
	NoResponseFormat bool
}

func (o *OpenAI) Name() string { return "openai" }

func (o *OpenAI) base() string {
	if o.BaseURL == "" {
		return "https://api.openai.com/v1"
	}
	return strings.TrimSuffix(o.BaseURL, "/")
}

type openAIAnswer struct {
	Data []struct {
		B64JSON       string `json:"b64_json"`
		RevisedPrompt string `json:"revised_prompt"`
	} `json:"data"`
	OutputFormat string `json:"output_format"`
}

func (o *OpenAI) Generate(ctx context.Context, r Request) ([]Image, error) {
	var (
		req *http.Request
		err error
	)
	if r.Image == nil {
		body := map[string]any{"model": o.Model, "prompt": r.Prompt, "n": r.N}
		if r.Size != "" {
			body["size"] = r.Size
		}
		if !o.NoResponseFormat {
			body["response_format"] = "b64_json"
		}
		b, _ := json.Marshal(body)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, o.base()+"/images/generations", bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
	} else {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		field := func(k, v string) { _ = mw.WriteField(k, v) }
		field("model", o.Model)
		field("prompt", r.Prompt)
		field("n", strconv.Itoa(r.N))
		if r.Size != "" {
			field("size", r.Size)
		}
		if !o.NoResponseFormat {
			field("response_format", "b64_json")
		}
		for _, f := range []struct {
			name string
			in   *Input
		}{{"image", r.Image}, {"mask", r.Mask}} {
			if f.in == nil {
				continue
			}
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, f.name, f.name+ext(f.in.MediaType)))
			h.Set("Content-Type", f.in.MediaType)
			pw, err := mw.CreatePart(h)
			if err != nil {
				return nil, err
			}
			_, _ = pw.Write(f.in.Data)
		}
		_ = mw.Close()
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, o.base()+"/images/edits", &buf)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", mw.FormDataContentType())
	}
	req.Header.Set("Authorization", "Bearer "+o.APIKey)
	var ans openAIAnswer
	if err := do(o.Client, req, "openai", &ans); err != nil {
		return nil, err
	}
	mt := "image/png"
	if ans.OutputFormat != "" {
		mt = "image/" + ans.OutputFormat
	}
	var out []Image
	for i, d := range ans.Data {
		if d.B64JSON == "" {
			return nil, fmt.Errorf("openai image API: data[%d] has no b64_json", i)
		}
		b, err := base64.StdEncoding.DecodeString(d.B64JSON)
		if err != nil {
			return nil, fmt.Errorf("openai image API: data[%d]: bad base64: %w", i, err)
		}
		out = append(out, Image{MediaType: mt, Data: b, Revised: d.RevisedPrompt})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("openai image API: %w", errNoImage)
	}
	return out, nil
}

func ext(mediaType string) string {
	switch mediaType {
	case "image/jpeg":
		return ".jpg"
	case "image/webp":
		return ".webp"
	case "image/gif":
		return ".gif"
	default:
		return ".png"
	}
}
