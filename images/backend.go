// Package images is the image executor (issue 21, seed 003 §4): the generate_image and edit_image
// tools, against OpenAI's images API, Gemini's image output or an OpenRouter-style chat
// completions API with image output. Each image is stored as a file of the run's user and
// session (package files) and returned with a signed, expiring URL; when storing fails the tool
// still succeeds in degraded mode, with the image inline as base64.
package images

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request is one generation or edit.
type Request struct {
	Prompt string
	Size   string // "1024x1024", …; "" for the backend's default
	N      int    // images wanted, ≥ 1
	// Image, when set, is edited (edit_image); Mask optionally marks (by transparency) where.
	Image *Input
	Mask  *Input
}

// Input is an image sent to the backend.
type Input struct {
	Name      string
	MediaType string
	Data      []byte
}

// Image is one image a backend made.
type Image struct {
	MediaType string
	Data      []byte
	// Revised is the prompt the backend actually used, when it says (OpenAI's revised_prompt).
	Revised string
}

// Backend makes images.
type Backend interface {
	Name() string
	Generate(ctx context.Context, req Request) ([]Image, error)
}

// APIError is an error answer of an image API.
type APIError struct {
	Backend    string
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s image API: HTTP %d", e.Backend, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// RateLimited reports whether the API refused for the rate limit.
func (e *APIError) RateLimited() bool { return e.Status == http.StatusTooManyRequests }

// maxResponse bounds an image API's answer (base64 images are large).
const maxResponse = 64 << 20

// do sends req and decodes a 2xx JSON answer into out; any other answer is an *APIError built
// from the body's {"error":{...}} (OpenAI, OpenRouter and Gemini share this envelope: OpenAI and
// OpenRouter with message/type/code, Gemini with code/message/status).
func do(client *http.Client, req *http.Request, backend string, out any) error {
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return fmt.Errorf("%s image API: %w", backend, ctxErr)
		}
		return fmt.Errorf("%s image API: %w", backend, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return fmt.Errorf("%s image API: reading the answer: %w", backend, err)
	}
	if len(body) > maxResponse {
		return fmt.Errorf("%s image API: the answer is larger than %d bytes", backend, maxResponse)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Backend: backend, Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
		var env struct {
			Error struct {
				Message string          `json:"message"`
				Type    string          `json:"type"`
				Code    json.RawMessage `json:"code"`
				Status  string          `json:"status"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &env) == nil && env.Error.Message != "" {
			e.Message = env.Error.Message
			switch {
			case env.Error.Status != "":
				e.Code = env.Error.Status
			case len(env.Error.Code) > 0 && string(env.Error.Code) != "null":
				var s string
				if json.Unmarshal(env.Error.Code, &s) == nil {
					e.Code = s
				} else {
					e.Code = string(env.Error.Code)
				}
			default:
				e.Code = env.Error.Type
			}
		} else {
			e.Message = strings.TrimSpace(string(body[:min(len(body), 300)]))
		}
		return e
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s image API: the answer is not the expected JSON: %w", backend, err)
	}
	return nil
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// decodeDataURL decodes a data:<type>;base64,<data> URL.
func decodeDataURL(u string) (Image, error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return Image{}, errors.New("not a data: URL")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return Image{}, errors.New("not a base64 data: URL")
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return Image{}, fmt.Errorf("bad base64: %w", err)
	}
	return Image{MediaType: strings.TrimSuffix(meta, ";base64"), Data: b}, nil
}

func dataURL(in *Input) string {
	return "data:" + in.MediaType + ";base64," + base64.StdEncoding.EncodeToString(in.Data)
}

var errNoImage = errors.New("the answer holds no image")
