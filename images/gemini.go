package images

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Gemini is Gemini's image output: POST /v1beta/models/{model}:generateContent with
// generationConfig.responseModalities ["TEXT","IMAGE"]; the images come back as inlineData parts.
// One call makes one image, so n images are n calls.
type Gemini struct {
	BaseURL string // default https://generativelanguage.googleapis.com
	APIKey  string
	Model   string // e.g. gemini-2.5-flash-image
	Client  *http.Client
}

func (g *Gemini) Name() string { return "gemini" }

type geminiPart struct {
	Text       string        `json:"text,omitempty"`
	InlineData *geminiInline `json:"inlineData,omitempty"`
}

type geminiInline struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

func (g *Gemini) Generate(ctx context.Context, r Request) ([]Image, error) {
	base := g.BaseURL
	if base == "" {
		base = "https://generativelanguage.googleapis.com"
	}
	prompt := r.Prompt
	if r.Size != "" {
		prompt += "\n\n(Image size: " + r.Size + ".)"
	}
	parts := []geminiPart{{Text: prompt}}
	for _, in := range []*Input{r.Image, r.Mask} {
		if in != nil {
			parts = append(parts, geminiPart{InlineData: &geminiInline{MimeType: in.MediaType, Data: base64.StdEncoding.EncodeToString(in.Data)}})
		}
	}
	if r.Mask != nil {
		parts[0].Text += "\n\nThe second image is a mask: change only where it is transparent."
	}
	body, _ := json.Marshal(map[string]any{
		"contents":         []any{map[string]any{"role": "user", "parts": parts}},
		"generationConfig": map[string]any{"responseModalities": []string{"TEXT", "IMAGE"}},
	})
	endpoint := strings.TrimSuffix(base, "/") + "/v1beta/models/" + url.PathEscape(g.Model) + ":generateContent"
	var out []Image
	for len(out) < r.N {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-goog-api-key", g.APIKey)
		var ans struct {
			Candidates []struct {
				Content struct {
					Parts []geminiPart `json:"parts"`
				} `json:"content"`
				FinishReason string `json:"finishReason"`
			} `json:"candidates"`
			PromptFeedback *struct {
				BlockReason string `json:"blockReason"`
			} `json:"promptFeedback"`
		}
		if err := do(g.Client, req, "gemini", &ans); err != nil {
			return nil, err
		}
		got := 0
		for _, c := range ans.Candidates {
			for _, p := range c.Content.Parts {
				if p.InlineData == nil || !strings.HasPrefix(p.InlineData.MimeType, "image/") {
					continue
				}
				b, err := base64.StdEncoding.DecodeString(p.InlineData.Data)
				if err != nil {
					return nil, fmt.Errorf("gemini image API: bad base64: %w", err)
				}
				out = append(out, Image{MediaType: p.InlineData.MimeType, Data: b})
				got++
			}
		}
		if got == 0 {
			why := ""
			if ans.PromptFeedback != nil && ans.PromptFeedback.BlockReason != "" {
				why = " (prompt blocked: " + ans.PromptFeedback.BlockReason + ")"
			} else if len(ans.Candidates) > 0 && ans.Candidates[0].FinishReason != "" && ans.Candidates[0].FinishReason != "STOP" {
				why = " (finish reason " + ans.Candidates[0].FinishReason + ")"
			}
			return nil, fmt.Errorf("gemini image API: %w%s", errNoImage, why)
		}
	}
	return out[:r.N], nil
}
