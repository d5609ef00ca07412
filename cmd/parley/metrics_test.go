package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads url's /metrics (with key, if any) in the Prometheus text format.
func scrape(t *testing.T, url, key string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, url+"/metrics", key)
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// sample sums the series of family name whose labels include want: a counter's or gauge's value,
// a histogram's count.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// scrapeUntil scrapes until ok holds of the metrics (a request is counted once its handler has
// returned, which may be just after its client read the answer), or fails after 30s.
func scrapeUntil(t *testing.T, url, key, what string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams := scrape(t, url, key)
		if ok(fams) {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the metrics still do not show %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsMoveWithAChatAndAToolCall runs a real server with the mock model, has a chat in which
// the model calls the calculator, and finds each series of the chat moved in /metrics.
func TestMetricsMoveWithAChatAndAToolCall(t *testing.T) {
	// Loopback, --auth off: the local user is an admin. No rate limit: the test scrapes often.
	url := startInProcess(t, nil, "--rate-limit", "off")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := postStream(t, ctx, url, map[string]any{"message": "What is 12*(3+4)?"})
	var session, finish string
	var toolResults int
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		if ev.Data.SessionID != "" {
			session = ev.Data.SessionID
		}
		if ev.Event == "tool_result" {
			toolResults++
		}
		if ev.Event == "done" {
			finish = ev.Data.FinishReason
			return false
		}
		return true
	})
	resp.Body.Close()
	if finish != "stop" || toolResults != 1 || session == "" {
		t.Fatalf("the chat ended with %q after %d tool results (session %q), want stop after 1", finish, toolResults, session)
	}

	chatStream := map[string]string{"route": "/api/v1/chat/stream", "method": "POST", "code": "200", "class": "2xx"}
	fams := scrapeUntil(t, url, "", "the chat request", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "parley_http_requests_total", chatStream) == 1
	})
	mock := map[string]string{"provider": "mock", "model": "mock"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"parley_http_request_duration_seconds", map[string]string{"route": "/api/v1/chat/stream", "method": "POST"}, 1},
		{"parley_runs_started_total", nil, 1},
		{"parley_runs_finished_total", map[string]string{"reason": "stop"}, 1},
		{"parley_model_calls_total", map[string]string{"provider": "mock", "model": "mock", "outcome": "ok"}, 2}, // the tool call, then the answer
		{"parley_model_call_duration_seconds", mock, 2},
		{"parley_model_time_to_first_token_seconds", mock, 2},
		{"parley_model_tokens_total", map[string]string{"provider": "mock", "model": "mock", "kind": "input"}, 1},
		{"parley_model_tokens_total", map[string]string{"provider": "mock", "model": "mock", "kind": "output"}, 1},
		{"parley_tool_calls_total", map[string]string{"tool": "calculator", "server": "", "outcome": "ok"}, 1},
		{"parley_tool_call_duration_seconds", map[string]string{"tool": "calculator", "server": ""}, 1},
		{"parley_store_append_duration_seconds", map[string]string{"outcome": "ok"}, 1},
	} {
		if got := sample(fams, c.name, c.labels); got < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, got, c.min)
		}
	}
	for _, b := range []map[string]string{
		{"kind": "provider", "name": "mock", "state": "closed"},
		{"kind": "tool", "name": "calculator", "state": "closed"},
	} {
		if got := sample(fams, "parley_breaker_state", b); got != 1 {
			t.Errorf("parley_breaker_state%v = %v, want 1", b, got)
		}
	}
	if got := sample(fams, "parley_runs_active", nil); got != 0 {
		t.Errorf("parley_runs_active = %v after the run, want 0", got)
	}

	// Open streams: one SSE stream and one WebSocket are counted while open, and no longer once
	// closed.
	sctx, closeSSE := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(sctx, "GET", url+"/api/v1/sessions/"+session+"/stream?after=0", nil)
	sse, err := http.DefaultClient.Do(req)
	if err != nil || sse.StatusCode != 200 {
		t.Fatalf("open stream: %v %v", sse, err)
	}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/api/ws", &websocket.DialOptions{Subprotocols: []string{"parley.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	scrapeUntil(t, url, "", "one open SSE stream and one WebSocket", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "parley_streams_open", map[string]string{"kind": "sse"}) == 1 &&
			sample(f, "parley_streams_open", map[string]string{"kind": "websocket"}) == 1
	})
	closeSSE()
	sse.Body.Close()
	ws.Close(websocket.StatusNormalClosure, "")
	scrapeUntil(t, url, "", "the streams closed", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "parley_streams_open", nil) == 0
	})
}

// seriesOf counts Parley's series (one per label set; a histogram's buckets are one series here).
func seriesOf(fams map[string]*dto.MetricFamily) int {
	n := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "parley_") {
			n += len(f.GetMetric())
		}
	}
	return n
}

// TestMetricsLabelsStayBounded sends 1,000 requests to different session ids (and other paths
// with ids in them) and finds no series added: routes are counted by pattern, never by path.
func TestMetricsLabelsStayBounded(t *testing.T) {
	url := startInProcess(t, nil, "--rate-limit", "off")
	paths := []func(i int) (string, string){
		func(i int) (string, string) { return "GET", fmt.Sprintf("/api/v1/sessions/sess-%d", i) },
		func(i int) (string, string) { return "GET", fmt.Sprintf("/api/v1/sessions/sess-%d/messages", i) },
		func(i int) (string, string) { return "DELETE", fmt.Sprintf("/api/v1/sessions/sess-%d", i) },
		func(i int) (string, string) { return "GET", fmt.Sprintf("/api/v1/no-such-route/sess-%d", i) },
		func(i int) (string, string) { return "GET", fmt.Sprintf("/sess-%d", i) },
	}
	do := func(i int) {
		method, path := paths[i%len(paths)](i)
		req, _ := http.NewRequest(method, url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	total := func(f map[string]*dto.MetricFamily) float64 { return sample(f, "parley_http_requests_total", nil) }
	// One request of each kind first (and a scrape, which is counted too), so that every series
	// the requests can add exists.
	scrape(t, url, "")
	for i := range paths {
		do(1_000_000 + i)
	}
	before := scrapeUntil(t, url, "", "the first requests", func(f map[string]*dto.MetricFamily) bool { return total(f) >= float64(len(paths)) })
	for i := range 1000 {
		do(i)
	}
	want := total(before) + 1000
	after := scrapeUntil(t, url, "", "1,000 more requests", func(f map[string]*dto.MetricFamily) bool { return total(f) >= want })
	if b, a := seriesOf(before), seriesOf(after); a != b {
		t.Errorf("1,000 requests to different ids took Parley's series from %d to %d", b, a)
	}
	_, body := get(t, url+"/metrics", "")
	if m := regexp.MustCompile(`(?m)^.*sess-\d+.*$`).FindString(body); m != "" {
		t.Errorf("an id is in a label: %s", m)
	}
}

// TestMetricsAccess: on the API's listener /metrics is for admin keys only; with --metrics-addr
// it is served there to anyone who reaches it, and no longer on the API's listener.
func TestMetricsAccess(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	secret := func(args ...string) string {
		out, err := keysCmd(t, append([]string{"create", "--db", db}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	admin, user := secret("--user", "ops", "--admin"), secret("--user", "alice")

	url := startInProcess(t, nil, "--db", db, "--auth", "keys")
	if code, body := get(t, url+"/metrics", ""); code != 401 {
		t.Errorf("/metrics without a key: %d %.200s", code, body)
	}
	if code, body := get(t, url+"/metrics", user); code != 403 {
		t.Errorf("/metrics with a user's key: %d %.200s", code, body)
	}
	if fams := scrape(t, url, admin); fams["parley_http_requests_total"] == nil {
		t.Errorf("/metrics with an admin key lacks parley_http_requests_total")
	}
	url, logs := startInProcessLogs(t, nil, "--db", db, "--auth", "keys", "--metrics-addr", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="metrics listening" addr=([0-9.]+:[0-9]+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics listening line in the log:\n%s", logs.String())
	}
	if code, body := get(t, url+"/api/v1/me", admin); code != 200 {
		t.Fatalf("/api/v1/me: %d %s", code, body)
	}
	fams := scrape(t, "http://"+m[1], "") // no key
	if got := sample(fams, "parley_http_requests_total", map[string]string{"route": "/api/v1/me", "code": "200"}); got != 1 {
		t.Errorf("the metrics listener counts %v requests to /api/v1/me, want 1", got)
	}
	if code, _ := get(t, "http://"+m[1]+"/api/v1/me", admin); code != 404 {
		t.Errorf("the metrics listener serves the API: /api/v1/me answered %d", code)
	}
	if code, body := get(t, url+"/metrics", admin); code != 404 {
		t.Errorf("/metrics on the API's listener with --metrics-addr: %d %.200s, want 404", code, body)
	}
}

// TestPprofListener: --pprof-addr serves Go's profiles on a listener of its own, with the mutex
// and block profiles on while it runs; the API's listener serves none of them.
func TestPprofListener(t *testing.T) {
	url, logs := startInProcessLogs(t, nil, "--pprof-addr", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="pprof listening" addr=([0-9.]+:[0-9]+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no pprof listening line in the log:\n%s", logs.String())
	}
	for p, want := range map[string]string{"/debug/pprof/": "Types of profiles available", "/debug/pprof/heap?debug=1": "heap profile",
		"/debug/pprof/mutex?debug=1": "sampling period=100", "/debug/pprof/goroutine?debug=1": "goroutine profile"} {
		if code, body := get(t, "http://"+m[1]+p, ""); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s on the pprof listener: %d %.200s", p, code, body)
		}
	}
	if rate := runtime.SetMutexProfileFraction(-1); rate != 100 {
		t.Errorf("mutex profile fraction %d while the pprof listener runs, want 100", rate)
	}
	// (The API's listener answers unknown paths with the web UI's page.)
	if code, body := get(t, url+"/debug/pprof/goroutine?debug=1", ""); strings.Contains(body, "goroutine profile") {
		t.Errorf("the API's listener serves /debug/pprof/: %d", code)
	}
	if code, _ := get(t, "http://"+m[1]+"/api/v1/me", ""); code != 404 {
		t.Errorf("the pprof listener serves the API: /api/v1/me answered %d", code)
	}
}
