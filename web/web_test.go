package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func TestHandler(t *testing.T) {
	root := fstest.MapFS{
		"index.html":          {Data: []byte("<!doctype html><title>Parley</title>")},
		"assets/index-abc.js": {Data: []byte("console.log(1)")},
		"robots.txt":          {Data: []byte("User-agent: *")},
	}
	h := handler(root)
	tests := []struct {
		name, method, path string
		status             int
		body, cache, ctype string
	}{
		{"root is the page", "GET", "/", 200, "<title>Parley</title>", "no-cache", "text/html"},
		{"client route falls back to the page", "GET", "/s/0193a4b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", 200, "<title>Parley</title>", "no-cache", "text/html"},
		{"hashed asset is immutable", "GET", "/assets/index-abc.js", 200, "console.log(1)", "public, max-age=31536000, immutable", "text/javascript"},
		{"other file is revalidated", "GET", "/robots.txt", 200, "User-agent", "no-cache", "text/plain"},
		{"missing asset is a 404, not the page", "GET", "/assets/index-old.js", 404, "", "", ""},
		{"missing file with extension is a 404", "GET", "/favicon.ico", 404, "", "", ""},
		{"path traversal stays inside", "GET", "/../../etc/passwd", 200, "<title>Parley</title>", "no-cache", "text/html"},
		{"HEAD works", "HEAD", "/", 200, "", "no-cache", "text/html"},
		{"POST is refused", "POST", "/", 405, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d (body %q)", rec.Code, tc.status, rec.Body.String())
			}
			if got := rec.Header().Get("Content-Security-Policy"); got != CSP {
				t.Errorf("CSP %q, want %q", got, CSP)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("no nosniff")
			}
			if tc.status != 200 {
				return
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("body %q does not contain %q", rec.Body.String(), tc.body)
			}
			if got := rec.Header().Get("Cache-Control"); got != tc.cache {
				t.Errorf("Cache-Control %q, want %q", got, tc.cache)
			}
			if got := rec.Header().Get("Content-Type"); !strings.HasPrefix(got, tc.ctype) {
				t.Errorf("Content-Type %q, want %q…", got, tc.ctype)
			}
		})
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, bad := range []string{"'unsafe-inline'", "'unsafe-eval'", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("CSP allows %s", bad)
		}
	}
}

// TestEmbeddedBuild checks the committed bundle: the page exists and every file it loads is
// embedded and served.
func TestEmbeddedBuild(t *testing.T) {
	if !embedded {
		t.Skip("built with no_ui")
	}
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		t.Fatal(err)
	}
	index, err := fs.ReadFile(root, "index.html")
	if err != nil {
		t.Fatalf("web/dist/index.html is not embedded: %v (run npm run build in web/)", err)
	}
	refs := regexp.MustCompile(`(?:src|href)="/(assets/[^"]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) == 0 {
		t.Fatalf("index.html loads no assets:\n%s", index)
	}
	h := Handler()
	for _, m := range refs {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/"+m[1], nil))
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			t.Errorf("%s: status %d, %d bytes", m[1], rec.Code, rec.Body.Len())
		}
	}
	if strings.Contains(string(index), "<script>") {
		t.Error("index.html has an inline script, which the CSP refuses")
	}
}
