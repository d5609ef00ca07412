package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	parley "github.com/parleyhq/parley"
)

func TestOpenEndedLabelsAreBounded(t *testing.T) {
	m := New()
	for i := range 3 * MaxLabelValues {
		m.ModelCall(fmt.Sprintf("ollama/model-%d", i), false, time.Millisecond, time.Millisecond, &parley.Usage{PromptTokens: 1})
		m.ToolCall(fmt.Sprintf("tool-%d", i), "", "ok", time.Millisecond)
		m.Request("", fmt.Sprintf("VERB%d", i), 404, time.Millisecond)
	}
	if n := testutil.CollectAndCount(m.modelCalls); n != MaxLabelValues+1 {
		t.Errorf("model call series = %d, want %d (the bound and %q)", n, MaxLabelValues+1, Other)
	}
	if n := testutil.CollectAndCount(m.toolCalls); n != MaxLabelValues+1 {
		t.Errorf("tool call series = %d, want %d", n, MaxLabelValues+1)
	}
	if n := testutil.CollectAndCount(m.httpRequests); n != 1 {
		t.Errorf("request series for invented methods = %d, want 1", n)
	}
	if got := testutil.ToFloat64(m.modelCalls.WithLabelValues("ollama", Other, "ok")); got != 2*MaxLabelValues {
		t.Errorf("calls counted as other = %v, want %d", got, 2*MaxLabelValues)
	}
}

func TestRecorders(t *testing.T) {
	m := New()
	m.RunStarted()
	m.RunStarted()
	m.RunFinished(parley.FinishStop)
	if got := testutil.ToFloat64(m.runsActive); got != 1 {
		t.Errorf("active runs = %v, want 1", got)
	}
	closed := m.StreamOpened("sse")
	closed()
	closed()
	if got := testutil.ToFloat64(m.streams.WithLabelValues("sse")); got != 0 {
		t.Errorf("open streams after a double close = %v, want 0", got)
	}
	m.StreamOpen("sse")
	m.StreamOpen("sse")
	if got := testutil.ToFloat64(m.streams.WithLabelValues("sse")); got != 2 {
		t.Errorf("open streams = %v, want 2", got)
	}
	m.StreamClose("sse")
	m.StreamClose("sse")
	if got := testutil.ToFloat64(m.streams.WithLabelValues("sse")); got != 0 {
		t.Errorf("open streams after their close = %v, want 0", got)
	}
	m.ModelCall("openai/gpt", false, time.Second, 0, &parley.Usage{PromptTokens: 3, CompletionTokens: 2, Cost: 0.5})
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("openai", "gpt", "input")); got != 3 {
		t.Errorf("input tokens = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.cost.WithLabelValues("openai", "gpt")); got != 0.5 {
		t.Errorf("cost = %v, want 0.5", got)
	}
	m.Request("GET /api/v1/sessions/{id}", "GET", 200, time.Millisecond)
	if got := testutil.ToFloat64(m.httpRequests.WithLabelValues("/api/v1/sessions/{id}", "GET", "200", "2xx")); got != 1 {
		t.Errorf("request counter = %v, want 1", got)
	}
	var nilM *Metrics // records nothing, never panics
	nilM.Request("", "GET", 200, 0)
	nilM.StreamOpened("sse")()
	nilM.StreamOpen("sse")
	nilM.StreamClose("sse")
	nilM.ModelCall("a/b", true, 0, 0, nil)
}

func TestBreakerStates(t *testing.T) {
	m := New()
	state := "closed"
	m.AddBreakers(func() []Breaker {
		return []Breaker{{"provider", "openai", state}, {"provider", "openai", state}, {"tool", "calculator", "closed"}}
	})
	want := func(open float64) string {
		return fmt.Sprintf(`
# HELP parley_breaker_state Circuit breakers of provider endpoints, tools and MCP servers: 1 for the breaker's current state (closed, open, half_open), 0 for the others.
# TYPE parley_breaker_state gauge
parley_breaker_state{kind="provider",name="openai",state="closed"} %v
parley_breaker_state{kind="provider",name="openai",state="half_open"} 0
parley_breaker_state{kind="provider",name="openai",state="open"} %v
parley_breaker_state{kind="tool",name="calculator",state="closed"} 1
parley_breaker_state{kind="tool",name="calculator",state="half_open"} 0
parley_breaker_state{kind="tool",name="calculator",state="open"} 0
`, 1-open, open)
	}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want(0)), "parley_breaker_state"); err != nil {
		t.Error(err)
	}
	state = "open" // read at each scrape
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want(1)), "parley_breaker_state"); err != nil {
		t.Error(err)
	}
}

func TestRelayLag(t *testing.T) {
	m := New()
	m.RelayLag(20 * time.Millisecond)
	m.RelayLag(3 * time.Second)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range fams {
		if f.GetName() != "parley_relay_lag_seconds" {
			continue
		}
		found = true
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 2 || h.GetSampleSum() < 3.019 || h.GetSampleSum() > 3.021 {
			t.Errorf("relay lag: %d samples summing to %v, want 2 summing to 3.02", h.GetSampleCount(), h.GetSampleSum())
		}
	}
	if !found {
		t.Error("no parley_relay_lag_seconds")
	}
	var nilM *Metrics
	nilM.RelayLag(time.Second) // a nil Metrics records nothing
}

// Request finds a request's series once: each request after the first of its route, method and
// status counts and times it without allocating, in the series of its own labels.
func TestRequestSeriesAreFoundOnce(t *testing.T) {
	m := New()
	for range 3 {
		m.Request("POST /api/v1/chat/stream", "POST", 200, time.Millisecond)
	}
	m.Request("POST /api/v1/chat/stream", "POST", 429, time.Millisecond)
	m.Request("", "BREW", 404, time.Millisecond)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"/api/v1/chat/stream", "POST", "200", "2xx"}, 3},
		{[]string{"/api/v1/chat/stream", "POST", "429", "4xx"}, 1},
		{[]string{Other, Other, "404", "4xx"}, 1},
	} {
		if got := testutil.ToFloat64(m.httpRequests.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("requests%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.httpRequests); n != 3 {
		t.Errorf("%d request series, want 3", n)
	}
	if n := testutil.CollectAndCount(m.httpDuration); n != 2 {
		t.Errorf("%d duration series, want 2", n)
	}
	allocs := testing.AllocsPerRun(100, func() { m.Request("POST /api/v1/chat/stream", "POST", 200, time.Millisecond) })
	if allocs != 0 {
		t.Errorf("Request allocates %v times, want 0", allocs)
	}
	if got := testutil.ToFloat64(m.httpRequests.WithLabelValues("/api/v1/chat/stream", "POST", "200", "2xx")); got != 104 {
		t.Errorf("requests = %v, want 104", got)
	}
}

// The series of a chat's model call, its run's end, its stream and its store writes are looked
// up once: later calls allocate nothing, and the exposition holds the series each call made.
func TestChatSeriesAreFoundOnce(t *testing.T) {
	m := New()
	u := &parley.Usage{PromptTokens: 3, CompletionTokens: 2}
	chat := func() {
		m.ModelCall("openai/gpt", false, time.Millisecond, time.Millisecond, u)
		m.RunFinished(parley.FinishStop)
		m.StreamOpen("sse")
		m.StreamClose("sse")
		m.StoreAppend(time.Millisecond, false)
	}
	chat()
	if allocs := testing.AllocsPerRun(100, chat); allocs != 0 {
		t.Errorf("a chat's metrics allocate %v times, want 0", allocs)
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"calls", testutil.ToFloat64(m.modelCalls.WithLabelValues("openai", "gpt", "ok")), 102},
		{"input tokens", testutil.ToFloat64(m.tokens.WithLabelValues("openai", "gpt", "input")), 306},
		{"output tokens", testutil.ToFloat64(m.tokens.WithLabelValues("openai", "gpt", "output")), 204},
		{"runs finished", testutil.ToFloat64(m.runsFinished.WithLabelValues(parley.FinishStop)), 102},
		{"open streams", testutil.ToFloat64(m.streams.WithLabelValues("sse")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// A series is made at its first use, as before: no cost, no cached tokens, no failed call,
	// no failed append.
	for _, c := range []struct {
		name string
		n    int
		want int
	}{
		{"model call", testutil.CollectAndCount(m.modelCalls), 1},
		{"token", testutil.CollectAndCount(m.tokens), 2},
		{"cost", testutil.CollectAndCount(m.cost), 0},
		{"append", testutil.CollectAndCount(m.appends), 1},
	} {
		if c.n != c.want {
			t.Errorf("%d %s series, want %d", c.n, c.name, c.want)
		}
	}
	m.ModelCall("openai/gpt", true, time.Millisecond, 0, &parley.Usage{CachedTokens: 1, Cost: 0.25})
	m.StoreAppend(time.Millisecond, true)
	if got := testutil.ToFloat64(m.modelCalls.WithLabelValues("openai", "gpt", "error")); got != 1 {
		t.Errorf("failed calls = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.cost.WithLabelValues("openai", "gpt")); got != 0.25 {
		t.Errorf("cost = %v, want 0.25", got)
	}
	if n := testutil.CollectAndCount(m.appends); n != 2 {
		t.Errorf("%d append series after a failure, want 2", n)
	}
}

// BenchmarkChatMetrics is what a chat records: its model call (with usage), its run's end, its
// SSE stream and a store write.
func BenchmarkChatMetrics(b *testing.B) {
	m := New()
	u := &parley.Usage{PromptTokens: 3, CompletionTokens: 2}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ModelCall("openai/gpt", false, time.Millisecond, time.Millisecond, u)
			m.RunFinished(parley.FinishStop)
			m.StreamOpen("sse")
			m.StreamClose("sse")
			m.StoreAppend(time.Millisecond, false)
		}
	})
}
