package images

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
)

// Defaults of a zero Config.
const (
	DefaultTimeout = 45 * time.Second   // seed 003 §4
	DefaultURLTTL  = 7 * 24 * time.Hour // seed 003 §4: 7-day signed URLs
	MaxN           = 4
	// MaxInput bounds an image (or mask) given to edit_image.
	MaxInput = 20 << 20
)

// Files is what the tools need of the file service (files.Service).
type Files interface {
	Upload(ctx context.Context, owner, sessionID, name string, r io.Reader) (*parley.File, error)
	Get(ctx context.Context, owner, id string) (*parley.File, error)
	Open(ctx context.Context, f *parley.File) (parley.BlobReader, error)
	// Usable reports whether f may be used in session sessionID: in no session, in it, or in
	// one of the sessions it was forked from.
	Usable(ctx context.Context, sessionID string, f *parley.File) (bool, error)
}

// Signer signs the URLs of stored images (artifact.Signer: one signer, one key, per-purpose
// signatures).
type Signer interface {
	Sign(purpose, id string, ttl time.Duration) url.Values
}

// Purpose is the signing purpose of image URLs (GET /api/v1/images/{file_id}).
const Purpose = "image"

// URL returns the signed path of a stored image.
func URL(s Signer, fileID string, ttl time.Duration) string {
	return "/api/v1/images/" + url.PathEscape(fileID) + "?" + s.Sign(Purpose, fileID, ttl).Encode()
}

// Config configures the tools.
type Config struct {
	Backend Backend
	Files   Files
	Signer  Signer
	Timeout time.Duration // one call of the image API (default 45 s)
	URLTTL  time.Duration // how long a signed URL is valid (default 7 days)
	Log     *slog.Logger
}

// Tools returns generate_image and edit_image.
func Tools(cfg Config) []parley.Tool {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.URLTTL <= 0 {
		cfg.URLTTL = DefaultURLTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	x := &executor{cfg: cfg}
	// The tool's own limit: the API's, and time to read the input and store the images.
	d := cfg.Timeout + 15*time.Second
	return []parley.Tool{
		// Session: the images are files of the run's stored session (not offered to a stateless
		// /v1 conversation, like the artifact tools).
		timed{&tools.Func{Def: x.generateSpec(), Fn: x.generate, Session: true}, d},
		timed{&tools.Func{Def: x.editSpec(), Fn: x.edit, Session: true}, d},
	}
}

type timed struct {
	*tools.Func
	d time.Duration
}

func (t timed) Timeout() time.Duration { return t.d }

type executor struct{ cfg Config }

const sizeProp = `"size":{"type":"string","pattern":"^[0-9]{2,5}x[0-9]{2,5}$","description":"WIDTHxHEIGHT, e.g. 1024x1024; omit for the default"},` +
	`"n":{"type":"integer","minimum":1,"maximum":4,"description":"How many images (default 1)"}`

func (x *executor) generateSpec() parley.ToolSpec {
	return parley.ToolSpec{Name: "generate_image",
		Description: "Generates images from a text prompt. The user sees them in the chat; the result gives each image's file id (for edit_image) and URL.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","minLength":1,"maxLength":4000},` +
			sizeProp + `},"required":["prompt"],"additionalProperties":false}`)}
}

func (x *executor) editSpec() parley.ToolSpec {
	return parley.ToolSpec{Name: "edit_image",
		Description: "Edits an image of this conversation (an uploaded or generated image, by its file id) as the prompt says; an optional mask image (file id) marks by transparency where to change it.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"file_id":{"type":"string","minLength":1,"maxLength":100},` +
			`"prompt":{"type":"string","minLength":1,"maxLength":4000},"mask_file_id":{"type":"string","maxLength":100},` +
			sizeProp + `},"required":["file_id","prompt"],"additionalProperties":false}`)}
}

type args struct {
	FileID     string `json:"file_id"`
	MaskFileID string `json:"mask_file_id"`
	Prompt     string `json:"prompt"`
	Size       string `json:"size"`
	N          int    `json:"n"`
}

func parse(raw json.RawMessage) (args, *parley.ToolResult) {
	var a args
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, failed("arguments: %v", err)
	}
	a.Prompt = strings.TrimSpace(a.Prompt)
	if a.Prompt == "" {
		return a, failed("prompt is required")
	}
	if a.N == 0 {
		a.N = 1
	}
	if a.N < 1 || a.N > MaxN {
		return a, failed("n must be 1 to %d", MaxN)
	}
	return a, nil
}

func (x *executor) generate(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
	a, bad := parse(raw)
	if bad != nil {
		return bad, nil
	}
	return x.run(ctx, "generate_image", a, Request{Prompt: a.Prompt, Size: a.Size, N: a.N})
}

func (x *executor) edit(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
	a, bad := parse(raw)
	if bad != nil {
		return bad, nil
	}
	ri := tools.RunOf(ctx)
	img, res, err := x.input(ctx, ri, "file_id", a.FileID)
	if res != nil || err != nil {
		return res, err
	}
	req := Request{Prompt: a.Prompt, Size: a.Size, N: a.N, Image: img}
	if a.MaskFileID != "" {
		if req.Mask, res, err = x.input(ctx, ri, "mask_file_id", a.MaskFileID); res != nil || err != nil {
			return res, err
		}
	}
	return x.run(ctx, "edit_image", a, req)
}

// input reads an image the run's user owns, of this conversation, of one it was forked from
// (whose images its copied messages show), or of none.
func (x *executor) input(ctx context.Context, ri tools.RunInfo, field, id string) (*Input, *parley.ToolResult, error) {
	f, err := x.cfg.Files.Get(ctx, ri.User, id)
	if err != nil {
		if c := parley.CodeOf(err); c == parley.ECNotFound || c == parley.ECForbidden {
			return nil, failed("%s: there is no file %q of yours; use the id of an uploaded or generated image", field, truncate(id, 80)), nil
		}
		return nil, nil, err
	}
	if ok, err := x.cfg.Files.Usable(ctx, ri.SessionID, f); err != nil {
		return nil, nil, err
	} else if !ok {
		return nil, failed("%s: file %q belongs to another conversation", field, truncate(id, 80)), nil
	}
	if !strings.HasPrefix(f.MediaType, "image/") {
		return nil, failed("%s: file %q is %s, not an image", field, truncate(id, 80), f.MediaType), nil
	}
	if f.Size > MaxInput {
		return nil, failed("%s: file %q is larger than %d bytes", field, truncate(id, 80), MaxInput), nil
	}
	rd, err := x.cfg.Files.Open(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	b, err := io.ReadAll(io.LimitReader(rd, MaxInput))
	if err != nil {
		return nil, nil, err
	}
	mt, _, _ := strings.Cut(f.MediaType, ";")
	return &Input{Name: f.Name, MediaType: mt, Data: b}, nil, nil
}

// Output is one image of a tool's result: stored (FileID and URL) or, in degraded mode, inline.
type Output struct {
	FileID    string `json:"file_id,omitempty"`
	URL       string `json:"url,omitempty"`
	MediaType string `json:"media_type"`
	Size      int    `json:"bytes"`
	Degraded  bool   `json:"degraded,omitempty"`
	B64JSON   string `json:"b64_json,omitempty"` // degraded mode only
	Revised   string `json:"revised_prompt,omitempty"`
}

// Result is the JSON text of a tool's result.
type Result struct {
	Images []Output `json:"images"`
	Prompt string   `json:"prompt"`
	Note   string   `json:"note"`
}

func (x *executor) run(ctx context.Context, tool string, a args, req Request) (*parley.ToolResult, error) {
	ri := tools.RunOf(ctx)
	actx, cancel := context.WithTimeout(ctx, x.cfg.Timeout)
	imgs, err := x.cfg.Backend.Generate(actx, req)
	cancel()
	if err != nil {
		var ae *APIError
		switch {
		case errors.As(err, &ae) && ae.RateLimited():
			msg := "the image API is rate limited"
			if ae.RetryAfter > 0 {
				msg += fmt.Sprintf(" (retry after %s)", ae.RetryAfter.Round(time.Second))
			}
			return failed("%s: %s; try again later or go on without the image", msg, ae.Message), nil
		case errors.As(err, &ae):
			return failed("%v", ae), nil
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return failed("the image API did not answer within %s", x.cfg.Timeout), nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		x.cfg.Log.Warn("image API failed", "backend", x.cfg.Backend.Name(), "err", err)
		return failed("%v", err), nil
	}
	res := Result{Prompt: a.Prompt}
	degraded := 0
	for i, img := range imgs {
		out := Output{MediaType: img.MediaType, Size: len(img.Data), Revised: img.Revised}
		name := fmt.Sprintf("%s-%d%s", tool, i+1, ext(img.MediaType))
		f, err := x.cfg.Files.Upload(ctx, ri.User, ri.SessionID, name, bytes.NewReader(img.Data))
		if err == nil {
			out.FileID, out.URL, out.MediaType = f.ID, URL(x.cfg.Signer, f.ID, x.cfg.URLTTL), f.MediaType
		} else {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Degraded mode (seed 003 §4): the image is not lost to the user, it travels inline.
			x.cfg.Log.Warn("image not stored: degraded mode, returned inline", "tool", tool, "session", ri.SessionID, "bytes", len(img.Data), "err", err)
			out.Degraded, out.B64JSON = true, base64.StdEncoding.EncodeToString(img.Data)
			degraded++
		}
		res.Images = append(res.Images, out)
		ri.EmitEvent(parley.Event{Type: parley.EventImage, Image: &parley.ImageInfo{
			ToolCallID: ri.ToolCallID, FileID: out.FileID, URL: out.URL, MediaType: out.MediaType,
			Degraded: out.Degraded, Data: out.B64JSON, Prompt: a.Prompt, Tool: tool,
		}})
	}
	res.Note = fmt.Sprintf("%d image(s) made; the user sees them in the chat. Do not repeat the URLs or data; edit one with edit_image and its file_id.", len(res.Images))
	if degraded > 0 {
		res.Note = fmt.Sprintf("%d image(s) made, %d could not be stored (degraded: shown to the user inline, no file id, cannot be edited).", len(res.Images), degraded)
	}
	b, _ := json.Marshal(res)
	return &parley.ToolResult{Content: parley.Text(string(b))}, nil
}

func failed(format string, args ...any) *parley.ToolResult {
	return &parley.ToolResult{Content: parley.Text("error: " + fmt.Sprintf(format, args...)), IsError: true}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
