package images

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/artifact"
	"github.com/parleyhq/parley/blob/disk"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tools"
)

type toolEnv struct {
	store  *sqlite.Store
	files  *files.Service
	signer *artifact.Signer
	sess   *parley.Session
	events []parley.Event
	mu     sync.Mutex
	logs   bytes.Buffer
}

// failingBlobs is a blob store whose writes fail (a full disk, an unreachable bucket).
type failingBlobs struct{ parley.BlobStore }

func (failingBlobs) Put(context.Context, io.Reader, int64) (parley.BlobInfo, error) {
	return parley.BlobInfo{}, errors.New("s3: PutObject: 503 SlowDown")
}

func newToolEnv(t *testing.T, failPut bool) *toolEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var bs parley.BlobStore
	if bs, err = disk.Open(filepath.Join(dir, "blobs")); err != nil {
		t.Fatal(err)
	}
	if failPut {
		bs = failingBlobs{bs}
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	e := &toolEnv{store: st, files: files.New(files.Config{Store: st, Blobs: bs}),
		signer: &artifact.Signer{Key: []byte("0123456789abcdef0123456789abcdef")},
		sess:   &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: now, UpdatedAt: now}}
	if err := st.CreateSession(ctx, e.sess); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *toolEnv) tools(b Backend, timeout time.Duration) map[string]parley.Tool {
	m := map[string]parley.Tool{}
	for _, tl := range Tools(Config{Backend: b, Files: e.files, Signer: e.signer, Timeout: timeout,
		Log: slog.New(slog.NewTextHandler(&e.logs, nil))}) {
		m[tl.Spec().Name] = tl
	}
	return m
}

func (e *toolEnv) ctx(user string) context.Context {
	return tools.WithRun(ctx, tools.RunInfo{SessionID: e.sess.ID, RunID: "run1", User: user, ToolCallID: "call_1",
		Emit: func(ev parley.Event) { e.mu.Lock(); e.events = append(e.events, ev); e.mu.Unlock() }})
}

func call(t *testing.T, tl parley.Tool, c context.Context, args string) (*parley.ToolResult, Result) {
	t.Helper()
	res, err := tl.Call(c, json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if !res.IsError {
		if err := json.Unmarshal([]byte(res.Content.String()), &r); err != nil {
			t.Fatalf("result %q: %v", res.Content.String(), err)
		}
	}
	return res, r
}

func openAIFake(t *testing.T, n *int) *OpenAI {
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if n != nil {
			*n++
		}
		writeJSON(w, 200, map[string]any{"created": 1, "data": []any{map[string]any{"b64_json": b64}}})
	})
	return &OpenAI{BaseURL: srv.URL, Model: "dall-e-2"}
}

// A generated image is a file of the run's user and session, with a signed URL that verifies,
// and an image event.
func TestGenerateStoresFileAndSignsURL(t *testing.T) {
	e := newToolEnv(t, false)
	ts := e.tools(openAIFake(t, nil), 0)
	res, r := call(t, ts["generate_image"], e.ctx("alice"), `{"prompt":"a red fox","size":"256x256"}`)
	if res.IsError || len(r.Images) != 1 {
		t.Fatalf("%+v", res)
	}
	out := r.Images[0]
	if out.Degraded || out.B64JSON != "" || out.FileID == "" || out.MediaType != "image/png" || out.Size != len(png) {
		t.Fatalf("output %+v", out)
	}
	f, err := e.files.Get(ctx, "alice", out.FileID)
	if err != nil || f.SessionID != e.sess.ID || f.Name != "generate_image-1.png" {
		t.Fatalf("file %+v %v", f, err)
	}
	listed, _ := e.store.ListSessionFiles(ctx, e.sess.ID, "", 10)
	if len(listed) != 1 || listed[0].ID != out.FileID {
		t.Fatalf("session files %+v", listed)
	}
	u, err := url.Parse(out.URL)
	if err != nil || u.Path != "/api/v1/images/"+out.FileID {
		t.Fatalf("url %q", out.URL)
	}
	if err := e.signer.Check(Purpose, out.FileID, u.Query()); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if d := time.Until(time.Unix(mustInt(t, u.Query().Get("exp")), 0)); d < DefaultURLTTL-time.Minute || d > DefaultURLTTL {
		t.Fatalf("URL valid for %s, want 7 days", d)
	}
	if len(e.events) != 1 || e.events[0].Type != parley.EventImage {
		t.Fatalf("events %+v", e.events)
	}
	im := e.events[0].Image
	if im.FileID != out.FileID || im.URL != out.URL || im.Prompt != "a red fox" || im.Degraded || im.ToolCallID != "call_1" || im.Tool != "generate_image" {
		t.Fatalf("event %+v", im)
	}
}

func mustInt(t *testing.T, s string) int64 {
	var n int64
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Degraded mode (seed 003 §4): the blob store fails, the tool still succeeds with the image
// inline, degraded: true, and a warning in the log.
func TestDegradedModeWhenStoringFails(t *testing.T) {
	e := newToolEnv(t, true)
	ts := e.tools(openAIFake(t, nil), 0)
	res, r := call(t, ts["generate_image"], e.ctx("alice"), `{"prompt":"a red fox"}`)
	if res.IsError || len(r.Images) != 1 {
		t.Fatalf("%+v", res)
	}
	out := r.Images[0]
	if !out.Degraded || out.FileID != "" || out.URL != "" || out.B64JSON != b64 || !strings.Contains(r.Note, "could not be stored") {
		t.Fatalf("output %+v", out)
	}
	if !strings.Contains(res.Content.String(), `"degraded":true`) {
		t.Fatalf("result %s", res.Content.String())
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "degraded mode") || !strings.Contains(logs, "503 SlowDown") {
		t.Fatalf("log %q", logs)
	}
	if len(e.events) != 1 || !e.events[0].Image.Degraded || e.events[0].Image.Data != b64 {
		t.Fatalf("events %+v", e.events)
	}
}

// edit_image sends an image of the user's (and mask) to the API; another user's file, a file
// of another conversation and a file that is not an image are refused with a clear result.
func TestEditImageInputs(t *testing.T) {
	e := newToolEnv(t, false)
	var sent [][]byte
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			t.Error(err)
		}
		for _, k := range []string{"image", "mask"} {
			if fh := r.MultipartForm.File[k]; len(fh) == 1 {
				f, _ := fh[0].Open()
				b, _ := io.ReadAll(f)
				sent = append(sent, b)
			}
		}
		writeJSON(w, 200, map[string]any{"data": []any{map[string]any{"b64_json": b64}}})
	})
	ts := e.tools(&OpenAI{BaseURL: srv.URL, Model: "dall-e-2"}, 0)
	up := func(owner, session, name string, data []byte) string {
		f, err := e.files.Upload(ctx, owner, session, name, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return f.ID
	}
	photo := up("alice", e.sess.ID, "photo.png", png)
	mask := up("alice", "", "mask.png", png)
	bobs := up("bob", "", "bob.png", png)
	text := up("alice", "", "notes.txt", []byte("hello"))
	now := time.Now().UTC()
	other := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := e.store.CreateSession(ctx, other); err != nil {
		t.Fatal(err)
	}
	elsewhere := up("alice", other.ID, "x.png", png)

	res, r := call(t, ts["edit_image"], e.ctx("alice"), `{"file_id":"`+photo+`","mask_file_id":"`+mask+`","prompt":"add a hat"}`)
	if res.IsError || len(r.Images) != 1 || r.Images[0].FileID == "" || len(sent) != 2 {
		t.Fatalf("%s; sent %d", res.Content.String(), len(sent))
	}
	for name, c := range map[string]struct{ args, want string }{
		"another user's":         {`{"file_id":"` + bobs + `","prompt":"p"}`, "no file"},
		"another conversation's": {`{"file_id":"` + elsewhere + `","prompt":"p"}`, "another conversation"},
		"not an image":           {`{"file_id":"` + text + `","prompt":"p"}`, "not an image"},
		"unknown":                {`{"file_id":"nope","prompt":"p"}`, "no file"},
		"bad mask":               {`{"file_id":"` + photo + `","mask_file_id":"` + bobs + `","prompt":"p"}`, "mask_file_id"},
		"n too large":            {`{"file_id":"` + photo + `","prompt":"p","n":9}`, "n must be"},
	} {
		res, _ := call(t, ts["edit_image"], e.ctx("alice"), c.args)
		if !res.IsError || !strings.Contains(res.Content.String(), c.want) {
			t.Errorf("%s: %s", name, res.Content.String())
		}
	}
	if len(sent) != 2 {
		t.Fatalf("refused edits reached the API: %d images sent", len(sent))
	}
}

// Upstream errors and rate limits become failed results the model can act on; the API call has
// its own timeout.
func TestUpstreamFailuresAndTimeout(t *testing.T) {
	e := newToolEnv(t, false)
	srv, _ := fake(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Retry-After", "20")
		writeJSON(w, 429, map[string]any{"error": map[string]any{"message": "Rate limit reached for images per minute", "type": "requests", "code": "rate_limit_exceeded"}})
	})
	ts := e.tools(&OpenAI{BaseURL: srv.URL, Model: "m"}, 0)
	res, _ := call(t, ts["generate_image"], e.ctx("alice"), `{"prompt":"p"}`)
	if !res.IsError || !strings.Contains(res.Content.String(), "rate limited (retry after 20s)") || !strings.Contains(res.Content.String(), "Rate limit reached") {
		t.Fatalf("%s", res.Content.String())
	}

	release := make(chan struct{})
	slow, _ := fake(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ts = e.tools(&OpenAI{BaseURL: slow.URL, Model: "m"}, 50*time.Millisecond)
	if d := ts["generate_image"].(tools.Timed).Timeout(); d != 50*time.Millisecond+15*time.Second {
		t.Fatalf("tool timeout %s", d)
	}
	res, _ = call(t, ts["generate_image"], e.ctx("alice"), `{"prompt":"p"}`)
	if !res.IsError || !strings.Contains(res.Content.String(), "did not answer within 50ms") {
		t.Fatalf("%s", res.Content.String())
	}
	if d := e.tools(openAIFake(t, nil), 0)["edit_image"].(tools.Timed).Timeout(); d != DefaultTimeout+15*time.Second {
		t.Fatalf("default timeout %s", d)
	}
}

// The images are files of a stored session: the tools are not offered to a stateless /v1
// conversation.
func TestToolsNeedASession(t *testing.T) {
	for _, tl := range Tools(Config{Backend: &OpenAI{}}) {
		if sb, ok := tl.(tools.SessionBound); !ok || !sb.NeedsSession() {
			t.Errorf("%s is not session-bound", tl.Spec().Name)
		}
	}
}

// In a fork, edit_image takes an image of the session forked from (the fork's copied messages
// show it, and it stays that session's file); the result is a file of the fork. An image of an
// unrelated conversation of the same user is still refused.
func TestEditImageInFork(t *testing.T) {
	e := newToolEnv(t, false)
	calls := 0
	ts := e.tools(openAIFake(t, &calls), 0)
	photo, err := e.files.Upload(ctx, "alice", e.sess.ID, "photo.png", bytes.NewReader(png))
	if err != nil {
		t.Fatal(err)
	}
	msg := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, CreatedAt: time.Now().UTC(), Content: parley.Parts(files.Part(photo))}
	if err := e.store.AppendMessages(ctx, e.sess.ID, msg); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	fork := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if _, err := e.store.Fork(ctx, e.sess.ID, msg.ID, fork); err != nil {
		t.Fatal(err)
	}
	other := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := e.store.CreateSession(ctx, other); err != nil {
		t.Fatal(err)
	}
	elsewhere, err := e.files.Upload(ctx, "alice", other.ID, "x.png", bytes.NewReader(png))
	if err != nil {
		t.Fatal(err)
	}
	src := e.sess.ID
	e.sess = fork // the run is the fork's

	res, r := call(t, ts["edit_image"], e.ctx("alice"), `{"file_id":"`+photo.ID+`","mask_file_id":"`+photo.ID+`","prompt":"add a hat"}`)
	if res.IsError || len(r.Images) != 1 || calls != 1 {
		t.Fatalf("editing the source's image in the fork: %s (%d calls)", res.Content.String(), calls)
	}
	if f, err := e.store.GetFile(ctx, r.Images[0].FileID); err != nil || f.SessionID != fork.ID {
		t.Fatalf("the edited image: %+v %v; want a file of the fork", f, err)
	}
	if f, err := e.store.GetFile(ctx, photo.ID); err != nil || f.SessionID != src {
		t.Fatalf("the source's image: %+v %v; want it left in the source", f, err)
	}
	res, _ = call(t, ts["edit_image"], e.ctx("alice"), `{"file_id":"`+elsewhere.ID+`","prompt":"p"}`)
	if !res.IsError || !strings.Contains(res.Content.String(), "another conversation") || calls != 1 {
		t.Fatalf("an unrelated conversation's image: %s (%d calls)", res.Content.String(), calls)
	}
}
