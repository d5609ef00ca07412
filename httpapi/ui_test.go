package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUIIsServedBesideTheAPI: the page at / and at client routes, with its CSP, while /api and
// the health probes keep their own answers.
func TestUIIsServedBesideTheAPI(t *testing.T) {
	e := newEnv(t, nil)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, p := range []string{"/", "/s/0193a4b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"} {
		resp, body := get(p)
		if resp.StatusCode != 200 || !strings.Contains(body, `<div id="root">`) {
			t.Fatalf("GET %s: %d %q", p, resp.StatusCode, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Fatalf("GET %s: CSP %q", p, csp)
		}
	}
	if resp, body := get("/api/v1/nope"); resp.StatusCode != 404 || !strings.Contains(body, `"not_found"`) {
		t.Fatalf("unknown API route: %d %q", resp.StatusCode, body)
	}
	if resp, body := get("/healthz"); resp.StatusCode != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	// The API keeps its key check: the page is public, the data is not.
	if resp, _ := get("/api/v1/sessions"); resp.StatusCode != 401 {
		t.Fatalf("sessions without a key: %d", resp.StatusCode)
	}
}
