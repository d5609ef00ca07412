package websearch_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/ask"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/websearch"
)

// reply is one scripted answer of a fake backend.
type reply struct {
	status int
	header map[string]string
	body   string
}

// fake is a search API that answers with its script (the last reply repeats) and keeps the
// requests it got.
type fake struct {
	mu     sync.Mutex
	script []reply
	reqs   []*http.Request
	bodies []string
	srv    *httptest.Server
}

func newFake(t *testing.T, script ...reply) *fake {
	f := &fake{script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, r)
		f.bodies = append(f.bodies, string(b))
		rp := f.script[0]
		if len(f.script) > 1 {
			f.script = f.script[1:]
		}
		f.mu.Unlock()
		for k, v := range rp.header {
			w.Header().Set(k, v)
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(rp.status)
		io.WriteString(w, rp.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) calls() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.reqs) }

// The success bodies, as each API documents them (trimmed to the fields around the ones read).
const (
	searxngOK = `{"query":"go 1.26","number_of_results":0,"results":[` +
		`{"url":"https://go.dev/doc/go1.26","title":"Go 1.26 Release Notes","content":"Go 1.26 is a major release &amp; more.","engine":"duckduckgo","parsed_url":["https","go.dev","/doc/go1.26","","",""],"template":"default.html","engines":["duckduckgo"],"positions":[1],"score":1.0,"category":"general","publishedDate":null},` +
		`{"url":"https://go.dev/blog/go1.26","title":"Go 1.26 is released","content":"The Go team…","engine":"bing","score":0.5,"category":"general","publishedDate":"2026-02-10T00:00:00"},` +
		`{"url":"https://example.com/3","title":"Third","content":"three","engine":"bing","score":0.2,"category":"general"}],` +
		`"answers":[],"corrections":[],"infoboxes":[],"suggestions":["go 1.26 features"],"unresponsive_engines":[["google","timeout"]]}`
	tavilyOK = `{"query":"go 1.26","follow_up_questions":null,"answer":null,"images":[],"results":[` +
		`{"title":"Go 1.26 Release Notes","url":"https://go.dev/doc/go1.26","content":"Go 1.26 is a major release.","score":0.98,"raw_content":null,"favicon":"https://go.dev/favicon.ico"},` +
		`{"title":"Go 1.26 is released","url":"https://go.dev/blog/go1.26","content":"The Go team…","score":0.9,"raw_content":null}],` +
		`"response_time":"1.67","usage":{"credits":1},"request_id":"123e4567-e89b-12d3-a456-426614174111"}`
	braveOK = `{"type":"search","query":{"original":"go 1.26","show_strict_warning":false,"is_navigational":false,"spellcheck_off":true,"country":"us","more_results_available":true},` +
		`"mixed":{"type":"mixed","main":[{"type":"web","index":0,"all":false}]},"web":{"type":"search","results":[` +
		`{"title":"Go 1.26 Release Notes","url":"https://go.dev/doc/go1.26","is_source_local":false,"is_source_both":false,"description":"<strong>Go 1.26</strong> is a major release.","page_age":"2026-02-10T00:00:00","profile":{"name":"Go"},"language":"en","family_friendly":true,"type":"search_result","subtype":"generic","age":"February 10, 2026"},` +
		`{"title":"Go 1.26 is released","url":"https://go.dev/blog/go1.26","description":"The Go team…","type":"search_result"}],"family_friendly":true}}`
)

func TestBackendsSpeakTheirWireFormat(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		backend func(url string) websearch.Backend
		check   func(t *testing.T, r *http.Request, body string)
		credits float64
	}{
		{"searxng", searxngOK, func(u string) websearch.Backend { return &websearch.SearXNG{BaseURL: u} },
			func(t *testing.T, r *http.Request, _ string) {
				q := r.URL.Query()
				if r.Method != http.MethodGet || r.URL.Path != "/search" || q.Get("q") != "go 1.26" || q.Get("format") != "json" || q.Get("time_range") != "week" {
					t.Errorf("request: %s %s", r.Method, r.URL)
				}
			}, 0},
		{"tavily", tavilyOK, func(u string) websearch.Backend { return &websearch.Tavily{BaseURL: u, APIKey: "tvly-secret"} },
			func(t *testing.T, r *http.Request, body string) {
				var b map[string]any
				json.Unmarshal([]byte(body), &b)
				if r.Method != http.MethodPost || r.URL.Path != "/search" || r.Header.Get("Authorization") != "Bearer tvly-secret" ||
					r.Header.Get("Content-Type") != "application/json" || b["query"] != "go 1.26" || b["max_results"] != 2.0 ||
					b["time_range"] != "week" || b["include_usage"] != true || b["search_depth"] != "basic" {
					t.Errorf("request: %s %s %v %s", r.Method, r.URL, r.Header, body)
				}
			}, 1},
		{"brave", braveOK, func(u string) websearch.Backend { return &websearch.Brave{BaseURL: u, APIKey: "BSA-secret"} },
			func(t *testing.T, r *http.Request, _ string) {
				q := r.URL.Query()
				if r.Method != http.MethodGet || r.URL.Path != "/res/v1/web/search" || r.Header.Get("X-Subscription-Token") != "BSA-secret" ||
					q.Get("q") != "go 1.26" || q.Get("count") != "2" || q.Get("freshness") != "pw" || r.Header.Get("Accept") != "application/json" {
					t.Errorf("request: %s %s %v", r.Method, r.URL, r.Header)
				}
			}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, reply{status: 200, body: c.body})
			res, err := c.backend(f.srv.URL).Search(context.Background(), websearch.Query{Text: "go 1.26", Count: 2, Recency: "week"})
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, f.reqs[0], f.bodies[0])
			if len(res.Sources) != 2 || res.Credits != c.credits {
				t.Fatalf("result: %+v", res)
			}
			s := res.Sources[0]
			if s.Title != "Go 1.26 Release Notes" || s.URL != "https://go.dev/doc/go1.26" || !strings.HasPrefix(s.Snippet, "Go 1.26 is a major release") ||
				strings.Contains(s.Snippet, "<") || strings.Contains(s.Snippet, "&amp;") {
				t.Fatalf("first source: %+v", s)
			}
		})
	}
}

func TestBackendErrorShapes(t *testing.T) {
	cases := []struct {
		name    string
		backend func(url string) websearch.Backend
		reply   reply
		status  int
		message string
	}{
		{"searxng json off", func(u string) websearch.Backend { return &websearch.SearXNG{BaseURL: u} },
			reply{status: 403, header: map[string]string{"Content-Type": "text/html"}, body: "<!DOCTYPE html><html><body><h1>403 Forbidden</h1></body></html>"},
			403, "add json to search.formats"},
		{"searxng limiter", func(u string) websearch.Backend { return &websearch.SearXNG{BaseURL: u} },
			reply{status: 429, header: map[string]string{"Content-Type": "text/plain"}, body: "Too Many Requests"}, 429, "Too Many Requests"},
		{"tavily bad key", func(u string) websearch.Backend { return &websearch.Tavily{BaseURL: u, APIKey: "x"} },
			reply{status: 401, body: `{"detail":{"error":"Unauthorized: missing or invalid API key."}}`}, 401, "Unauthorized: missing or invalid API key."},
		{"tavily plan limit", func(u string) websearch.Backend { return &websearch.Tavily{BaseURL: u, APIKey: "x"} },
			reply{status: 432, body: `{"detail":{"error":"This request exceeds your plan's set usage limit. Please upgrade your plan or contact support@tavily.com"}}`}, 432, "exceeds your plan"},
		{"tavily rate limit", func(u string) websearch.Backend { return &websearch.Tavily{BaseURL: u, APIKey: "x"} },
			reply{status: 429, body: `{"detail":{"error":"Your request has been blocked due to excessive requests. Please reduce rate of requests."}}`}, 429, "excessive requests"},
		{"brave bad token", func(u string) websearch.Backend { return &websearch.Brave{BaseURL: u, APIKey: "x"} },
			reply{status: 422, body: `{"type":"ErrorResponse","error":{"id":"9a6e2a2e-4e4c-4a1e-8a3e-6b1a5b3c1d2e","status":422,"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"The provided subscription token is invalid.","meta":{"component":"authentication"}},"time":1732435200}`},
			422, "SUBSCRIPTION_TOKEN_INVALID: The provided subscription token is invalid."},
		{"brave rate limit", func(u string) websearch.Backend { return &websearch.Brave{BaseURL: u, APIKey: "x"} },
			reply{status: 429, header: map[string]string{"X-RateLimit-Limit": "1, 2000", "X-RateLimit-Remaining": "0, 1990", "X-RateLimit-Reset": "1, 1419704"},
				body: `{"type":"ErrorResponse","error":{"id":"c1","status":429,"code":"RATE_LIMITED","detail":"Request rate limit exceeded for plan.","meta":{"plan":"Free","rate_limit":1,"rate_current":2,"quota_limit":2000,"quota_current":10,"component":"rate_limiter"}},"time":1732435200}`},
			429, "RATE_LIMITED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, c.reply)
			_, err := c.backend(f.srv.URL).Search(context.Background(), websearch.Query{Text: "q", Count: 3})
			var he *websearch.HTTPError
			if !errors.As(err, &he) || he.Status != c.status || !strings.Contains(he.Error(), c.message) {
				t.Fatalf("err = %v; want status %d with %q", err, c.status, c.message)
			}
			if c.name == "brave rate limit" && he.RetryAfter != time.Second {
				t.Errorf("RetryAfter from X-RateLimit-Reset = %s, want 1s", he.RetryAfter)
			}
		})
	}
}

// harness runs web_search through a registry as a run of a session would, with a real SQLite
// cost store, and keeps the events and the waits of the retry policy.
type harness struct {
	reg    *tools.Registry
	store  *sqlite.Store
	sess   string
	mu     sync.Mutex
	events []parley.Event
	sleeps []time.Duration
}

func newHarness(t *testing.T, b websearch.Backend, rewrite ask.Model) *harness {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	h := &harness{reg: tools.NewRegistry(), store: st, sess: sess.ID}
	tool := websearch.Tool(websearch.Config{Backend: b, Rewrite: rewrite, Costs: st, DollarsPerCredit: 0.008,
		Retry: websearch.Retry{Attempts: 3, Base: time.Second, Max: 8 * time.Second, Rand: func() float64 { return 0.5 },
			Sleep: func(ctx context.Context, d time.Duration) error {
				h.mu.Lock()
				h.sleeps = append(h.sleeps, d)
				h.mu.Unlock()
				return nil
			}}})
	if err := h.reg.Register(tool); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) search(t *testing.T, args string) tools.Outcome {
	t.Helper()
	ctx := tools.WithRun(context.Background(), tools.RunInfo{SessionID: h.sess, RunID: "run1", User: "alice",
		Emit: func(ev parley.Event) { h.mu.Lock(); h.events = append(h.events, ev); h.mu.Unlock() }})
	return h.reg.Call(ctx, parley.ToolCall{ID: "call_s1", Type: "function", Function: parley.FunctionCall{Name: "web_search", Arguments: args}}, nil)
}

func TestWebSearchToolFormatsEmitsAndRecordsCost(t *testing.T) {
	f := newFake(t, reply{status: 200, body: tavilyOK})
	h := newHarness(t, &websearch.Tavily{BaseURL: f.srv.URL, APIKey: "k"}, ask.Model{})
	out := h.search(t, `{"query":"go 1.26","count":2}`)
	want := "WEB SEARCH RESULTS\nQuery: go 1.26\n\nSource 1: Go 1.26 Release Notes\nURL: https://go.dev/doc/go1.26\nGo 1.26 is a major release.\n\n" +
		"Source 2: Go 1.26 is released\nURL: https://go.dev/blog/go1.26\nThe Go team…\n"
	if !out.Success || out.Content.String() != want {
		t.Fatalf("result (success %v):\n%s\nwant:\n%s", out.Success, out.Content.String(), want)
	}
	if len(h.events) != 1 || h.events[0].Type != parley.EventWebSearch {
		t.Fatalf("events: %+v", h.events)
	}
	ws := h.events[0].WebSearch
	if ws.Query != "go 1.26" || ws.Backend != "tavily" || ws.ToolCallID != "call_s1" || len(ws.Sources) != 2 || ws.Sources[1].URL != "https://go.dev/blog/go1.26" {
		t.Fatalf("web_search event: %+v", ws)
	}
	u, err := h.store.OwnerSearchUsage(context.Background(), "alice")
	if err != nil || u.Calls != 1 || u.Credits != 1 || u.Dollars != 0.008 || u.ByBackend["tavily"].Calls != 1 {
		t.Fatalf("cost: %+v %v", u, err)
	}
	// The schema refuses a count out of range before any call.
	if out := h.search(t, `{"query":"x","count":50}`); out.Success || f.calls() != 1 {
		t.Fatalf("count 50: %v, %d calls", out.Content.String(), f.calls())
	}
}

func TestWebSearchBacksOffOn429And5xx(t *testing.T) {
	braveLimited := reply{status: 429, header: map[string]string{"Retry-After": "2"},
		body: `{"type":"ErrorResponse","error":{"id":"c1","status":429,"code":"RATE_LIMITED","detail":"Request rate limit exceeded for plan."},"time":1}`}
	unavailable := reply{status: 503, body: `{"type":"ErrorResponse","error":{"id":"c2","status":503,"code":"SERVICE_UNAVAILABLE","detail":"try later"},"time":1}`}

	t.Run("recovers", func(t *testing.T) {
		f := newFake(t, braveLimited, unavailable, reply{status: 200, body: braveOK})
		h := newHarness(t, &websearch.Brave{BaseURL: f.srv.URL, APIKey: "k"}, ask.Model{})
		out := h.search(t, `{"query":"go 1.26"}`)
		if !out.Success || f.calls() != 3 {
			t.Fatalf("result after %d calls: %s", f.calls(), out.Content.String())
		}
		// The first wait is the Retry-After; the second the backoff of try 2 (2s, half of it
		// jittered: 1s + 0.5*1s).
		if len(h.sleeps) != 2 || h.sleeps[0] != 2*time.Second || h.sleeps[1] != 1500*time.Millisecond {
			t.Fatalf("waits: %v", h.sleeps)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		f := newFake(t, unavailable)
		h := newHarness(t, &websearch.Brave{BaseURL: f.srv.URL, APIKey: "k"}, ask.Model{})
		out := h.search(t, `{"query":"go 1.26"}`)
		if out.Success || f.calls() != 3 || !strings.Contains(out.Content.String(), "503") || !strings.Contains(out.Content.String(), "after 3 attempts") {
			t.Fatalf("after %d calls: %s", f.calls(), out.Content.String())
		}
		if len(h.sleeps) != 2 || h.sleeps[0] != 750*time.Millisecond {
			t.Fatalf("waits: %v", h.sleeps)
		}
		if u, _ := h.store.OwnerSearchUsage(context.Background(), "alice"); u.Calls != 0 {
			t.Fatalf("a failed search was billed: %+v", u)
		}
	})
	t.Run("retry-after too long", func(t *testing.T) {
		f := newFake(t, reply{status: 429, header: map[string]string{"Retry-After": "3600"}, body: `{"detail":{"error":"Your request has been blocked due to excessive requests."}}`})
		h := newHarness(t, &websearch.Tavily{BaseURL: f.srv.URL, APIKey: "k"}, ask.Model{})
		out := h.search(t, `{"query":"go 1.26"}`)
		if out.Success || f.calls() != 1 || len(h.sleeps) != 0 || !strings.Contains(out.Content.String(), "excessive requests") {
			t.Fatalf("after %d calls, waits %v: %s", f.calls(), h.sleeps, out.Content.String())
		}
	})
	t.Run("client errors are not retried", func(t *testing.T) {
		f := newFake(t, reply{status: 401, body: `{"detail":{"error":"Unauthorized: missing or invalid API key."}}`})
		h := newHarness(t, &websearch.Tavily{BaseURL: f.srv.URL, APIKey: "k"}, ask.Model{})
		if out := h.search(t, `{"query":"go"}`); out.Success || f.calls() != 1 {
			t.Fatalf("after %d calls: %s", f.calls(), out.Content.String())
		}
	})
}

// rewriter is a fake small model for the query rewrite.
type rewriter struct {
	answer string
	err    error
}

func (r *rewriter) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	if r.err != nil {
		return nil, r.err
	}
	return &stream{evs: []parley.StreamEvent{{Type: parley.StreamContent, Content: r.answer}}}, nil
}

type stream struct{ evs []parley.StreamEvent }

func (s *stream) Next() (parley.StreamEvent, error) {
	if len(s.evs) == 0 {
		return parley.StreamEvent{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}
func (s *stream) Close() error { return nil }

func TestQueryRewrite(t *testing.T) {
	for _, c := range []struct {
		name  string
		model *rewriter
		sent  string
	}{
		{"rewritten", &rewriter{answer: "\"go 1.26 release date\"\n"}, "go 1.26 release date"},
		{"model fails", &rewriter{err: errors.New("upstream down")}, "when does the next version of go come out?"},
		{"empty answer", &rewriter{answer: "  "}, "when does the next version of go come out?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, reply{status: 200, body: searxngOK})
			h := newHarness(t, &websearch.SearXNG{BaseURL: f.srv.URL},
				ask.Model{Name: "fake/small", Resolve: func(string) (parley.Provider, string, error) { return c.model, "small", nil }})
			out := h.search(t, `{"query":"when does the next version of go come out?"}`)
			if !out.Success {
				t.Fatal(out.Content.String())
			}
			if got := f.reqs[0].URL.Query().Get("q"); got != c.sent {
				t.Fatalf("query sent %q, want %q", got, c.sent)
			}
			ws := h.events[0].WebSearch
			if (c.sent != "when does the next version of go come out?") != (ws.Original != "") {
				t.Fatalf("event: %+v", ws)
			}
			if len(ws.Sources) != 3 {
				t.Fatalf("searxng sources (count 5, three found): %d", len(ws.Sources))
			}
		})
	}
}
