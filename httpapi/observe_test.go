package httpapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/runs"
)

// Issue 18 §6: a 500 is logged at error level with the request's id and route and the error
// behind it (sanitized), while the client sees only "internal error".
func TestServerErrorsAreLogged(t *testing.T) {
	var logs testlog.Buffer
	e := newEnv(t, func(d *httpapi.Deps) {
		d.Auth = nil
		d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	e.keys = nil
	e.store.Close() // every store call fails from now on
	resp, body := e.raw(t, "GET", "/api/v1/sessions?limit=5", "")
	if resp.StatusCode != 500 || !strings.Contains(body, `"message":"internal error"`) {
		t.Fatalf("got %d %s, want a bare 500", resp.StatusCode, body)
	}
	rid := resp.Header.Get("X-Request-Id")
	if rid == "" {
		t.Fatal("no X-Request-Id")
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "request_id="+rid) {
			line = l
		}
	}
	for _, want := range []string{"level=ERROR", `route="GET /api/v1/sessions"`, "status=500", "code=internal", "err="} {
		if !strings.Contains(line, want) {
			t.Fatalf("log line for request %s lacks %q:\n%s", rid, want, logs.String())
		}
	}
	if strings.Contains(line, "limit=5") {
		t.Fatalf("the log names the query: %s", line)
	}
}

// Issue 18 §6: every 429 and 503 the API writes carries Retry-After, whichever route and cause.
func TestRetryAfterOnEvery429And503(t *testing.T) {
	ready := errors.New("not ready")
	e := newEnvWith(t, runs.Options{MaxActive: 1}, func(d *httpapi.Deps) {
		d.MaxStreamsPerUser = 1
		d.Ready = func(context.Context) error { return ready }
	})
	sid := e.newSession(t, "alice")
	// A run's own failure that is a rate limit (a provider's 429 the run could not get past).
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		return nil, &parley.Error{Code: parley.ECRateLimited, Message: "the model provider is rate limiting"}
	}
	check := func(t *testing.T, code int, status int, hdr map[string][]string) {
		t.Helper()
		if code != status {
			t.Fatalf("status %d, want %d", code, status)
		}
		if len(hdr["Retry-After"]) == 0 || hdr["Retry-After"][0] == "" {
			t.Fatalf("%d without Retry-After: %v", code, hdr)
		}
	}
	t.Run("a run that failed for rate, batch chat", func(t *testing.T) {
		resp, body := e.raw(t, "POST", "/api/v1/chat", `{"message":"hi"}`, "Authorization", "Bearer "+e.key(t, "alice"))
		check(t, resp.StatusCode, 429, resp.Header)
		if !strings.Contains(body, "rate_limited") {
			t.Fatalf("body %s", body)
		}
	})
	t.Run("readyz while not ready", func(t *testing.T) {
		resp, _ := e.raw(t, "GET", "/readyz", "")
		check(t, resp.StatusCode, 503, resp.Header)
	})
	t.Run("too many streams", func(t *testing.T) {
		first, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
		defer first.Body.Close()
		resp, _ := e.raw(t, "GET", "/api/v1/sessions/"+sid+"/stream", "", "Authorization", "Bearer "+e.key(t, "alice"))
		check(t, resp.StatusCode, 429, resp.Header)
	})
	t.Run("run budget spent", func(t *testing.T) {
		release := e.blockRuns(t)
		defer func() { release(); waitIdle(t, e) }()
		hold, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp := e.streamAs(t, hold, "dave", `{"message":"hold"}`)
		defer resp.Body.Close()
		for _, path := range []string{"/api/v1/chat", "/api/v1/chat/stream"} {
			resp, _ := e.raw(t, "POST", path, `{"message":"hi"}`, "Authorization", "Bearer "+e.key(t, "bob"))
			check(t, resp.StatusCode, 503, resp.Header)
		}
	})
	t.Run("credentials cannot be checked (store down)", func(t *testing.T) {
		alice := "Bearer " + e.key(t, "erin") // a key the cache has never seen
		e.store.Close()
		for _, path := range []string{"/api/v1/sessions", "/api/v1/me", "/api/v1/models"} {
			resp, _ := e.raw(t, "GET", path, "", "Authorization", alice)
			check(t, resp.StatusCode, 503, resp.Header)
		}
	})
}

// streamAs starts a chat stream as user and checks it is one.
func (e *env) streamAs(t *testing.T, ctx context.Context, user, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/chat/stream", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	e.authorize(t, req, "X-Test-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("stream as %s: %d", user, resp.StatusCode)
	}
	return resp
}

// Every route of routes.go, past the caller's rate limit, answers 429 with Retry-After.
func TestEveryRouteRateLimitedWithRetryAfter(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) {
		d.Limiter = limit.NewMemory()
		d.UserRate = limit.Rate{Count: 1, Per: time.Hour, Burst: 1}
		d.GuestRate = limit.Rate{Count: 1, Per: time.Hour, Burst: 1}
	})
	bob := "Bearer " + e.key(t, "bob")
	e.raw(t, "GET", "/api/v1/me", "", "Authorization", bob) // bob's one request
	for route, c := range crossUserRoutes {
		t.Run(route, func(t *testing.T) {
			path := strings.NewReplacer("{A}", "01a2b3c4", "{K}", "01a2b3c4").Replace(c.path)
			resp, body := e.raw(t, c.method, path, c.body, "Authorization", bob, "Content-Type", "application/json")
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s %s: %d (Retry-After %q) %s", c.method, path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
		})
	}
}
