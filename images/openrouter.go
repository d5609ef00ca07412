package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// OpenRouter is an OpenRouter-style chat completions API with image output (seed 003's choice):
// POST /chat/completions with modalities ["image","text"]; the images come back in
// choices[].message.images[].image_url.url as data: URLs. An edit sends the image (and mask) as
// image_url parts of the user message. One call makes one image, so n images are n calls.
type OpenRouter struct {
	BaseURL string // default https://openrouter.ai/api/v1
	APIKey  string
	Model   string // e.g. google/gemini-2.5-flash-image
	Client  *http.Client
}

func (o *OpenRouter) Name() string { return "openrouter" }

func (o *OpenRouter) Generate(ctx context.Context, r Request) ([]Image, error) {
	base := o.BaseURL
	if base == "" {
		base = "https://openrouter.ai/api/v1"
	}
	text := r.Prompt
	if r.Size != "" {
		text += "\n\n(Image size: " + r.Size + ".)"
	}
	if r.Mask != nil {
		text += "\n\nThe second image is a mask: change only where it is transparent."
	}
	content := []any{map[string]any{"type": "text", "text": text}}
	for _, in := range []*Input{r.Image, r.Mask} {
		if in != nil {
			content = append(content, map[string]any{"type": "image_url", "image_url": map[string]any{"url": dataURL(in)}})
		}
	}
	body, _ := json.Marshal(map[string]any{
		"model":      o.Model,
		"messages":   []any{map[string]any{"role": "user", "content": content}},
		"modalities": []string{"image", "text"},
	})
	var out []Image
	for len(out) < r.N {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+o.APIKey)
		var ans struct {
			Choices []struct {
				Message struct {
					Images []struct {
						ImageURL struct {
							URL string `json:"url"`
						} `json:"image_url"`
					} `json:"images"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := do(o.Client, req, "openrouter", &ans); err != nil {
			return nil, err
		}
		got := 0
		for _, c := range ans.Choices {
			for i, im := range c.Message.Images {
				img, err := decodeDataURL(im.ImageURL.URL)
				if err != nil {
					return nil, fmt.Errorf("openrouter image API: images[%d]: %w", i, err)
				}
				out = append(out, img)
				got++
			}
		}
		if got == 0 {
			return nil, fmt.Errorf("openrouter image API: %w", errNoImage)
		}
	}
	return out[:r.N], nil
}
