package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/parleyhq/parley/web"
)

// TestUIIsServedBesideTheAPI: the page at / and at client routes, with its CSP, while /api and
// the health probes keep their own answers.
func TestUIIsServedBesideTheAPI(t *testing.T) {
	if !web.Embedded() {
		t.Skip("built with -tags no_ui")
	}
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

// TestListSessionsByTitle: GET /api/v1/sessions?q= keeps the caller's sessions whose title
// contains q; a q longer than a title can be is a 400.
func TestListSessionsByTitle(t *testing.T) {
	e := newEnv(t, nil)
	for _, title := range []string{"Trip to Lisbon", "Groceries", "lisbon hotels"} {
		if code, out := e.do(t, "POST", "/api/v1/sessions", `{"title":"`+title+`"}`); code != 201 {
			t.Fatalf("create: %d %v", code, out)
		}
	}
	if code, out := e.do(t, "POST", "/api/v1/sessions", `{"title":"Lisbon of bob"}`, "X-Test-User", "bob"); code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	code, out := e.do(t, "GET", "/api/v1/sessions?q=LISBON&limit=1", "")
	if code != 200 {
		t.Fatalf("list: %d %v", code, out)
	}
	var titles []string
	for range 5 {
		for _, s := range out["sessions"].([]any) {
			titles = append(titles, s.(map[string]any)["title"].(string))
		}
		next, _ := out["next_cursor"].(string)
		if next == "" {
			break
		}
		if code, out = e.do(t, "GET", "/api/v1/sessions?q=LISBON&limit=1&cursor="+next, ""); code != 200 {
			t.Fatalf("next page: %d %v", code, out)
		}
	}
	if strings.Join(titles, "|") != "lisbon hotels|Trip to Lisbon" {
		t.Fatalf("q=LISBON listed %q", titles)
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions?q="+strings.Repeat("x", 201), ""); code != 400 || !strings.Contains(errMsg(out), "q:") {
		t.Fatalf("long q: %d %v", code, out)
	}
}
