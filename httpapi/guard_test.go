package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/runs"
)

// raw sends a request with exactly the headers given (no API key added) and returns the response
// with its body read.
func (e *env) raw(t *testing.T, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	return e.rawAt(t, e.url, method, path, body, hdr...)
}

// rawAt is raw against the server at base.
func (e *env) rawAt(t *testing.T, base, method, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// blockRuns makes every run wait until the returned function is called (or the run is aborted).
func (e *env) blockRuns(t *testing.T) func() {
	release := make(chan struct{})
	inner := answer(e.store, "done")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return inner(ctx, in, emit)
	}
	var once bool
	stop := func() {
		if !once {
			once = true
			close(release)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestPipeline walks the request pipeline in its order (CORS, rate limit, authentication,
// throttle, body) through each status its steps give; where a request is wrong in two ways, the
// earlier step answers. In particular no body is read before the caller is known (issue 18): a
// keyless request with a bad body is a 401, not a 400, and a keyless chat while the run budget is
// spent is a 401, not a 503. Step 6 is TestCrossUser's and TestBadInputIsA4xxWithAReason's.
func TestPipeline(t *testing.T) {
	ctx := context.Background()
	e := newEnvWith(t, runs.Options{MaxActive: 1}, func(d *httpapi.Deps) {
		d.CORSOrigins = []string{"https://app.example"}
		d.Limiter = limit.NewMemory()
		d.UserRate = limit.Rate{Count: 20, Per: time.Hour, Burst: 20}
		d.GuestRate = limit.Rate{Count: 4, Per: time.Hour, Burst: 2}
		d.RealIPHeader = "X-Real-IP" // lets a case come from an address of its own
	})
	alice := "Bearer " + e.key(t, "alice")
	admin := "Bearer " + e.key(t, "admin")
	self := e.url // the server's own origin: the web UI it serves

	type tc struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		reason                   string // in the error message, or "" for a success
		header                   string // "Name: value" expected in the response
	}
	steps := []struct {
		step  string
		cases []tc
	}{
		{"1 cors", []tc{
			{"preflight from an allowed origin", "OPTIONS", "/api/v1/chat", "", []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type"},
				204, "", "Access-Control-Allow-Origin: https://app.example"},
			{"preflight from another origin", "OPTIONS", "/api/v1/chat", "", []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}, 403, "not allowed", ""},
			{"cross-site POST from another origin", "POST", "/api/v1/sessions", `{}`, []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Authorization", alice, "Content-Type", "application/json"},
				403, "not allowed", ""},
			{"POST from the allowed origin", "POST", "/api/v1/sessions", `{}`, []string{"Origin", "https://app.example", "Sec-Fetch-Site", "cross-site", "Authorization", alice, "Content-Type", "application/json"},
				201, "", "Access-Control-Allow-Origin: https://app.example"},
			{"GET from another origin", "GET", "/api/v1/models", "", []string{"Origin", "https://evil.example", "Authorization", alice}, 403, "origin https://evil.example is not allowed", ""},
			{"GET from an opaque origin", "GET", "/api/v1/models", "", []string{"Origin", "null", "Authorization", alice}, 403, "not allowed", ""},
			{"GET from another origin, no credentials", "GET", "/healthz", "", []string{"Origin", "https://evil.example"}, 403, "not allowed", ""},
			{"GET from the server's own origin", "GET", "/api/v1/models", "", []string{"Origin", self, "Sec-Fetch-Site", "same-origin", "Authorization", alice}, 200, "", ""},
			{"POST from the server's own origin", "POST", "/api/v1/sessions", `{}`, []string{"Origin", self, "Sec-Fetch-Site", "same-origin", "Authorization", alice, "Content-Type", "application/json"}, 201, "", ""},
		}},
		{"2 rate limit, 3 authentication", []tc{
			// The guest rate (4/h, bursts of 2) counts requests without valid credentials by
			// address. None of the requests above reached this step without a key.
			{"no credentials, bad JSON: the key is checked first", "POST", "/api/v1/chat", `{"message":`, nil, 401, "authentication required", "WWW-Authenticate: Bearer realm=\"parley\""},
			{"bad key, empty message", "POST", "/api/v1/chat", `{"message":""}`, []string{"Authorization", "Bearer nope", "Content-Type", "application/json"}, 401, "invalid, revoked or expired", ""},
			{"anonymous past the guest limit", "GET", "/api/v1/sessions", "", nil, 429, "rate limit of guests", "Retry-After: 900"},
			{"a bad key counts as anonymous", "POST", "/api/v1/chat", `{"message":`, []string{"Authorization", "Bearer pk_wrong"}, 429, "rate limit of guests", "Retry-After: 900"},
			{"another address has its own guest budget", "GET", "/api/v1/sessions", "", []string{"X-Real-IP", "192.0.2.7"}, 401, "authentication required", ""},
			{"a user key with an admin body", "POST", "/api/v1/admin/keys", `{"user":""}`, []string{"Authorization", alice, "Content-Type", "application/json"}, 403, "admin", ""},
			{"alice has her own limit", "GET", "/api/v1/me", "", []string{"Authorization", alice}, 200, "", ""},
		}},
		{"4 throttle", []tc{
			{"a chat past the run budget", "POST", "/api/v1/chat", `{"message":"hi"}`, []string{"Authorization", alice, "Content-Type", "application/json"}, 503, "too many runs", "Retry-After: 5"},
			{"a chat past the run budget, no credentials", "POST", "/api/v1/chat/stream", `{"message":"hi"}`, []string{"X-Real-IP", "192.0.2.8"}, 401, "authentication required", ""},
			{"a bad body past the run budget is not read", "POST", "/api/v1/chat", `{"message":1}`, []string{"Authorization", alice}, 503, "too many runs", "Retry-After: 5"},
			{"reads are not throttled", "GET", "/api/v1/sessions", "", []string{"Authorization", alice}, 200, "", ""},
		}},
		{"5 body", []tc{
			{"bad JSON", "POST", "/api/v1/chat", `{"message":`, []string{"Authorization", alice}, 400, "truncated JSON", ""},
			{"field error", "POST", "/api/v1/chat", `{"message":7}`, []string{"Authorization", alice}, 400, "message: must be a string", ""},
			{"empty message", "POST", "/api/v1/chat", `{"message":""}`, []string{"Authorization", alice}, 400, "message: must not be empty", ""},
			{"wrong content type", "PATCH", "/api/v1/sessions/x", `{"title":"a"}`, []string{"Authorization", alice, "Content-Type", "text/plain"}, 400, "application/json", ""},
			{"title too long", "POST", "/api/v1/sessions", `{"title":"` + strings.Repeat("t", 201) + `"}`, []string{"Authorization", alice}, 400, "title: 201 characters", ""},
			{"body over the limit", "POST", "/api/v1/sessions", `{"title":"` + strings.Repeat("t", 5000) + `"}`, []string{"Authorization", alice}, 400, "larger than 4096 bytes", ""},
			{"admin key body", "POST", "/api/v1/admin/keys", `{"user":""}`, []string{"Authorization", admin}, 400, "user: required", ""},
		}},
	}
	// The throttle's budget is one run: dave holds it during step 4.
	release := e.blockRuns(t)
	for _, st := range steps {
		if st.step == "4 throttle" {
			hold, cancel := context.WithCancel(ctx)
			defer cancel()
			req, _ := http.NewRequestWithContext(hold, "POST", e.url+"/api/v1/chat/stream", strings.NewReader(`{"message":"hold"}`))
			req.Header.Set("Authorization", "Bearer "+e.key(t, "dave"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("holding run: %v %v", resp, err)
			}
			defer resp.Body.Close()
		}
		if st.step == "5 body" {
			release()
			waitIdle(t, e)
		}
		for _, c := range st.cases {
			t.Run(st.step+"/"+c.name, func(t *testing.T) {
				resp, body := e.raw(t, c.method, c.path, c.body, c.hdr...)
				var out map[string]any
				json.Unmarshal([]byte(body), &out)
				if resp.StatusCode != c.status || (c.reason != "" && !strings.Contains(errMsg(out), c.reason)) {
					t.Fatalf("got %d %s, want %d with %q", resp.StatusCode, body, c.status, c.reason)
				}
				if c.header != "" {
					name, value, _ := strings.Cut(c.header, ": ")
					if got := resp.Header.Get(name); got != value {
						t.Fatalf("%s: %q, want %q", name, got, value)
					}
				}
			})
		}
	}
	// The user rate (20/h) is alice's alone: the requests above used some; she runs out, bob does not.
	for i := 0; ; i++ {
		resp, _ := e.raw(t, "GET", "/api/v1/me", "", "Authorization", alice)
		if resp.StatusCode == 429 {
			if resp.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
			break
		}
		if resp.StatusCode != 200 || i > 20 {
			t.Fatalf("request %d: %d, want 200 until a 429 within the rate of 20", i, resp.StatusCode)
		}
	}
	if code, _ := e.do(t, "GET", "/api/v1/me", "", "X-Test-User", "bob"); code != 200 {
		t.Fatalf("bob was limited by alice's requests: %d", code)
	}
}

// waitIdle waits until no run is active.
func waitIdle(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.runs.ActiveCount() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("runs still active")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAuthentication: step 5's answers, and the admin API and guest mode.
func TestAuthentication(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(d *httpapi.Deps) { d.Guests = true; d.GuestTTL = time.Hour })
	revokedSecret, revoked := auth.NewKey("carol", "", false, false, time.Now(), 0)
	e.store.CreateAPIKey(ctx, revoked)
	e.store.RevokeAPIKey(ctx, revoked.ID, time.Now())
	past := time.Now().Add(-time.Minute)
	expiredSecret, expired := auth.NewKey("dan", "", false, false, time.Now().Add(-time.Hour), 0)
	expired.ExpiresAt = &past
	e.store.CreateAPIKey(ctx, expired)

	for _, c := range []struct {
		name   string
		authz  string
		status int
		reason string
	}{
		{"no credentials", "", 401, "authentication required"},
		{"not bearer", "Basic YWxpY2U6cHc=", 401, "Bearer"},
		{"malformed key", "Bearer hello", 401, "invalid, revoked or expired"},
		{"unknown key", "Bearer pk_" + strings.Repeat("A", 43), 401, "invalid, revoked or expired"},
		{"revoked key", "Bearer " + revokedSecret, 401, "invalid, revoked or expired"},
		{"expired key", "Bearer " + expiredSecret, 401, "invalid, revoked or expired"},
		{"valid key", "Bearer " + e.key(t, "alice"), 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			hdr := []string{}
			if c.authz != "" {
				hdr = append(hdr, "Authorization", c.authz)
			}
			resp, body := e.raw(t, "GET", "/api/v1/sessions", "", hdr...)
			var out map[string]any
			json.Unmarshal([]byte(body), &out)
			if resp.StatusCode != c.status || !strings.Contains(errMsg(out), c.reason) {
				t.Fatalf("got %d %s, want %d %q", resp.StatusCode, body, c.status, c.reason)
			}
			if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}

	// The admin API: alice is no admin; "admin" is.
	if code, out := e.do(t, "GET", "/api/v1/admin/keys", "", "X-Test-User", "alice"); code != 403 || !strings.Contains(errMsg(out), "admin") {
		t.Fatalf("non-admin listing keys: %d %v", code, out)
	}
	code, out := e.do(t, "POST", "/api/v1/admin/keys", `{"user":"erin","name":"ci","expires_in":"24h"}`, "X-Test-User", "admin")
	if code != 201 {
		t.Fatalf("create key: %d %v", code, out)
	}
	secret := out["key"].(string)
	rec := out["api_key"].(map[string]any)
	if !strings.HasPrefix(secret, "pk_") || rec["user"] != "erin" || rec["expires_at"] == nil || rec["hash"] != nil {
		t.Fatalf("created key: %v", out)
	}
	erin := "Bearer " + secret
	if resp, body := e.raw(t, "GET", "/api/v1/me", "", "Authorization", erin); resp.StatusCode != 200 || !strings.Contains(body, `"user":"erin"`) {
		t.Fatalf("erin's key: %d %s", resp.StatusCode, body)
	}
	_, list := e.do(t, "GET", "/api/v1/admin/keys?user=erin", "", "X-Test-User", "admin")
	if keys := list["keys"].([]any); len(keys) != 1 || strings.Contains(mustJSON(list), secret) {
		t.Fatalf("key list: %v", list)
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/admin/keys/"+rec["id"].(string), "", "X-Test-User", "admin"); code != 200 {
		t.Fatalf("revoke: %d", code)
	}
	if resp, _ := e.raw(t, "GET", "/api/v1/me", "", "Authorization", erin); resp.StatusCode != 401 {
		t.Fatalf("revoked key still works: %d", resp.StatusCode)
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/admin/keys/nope", "", "X-Test-User", "admin"); code != 404 {
		t.Fatalf("revoke unknown: %d", code)
	}
	if code, out := e.do(t, "POST", "/api/v1/admin/keys", `{"user":"guest-x"}`, "X-Test-User", "admin"); code != 400 {
		t.Fatalf("key for a guest- user: %d %v", code, out)
	}

	// Guest mode: anyone gets a token; each guest is its own user.
	var guests []string
	for range 2 {
		resp, body := e.raw(t, "POST", "/api/v1/auth/guest", "")
		var g map[string]any
		json.Unmarshal([]byte(body), &g)
		if resp.StatusCode != 201 || !strings.HasPrefix(g["token"].(string), "pg_") || g["expires_at"] == nil {
			t.Fatalf("guest token: %d %s", resp.StatusCode, body)
		}
		guests = append(guests, "Bearer "+g["token"].(string))
	}
	resp, body := e.raw(t, "POST", "/api/v1/sessions", `{"title":"g"}`, "Authorization", guests[0], "Content-Type", "application/json")
	if resp.StatusCode != 201 {
		t.Fatalf("guest creates a session: %d %s", resp.StatusCode, body)
	}
	var sess map[string]any
	json.Unmarshal([]byte(body), &sess)
	if resp, _ := e.raw(t, "GET", "/api/v1/sessions/"+sess["id"].(string), "", "Authorization", guests[1]); resp.StatusCode != 403 {
		t.Fatalf("another guest reads it: %d", resp.StatusCode)
	}
	if _, body := e.raw(t, "GET", "/api/v1/me", "", "Authorization", guests[0]); !strings.Contains(body, `"guest":true`) {
		t.Fatalf("guest identity: %s", body)
	}
}

func TestGuestModeOff(t *testing.T) {
	e := newEnv(t, nil)
	if resp, _ := e.raw(t, "POST", "/api/v1/auth/guest", ""); resp.StatusCode != 404 {
		t.Fatalf("guest token with guest mode off: %d", resp.StatusCode)
	}
}

// TestSingleUserMode: without an Authenticator every caller is "local", and needs no key.
func TestSingleUserMode(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.Auth = nil })
	e.keys = nil
	resp, body := e.raw(t, "GET", "/api/v1/me", "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"user":"local"`) || !strings.Contains(body, `"auth":false`) {
		t.Fatalf("me: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.raw(t, "GET", "/api/v1/admin/keys", ""); resp.StatusCode != 404 {
		t.Fatalf("admin keys with auth off: %d", resp.StatusCode)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestEveryRouteIsGuarded reads routes.go: every route under /api/v1 goes through the pipeline,
// and the cross-user test below has a case for each.
func TestEveryRouteIsGuarded(t *testing.T) {
	src, err := os.ReadFile("routes.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`s\.mux\.Handle\("([^"]+)", (s\.pipe\()?`)
	var routes []string
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		if strings.Contains(m[1], "/api/") || strings.Contains(m[1], "/v1/") {
			if m[2] == "" {
				t.Errorf("route %s is not behind s.pipe", m[1])
			}
			routes = append(routes, m[1])
		}
	}
	sort.Strings(routes)
	var covered []string
	for r := range crossUserRoutes {
		covered = append(covered, r)
	}
	sort.Strings(covered)
	if strings.Join(routes, "\n") != strings.Join(covered, "\n") {
		t.Fatalf("routes.go has\n%s\n\nthe cross-user test covers\n%s", strings.Join(routes, "\n"), strings.Join(covered, "\n"))
	}
}

// TestGuestsHaveTheGuestRate: a guest token is limited at the guest rate, each guest on its own.
func TestGuestsHaveTheGuestRate(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) {
		d.Guests = true
		d.Limiter = limit.NewMemory()
		d.UserRate = limit.Rate{Count: 100, Per: time.Hour, Burst: 100}
		d.GuestRate = limit.Rate{Count: 3, Per: time.Hour, Burst: 3}
	})
	token := func() string {
		resp, body := e.raw(t, "POST", "/api/v1/auth/guest", "")
		var g map[string]any
		json.Unmarshal([]byte(body), &g)
		if resp.StatusCode != 201 {
			t.Fatalf("guest token: %d %s", resp.StatusCode, body)
		}
		return "Bearer " + g["token"].(string)
	}
	// The token requests count against this address's guest budget (3): two of them.
	g1, g2 := token(), token()
	for i, want := range []int{200, 200, 200, 429} {
		if resp, _ := e.raw(t, "GET", "/api/v1/me", "", "Authorization", g1); resp.StatusCode != want {
			t.Fatalf("guest 1, request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if resp, _ := e.raw(t, "GET", "/api/v1/me", "", "Authorization", g2); resp.StatusCode != 200 {
		t.Fatalf("guest 2 limited by guest 1: %d", resp.StatusCode)
	}
	// Token requests count by address: the third is the last of its budget of 3, the fourth is past it.
	token()
	if resp, _ := e.raw(t, "POST", "/api/v1/auth/guest", ""); resp.StatusCode != 429 {
		t.Fatalf("fourth token: %d, want 429", resp.StatusCode)
	}
	// Alice, with a key, has the user rate.
	for i := range 5 {
		if code, _ := e.do(t, "GET", "/api/v1/me", ""); code != 200 {
			t.Fatalf("alice's request %d: %d", i, code)
		}
	}
}
