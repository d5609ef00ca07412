package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/provider/openai"
)

// fake is a misbehaving upstream: a scripted llmtest server behind real HTTP.
type fake struct {
	srv *llmtest.Server
	url string
}

func newFake(t *testing.T) *fake {
	t.Helper()
	s := llmtest.NewServer(llmtest.WithChunkSize(3))
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &fake{srv: s, url: hs.URL + "/v1"}
}

func (f *fake) endpoint(name string, models ...string) Endpoint {
	return Endpoint{Name: name, Kind: "openai", Provider: openai.New(openai.Config{BaseURL: f.url, HTTPClient: &http.Client{}}), Models: models}
}

// harness records the waits the router asks for instead of waiting, and runs a fake clock.
type harness struct {
	mu     sync.Mutex
	sleeps []time.Duration
	now    time.Time
}

func (h *harness) config(cfg Config) Config {
	h.now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { h.mu.Lock(); defer h.mu.Unlock(); return h.now }
	cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.sleeps = append(h.sleeps, d)
		return ctx.Err()
	}
	cfg.Jitter = func() float64 { return 0.5 }
	return cfg
}

func (h *harness) advance(d time.Duration) { h.mu.Lock(); defer h.mu.Unlock(); h.now = h.now.Add(d) }

func (h *harness) waits() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.sleeps...)
}

func newRouter(t *testing.T, h *harness, cfg Config) *Router {
	t.Helper()
	r, err := New(h.config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var hello = []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hello")}}

// call resolves model, streams one call and drains it: the text, the model that answered, the
// usage, and the error that ended it (nil at a clean end).
func call(t *testing.T, r *Router, model string) (string, string, *parley.Usage, error) {
	t.Helper()
	p, full, err := r.Resolve(model)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.Stream(ctx, &parley.ChatRequest{Model: full, Messages: hello})
	if err != nil {
		return "", "", nil, err
	}
	defer s.Close()
	answeredBy := s.(parley.ModelReporter).Model()
	var b parley.ResponseBuilder
	for {
		ev, err := s.Next()
		if err == io.EOF {
			resp := b.Response()
			return resp.Content, answeredBy, resp.Usage, nil
		}
		if err != nil {
			return b.Response().Content, answeredBy, nil, err
		}
		b.Add(ev)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m"})
	f.srv.Enqueue(llmtest.Turn{Status: 429, RetryAfter: "7"}, llmtest.Turn{Content: "made it"})
	text, _, _, err := call(t, r, "")
	if err != nil || text != "made it" {
		t.Fatalf("got %q, %v", text, err)
	}
	if w := h.waits(); len(w) != 1 || w[0] != 7*time.Second {
		t.Fatalf("waits %v, want [7s] from Retry-After", w)
	}
	if n := len(f.srv.Requests()); n != 2 {
		t.Fatalf("%d upstream requests, want 2", n)
	}
}

func TestRetryAfterBeyondMaxWaitIsNotRetried(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", Retry: Retry{MaxWait: 5 * time.Second}})
	f.srv.Enqueue(llmtest.Turn{Status: 429, RetryAfter: "3600"})
	if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECRateLimited {
		t.Fatalf("err %v, want the 429 itself", err)
	}
	if len(h.waits()) != 0 || len(f.srv.Requests()) != 1 {
		t.Fatalf("waits %v, %d requests: an hour-long Retry-After was waited for", h.waits(), len(f.srv.Requests()))
	}
}

func TestRetryBacksOffExponentiallyOn5xxThenGivesUp(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m",
		Retry: Retry{Attempts: 4, Base: 100 * time.Millisecond, Max: 300 * time.Millisecond}, BreakerFailures: 10})
	f.srv.Enqueue(llmtest.Turn{Status: 500}, llmtest.Turn{Status: 502}, llmtest.Turn{Status: 503}, llmtest.Turn{Status: 504})
	_, _, _, err := call(t, r, "")
	var se *parley.StatusError
	if !errors.As(err, &se) || se.StatusCode != 504 {
		t.Fatalf("err %v, want the last 504", err)
	}
	// Base doubles per try up to Max; with the jitter at 0.5 each wait is 3/4 of it.
	want := []time.Duration{75 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond}
	if w := h.waits(); len(w) != 3 || w[0] != want[0] || w[1] != want[1] || w[2] != want[2] {
		t.Fatalf("waits %v, want %v", w, want)
	}
}

func TestJitterStaysWithinHalfToWholeBackoff(t *testing.T) {
	r := &Router{cfg: Config{Retry: Retry{Base: time.Second, Max: 8 * time.Second}}}
	for _, j := range []float64{0, 0.999999} {
		r.cfg.Jitter = func() float64 { return j }
		for try, full := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
			if d := r.backoff(try + 1); d < full/2 || d > full {
				t.Errorf("jitter %v try %d: %v outside [%v, %v]", j, try+1, d, full/2, full)
			}
		}
	}
}

func TestRetryOnConnectionError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every connection is refused
	h := &harness{}
	dead := Endpoint{Name: "dead", Provider: openai.New(openai.Config{BaseURL: "http://" + addr + "/v1", HTTPClient: &http.Client{}}), Models: []string{"m"}}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{dead}, Default: "dead/m", BreakerFailures: 10})
	if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECUpstream {
		t.Fatalf("err %v, want an upstream error", err)
	}
	if w := h.waits(); len(w) != 2 {
		t.Fatalf("waits %v, want 2 retries of a refused connection", w)
	}
}

func TestRetryWhenStreamIsCutBeforeTheFirstToken(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m"})
	// The first chunk carries only the role: no event reaches the caller before the cut.
	f.srv.Enqueue(llmtest.Turn{Content: "lost", CutAfter: 1}, llmtest.Turn{Content: "second try"})
	text, _, _, err := call(t, r, "")
	if err != nil || text != "second try" || len(f.srv.Requests()) != 2 {
		t.Fatalf("got %q, %v after %d requests", text, err, len(f.srv.Requests()))
	}
}

func TestNoRetryAfterTheFirstToken(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m"})
	f.srv.Enqueue(llmtest.Turn{Content: "Once upon a time", CutAfter: 3}, llmtest.Turn{Content: "must not be asked"})
	text, _, _, err := call(t, r, "")
	if !errors.Is(err, io.ErrUnexpectedEOF) || text != "Once u" {
		t.Fatalf("got %q, %v: want the partial text and a cut-stream error", text, err)
	}
	if n := len(f.srv.Requests()); n != 1 || len(h.waits()) != 0 {
		t.Fatalf("%d requests, waits %v: a call was retried after tokens reached the caller", n, h.waits())
	}
}

func TestNoRetryOnClientErrors(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", BreakerFailures: 1})
	f.srv.Enqueue(llmtest.Turn{Status: 400, ErrorMessage: "bad request"}, llmtest.Turn{Status: 401})
	for range 2 {
		if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECUpstream {
			t.Fatalf("err %v", err)
		}
	}
	if len(f.srv.Requests()) != 2 || len(h.waits()) != 0 {
		t.Fatalf("%d requests, waits %v: a 4xx was retried", len(f.srv.Requests()), h.waits())
	}
	if m := r.Models(); m[0].Breaker != "closed" {
		t.Fatalf("breaker %s: refused requests opened it", m[0].Breaker)
	}
}

func TestBreakerOpensAfterThreeFailuresAndHalfOpensAfterCooldown(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", Retry: Retry{Attempts: 1}})
	f.srv.Enqueue(llmtest.Turn{Status: 500}, llmtest.Turn{Status: 500}, llmtest.Turn{Status: 500})
	for range 3 {
		if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECUpstream {
			t.Fatalf("err %v", err)
		}
	}
	_, _, _, err := call(t, r, "")
	var se *parley.StatusError
	if parley.CodeOf(err) != parley.ECUnavailable || !errors.As(err, &se) || se.RetryAfter != 30*time.Second || parley.RetryAfterOf(err) != 30*time.Second {
		t.Fatalf("err %v, want unavailable with 30s to wait (Retry-After %v)", err, parley.RetryAfterOf(err))
	}
	if n := len(f.srv.Requests()); n != 3 {
		t.Fatalf("%d upstream requests: the open breaker let one through", n)
	}
	if m := r.Models(); m[0].Breaker != "open" {
		t.Fatalf("breaker %s, want open", m[0].Breaker)
	}
	h.advance(30 * time.Second)
	if m := r.Models(); m[0].Breaker != "half_open" {
		t.Fatalf("breaker %s after the cooldown, want half_open", m[0].Breaker)
	}
	// One trial: it fails, and the breaker opens again without a second request.
	f.srv.Enqueue(llmtest.Turn{Status: 503})
	call(t, r, "")
	if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECUnavailable || len(f.srv.Requests()) != 4 {
		t.Fatalf("after a failed trial: %v, %d requests", err, len(f.srv.Requests()))
	}
	h.advance(30 * time.Second)
	if text, _, _, err := call(t, r, ""); err != nil || text == "" {
		t.Fatalf("trial: %q %v", text, err)
	}
	if m := r.Models(); m[0].Breaker != "closed" {
		t.Fatalf("breaker %s after a good trial, want closed", m[0].Breaker)
	}
}

// A call's retries are one call to the breaker: three 5xx tries of one call are one failure.
func TestBreakerCountsACallAndItsRetriesOnce(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", BreakerFailures: 2})
	for range 3 {
		f.srv.Enqueue(llmtest.Turn{Status: 503})
	}
	if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECUpstream || len(f.srv.Requests()) != 3 {
		t.Fatalf("first call: %v after %d requests", err, len(f.srv.Requests()))
	}
	if m := r.Models(); m[0].Breaker != "closed" {
		t.Fatalf("breaker %s after one call that was tried three times, want closed", m[0].Breaker)
	}
	for range 3 {
		f.srv.Enqueue(llmtest.Turn{Status: 503})
	}
	call(t, r, "")
	if m := r.Models(); m[0].Breaker != "open" {
		t.Fatalf("breaker %s after two failed calls, want open", m[0].Breaker)
	}
}

// A provider that asks to slow down is not down: 429s never open the breaker, and the caller is
// told the real cause with the provider's wait, or the router's own backoff when it gave none.
func TestRateLimitsNeverOpenTheBreaker(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", BreakerFailures: 1,
		Retry: Retry{Base: time.Second, Max: 8 * time.Second}})
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{
		{"7", 7 * time.Second},
		{"", 3 * time.Second}, // backoff(3) with the jitter at 0.5: 3/4 of 4 s
		{"2", 2 * time.Second},
	} {
		for range 3 {
			f.srv.Enqueue(llmtest.Turn{Status: 429, RetryAfter: tc.retryAfter})
		}
		_, _, _, err := call(t, r, "")
		if parley.CodeOf(err) != parley.ECRateLimited || parley.RetryAfterOf(err) != tc.want {
			t.Fatalf("Retry-After %q: err %v with wait %v, want rate_limited with %v", tc.retryAfter, err, parley.RetryAfterOf(err), tc.want)
		}
		if msg := parley.MessageOf(err); !strings.Contains(msg, `provider "up" is rate limiting`) {
			t.Fatalf("message %q does not name the cause", msg)
		}
		if m := r.Models(); m[0].Breaker != "closed" {
			t.Fatalf("breaker %s after 429s, want closed", m[0].Breaker)
		}
	}
	// The provider is still called: nothing was closed for anyone.
	if text, _, _, err := call(t, r, ""); err != nil || text == "" {
		t.Fatalf("after the rate limits: %q, %v", text, err)
	}
}

// A provider that does not answer in time is down.
func TestBreakerCountsATimeout(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", BreakerFailures: 1})
	f.srv.Enqueue(llmtest.Turn{Content: "far too slow", Delay: time.Minute})
	p, full, _ := r.Resolve("")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := p.Stream(ctx, &parley.ChatRequest{Model: full, Messages: hello}); err == nil {
		t.Fatal("a call that timed out before its first token succeeded")
	}
	if m := r.Models(); m[0].Breaker != "open" {
		t.Fatalf("breaker %s after a timeout, want open", m[0].Breaker)
	}
}

func TestHalfOpenLetsOneTrialThrough(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m")}, Default: "up/m", Retry: Retry{Attempts: 1}, BreakerFailures: 1})
	f.srv.Enqueue(llmtest.Turn{Status: 500}, llmtest.Turn{Content: "slow trial", Delay: 50 * time.Millisecond})
	call(t, r, "")
	h.advance(time.Minute)
	p, full, _ := r.Resolve("")
	trial, err := p.Stream(context.Background(), &parley.ChatRequest{Model: full, Messages: hello})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := call(t, r, ""); parley.CodeOf(err) != parley.ECUnavailable {
		t.Fatalf("second call during the trial: %v, want unavailable", err)
	}
	for {
		if _, err := trial.Next(); err != nil {
			break
		}
	}
	trial.Close()
	if m := r.Models(); m[0].Breaker != "closed" {
		t.Fatalf("breaker %s after the trial ended well", m[0].Breaker)
	}
}

func TestFallbackAnswersWhileTheBreakerIsOpen(t *testing.T) {
	primary, backup := newFake(t), newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{
		Endpoints: []Endpoint{primary.endpoint("main", "big"), backup.endpoint("spare", "small")},
		Default:   "main/big",
		Fallbacks: map[string][]string{"main/big": {"spare/small"}},
		// One call, with its three tries, is one failure: one is enough here.
		BreakerFailures: 1,
	})
	primary.srv.Enqueue(llmtest.Turn{Status: 503}, llmtest.Turn{Status: 503}, llmtest.Turn{Status: 503})
	backup.srv.Enqueue(llmtest.Turn{Content: "from the spare"}, llmtest.Turn{Content: "spare again"})
	text, by, _, err := call(t, r, "main/big")
	if err != nil || text != "from the spare" || by != "spare/small" {
		t.Fatalf("got %q by %q, %v", text, by, err)
	}
	if got := backup.srv.Requests()[0].Model; got != "small" {
		t.Fatalf("the spare was asked for model %q", got)
	}
	// The primary's breaker is open now: the next call goes to the spare without touching it.
	text, by, _, err = call(t, r, "main/big")
	if err != nil || by != "spare/small" || len(primary.srv.Requests()) != 3 {
		t.Fatalf("second call: %q by %q, %v; primary saw %d requests", text, by, err, len(primary.srv.Requests()))
	}
	// Without a fallback the open breaker is the answer.
	r2 := newRouter(t, h, Config{Endpoints: []Endpoint{primary.endpoint("main", "big")}, Default: "main/big", BreakerFailures: 1, Retry: Retry{Attempts: 1}})
	primary.srv.Enqueue(llmtest.Turn{Status: 500})
	call(t, r2, "")
	if _, _, _, err := call(t, r2, ""); parley.CodeOf(err) != parley.ECUnavailable {
		t.Fatalf("no fallback: %v", err)
	}
}

func TestCostFromThePriceTable(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("up", "m", "free")}, Default: "up/m",
		Prices: map[string]Price{"up/m": {Input: 2.5, CachedInput: 1.25, Output: 10}}})
	f.srv.Enqueue(llmtest.Turn{Content: "priced", Usage: &parley.Usage{PromptTokens: 1_000_000, CachedTokens: 400_000, CompletionTokens: 200_000, TotalTokens: 1_200_000}},
		llmtest.Turn{Content: "free"})
	_, _, u, err := call(t, r, "")
	if err != nil || u == nil {
		t.Fatal(err)
	}
	// 600k fresh × 2.5 + 400k cached × 1.25 + 200k out × 10, per million.
	if want := 1.5 + 0.5 + 2.0; u.Cost != want {
		t.Fatalf("cost %v, want %v", u.Cost, want)
	}
	if _, _, u, _ := call(t, r, "up/free"); u == nil || u.Cost != 0 {
		t.Fatalf("unpriced model: %+v", u)
	}
}

func TestToolResultsAsTextOption(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	e := f.endpoint("glm", "glm-4.6")
	e.ToolResultsAsText = true
	r := newRouter(t, h, Config{Endpoints: []Endpoint{e}, Default: "glm/glm-4.6"})
	p, full, _ := r.Resolve("")
	msgs := []parley.Message{
		{Role: parley.RoleUser, Content: parley.Text("time?")},
		{Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "now", Arguments: "{}"}}}},
		{Role: parley.RoleTool, ToolCallID: "call_1", Content: parley.Text("12:00")},
	}
	s, err := p.Stream(context.Background(), &parley.ChatRequest{Model: full, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	got := f.srv.Requests()[0].Messages
	if len(got) != 3 || got[2].Role != parley.RoleUser || !strings.Contains(got[2].Content.String(), "<tool_call_id>call_1</tool_call_id>") {
		t.Fatalf("upstream saw %+v", got)
	}
	if msgs[2].Role != parley.RoleTool {
		t.Fatal("the caller's history was changed")
	}
}

func TestResolveNames(t *testing.T) {
	a, b := newFake(t), newFake(t)
	h := &harness{}
	open := b.endpoint("ollama")
	r := newRouter(t, h, Config{Endpoints: []Endpoint{a.endpoint("openai", "gpt-4o", "shared"), a.endpoint("other", "shared"), open}, Default: "gpt-4o"})
	for _, tt := range []struct{ in, want, err string }{
		{"", "openai/gpt-4o", ""},
		{"gpt-4o", "openai/gpt-4o", ""},
		{"openai/gpt-4o", "openai/gpt-4o", ""},
		{"ollama/llama3.2:3b", "ollama/llama3.2:3b", ""}, // a provider without a model list takes any name
		{"ollama/", "", "names no model"},
		{"ollama/*", "", "names no model"}, // how GET /api/v1/models shows a provider without a list
		{"openai/gpt-5", "", "does not offer"},
		{"shared", "", "several providers"},
		{"nope", "", `no provider lists it; name it as provider/model (ollama/nope;`},
		{"nope/x", "", "unknown model"},
	} {
		_, full, err := r.Resolve(tt.in)
		if tt.err != "" {
			if err == nil || parley.CodeOf(err) != parley.ECInvalid || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Resolve(%q) = %q, %v; want an invalid-model error with %q", tt.in, full, err, tt.err)
			}
			continue
		}
		if err != nil || full != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.in, full, err, tt.want)
		}
	}
	models := r.Models()
	if models[0].ID != "openai/gpt-4o" || !models[0].Default || models[len(models)-1].ID != "ollama/*" {
		t.Fatalf("models %+v", models)
	}
	// The only provider, without a model list, takes a bare name (PARLEY_MODEL=llama3.2 beside
	// PARLEY_OPENAI_BASE_URL of an Ollama), as its default too.
	only := newRouter(t, h, Config{Endpoints: []Endpoint{b.endpoint("openai")}, Default: "llama3.2"})
	for in, want := range map[string]string{"": "openai/llama3.2", "llama3.2": "openai/llama3.2", "qwen3:8b": "openai/qwen3:8b", "Qwen/Qwen3-8B": "openai/Qwen/Qwen3-8B"} {
		if _, full, err := only.Resolve(in); err != nil || full != want {
			t.Errorf("only provider: Resolve(%q) = %q, %v; want %q", in, full, err, want)
		}
	}
	// Two providers without a list: a bare name is ambiguous, and the error says what to write.
	two := newRouter(t, h, Config{Endpoints: []Endpoint{b.endpoint("openai"), a.endpoint("anthropic")}, Default: "openai/x"})
	if _, _, err := two.Resolve("llama3.2"); err == nil || !strings.Contains(err.Error(), "openai/llama3.2 or anthropic/llama3.2") {
		t.Errorf("a bare name with two open providers: %v", err)
	}
	for _, bad := range []Config{
		{},
		{Endpoints: []Endpoint{a.endpoint("x/y", "m")}, Default: "x/y/m"},
		{Endpoints: []Endpoint{a.endpoint("x", "m"), a.endpoint("x", "n")}, Default: "x/m"},
		{Endpoints: []Endpoint{a.endpoint("x", "m")}, Default: "x/n"},
		{Endpoints: []Endpoint{a.endpoint("x", "m")}, Default: "x/m", Fallbacks: map[string][]string{"x/m": {"y/z"}}},
		{Endpoints: []Endpoint{a.endpoint("x", "m")}, Default: "x/m", Prices: map[string]Price{"q/m": {}}},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

// A default model on a provider that lists no models is shown with its price.
func TestModelsShowTheDefaultModelsPrice(t *testing.T) {
	f := newFake(t)
	h := &harness{}
	price := Price{Input: 0.5, Output: 1.5}
	r := newRouter(t, h, Config{Endpoints: []Endpoint{f.endpoint("local")}, Default: "local/llama3.2",
		Prices: map[string]Price{"local/llama3.2": price}})
	models := r.Models()
	if len(models) != 2 || models[0].ID != "local/llama3.2" || !models[0].Default || models[0].Price == nil || *models[0].Price != price {
		t.Fatalf("models %+v", models)
	}
}

// A name resolves once: Resolve keeps the route it made (the configuration does not change), so
// a chat's resolutions of its model allocate nothing, and a name resolved again still gives the
// same answer. The routes kept are bounded: a provider without a model list takes any name.
func TestResolveKeepsItsRoutes(t *testing.T) {
	a := newFake(t)
	r := newRouter(t, &harness{}, Config{Endpoints: []Endpoint{a.endpoint("openai", "gpt-4o", "mini"), a.endpoint("ollama")},
		Default: "gpt-4o", Fallbacks: map[string][]string{"openai/gpt-4o": {"mini", "ollama/llama3.2"}}})
	for range 2 {
		for in, want := range map[string]string{"": "openai/gpt-4o", "gpt-4o": "openai/gpt-4o", "openai/mini": "openai/mini", "ollama/x": "ollama/x"} {
			if _, full, err := r.Resolve(in); err != nil || full != want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", in, full, err, want)
			}
		}
	}
	p1, _, _ := r.Resolve("")
	p2, _, _ := r.Resolve("")
	if p1 != p2 {
		t.Errorf("Resolve made a second route for the same name")
	}
	if got := p1.(*route).targets; len(got) != 3 || got[1].full != "openai/mini" || got[2].full != "ollama/llama3.2" || got[1].name != "mini" {
		t.Errorf("targets %+v; want the model and its two fallbacks", got)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = r.Resolve("gpt-4o") }); n != 0 {
		t.Errorf("Resolve of a known name: %v allocations; want 0", n)
	}
	for i := range maxRoutes + 100 {
		name := fmt.Sprintf("ollama/m%d", i)
		if _, full, err := r.Resolve(name); err != nil || full != name {
			t.Fatalf("Resolve(%q) = %q, %v", name, full, err)
		}
	}
	kept := 0
	r.routes.Range(func(any, any) bool { kept++; return true })
	if kept != maxRoutes || r.nroutes.Load() != maxRoutes {
		t.Errorf("%d routes kept (counted %d); want %d", kept, r.nroutes.Load(), maxRoutes)
	}
}
