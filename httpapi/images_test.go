package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/artifact"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/images"
	"github.com/parleyhq/parley/runs"
)

// GET /api/v1/images/{id} serves a stored image to whoever holds its signed URL, without an API
// key, and refuses the URL once altered or expired.
func TestSignedImageURL(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().Unix())
	signer := &artifact.Signer{Key: []byte("test-artifact-url-secret-0123456789"), Now: func() time.Time { return time.Unix(now.Load(), 0) }}
	e := newEnvWith(t, runs.Options{}, func(d *httpapi.Deps) { d.ArtifactURLs = signer })
	png := filestest.PNG(3, 3)
	img := e.uploadOne(t, "alice", "", upFile{name: "fox.png", data: png})
	txt := e.uploadOne(t, "alice", "", upFile{name: "notes.txt", data: []byte("secret notes")})
	id := img["id"].(string)

	get := func(path string) (int, http.Header, []byte) {
		t.Helper()
		resp, err := http.Get(e.url + path) // no API key
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	u := images.URL(signer, id, images.DefaultURLTTL)
	code, h, body := get(u)
	if code != 200 || !bytes.Equal(body, png) || h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("signed GET: %d %v %q", code, h, body)
	}
	for name, path := range map[string]string{
		"altered signature": strings.Replace(u, "sig=", "sig=x", 1),
		"altered expiry":    strings.Replace(u, "exp=", "exp=9", 1),
		"other file":        strings.Replace(u, id, txt["id"].(string), 1),
		"unsigned":          "/api/v1/images/" + id,
	} {
		if code, _, body := get(path); code != 403 || !strings.Contains(string(body), "forbidden") {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	// A signed URL of a file that is not an image serves nothing.
	if code, _, _ := get(images.URL(signer, txt["id"].(string), time.Hour)); code != 404 {
		t.Errorf("text file: %d", code)
	}
	now.Add(int64(images.DefaultURLTTL/time.Second) + 1)
	if code, _, body := get(u); code != 403 || !strings.Contains(string(body), "expired") {
		t.Fatalf("expired: %d %s", code, body)
	}
}
