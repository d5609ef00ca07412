// Package metrics owns Parley's Prometheus registry and its collectors. One Metrics is made in
// run and handed to the packages that report, each through a small interface or function field of
// its own, so that only this package imports the Prometheus client. Nothing is registered globally.
//
// Labels stay bounded: HTTP routes are the mux's patterns (never raw paths or ids), finish reasons
// and outcomes are fixed sets, and the provider, model, tool and server labels take at most
// MaxLabelValues distinct values each; later ones are counted as "other".
package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	parley "github.com/parleyhq/parley"
)

// MaxLabelValues bounds the distinct values of each open-ended label (model, provider, tool,
// server): a pass-through provider accepts any model name, and a model may call any tool name.
const MaxLabelValues = 100

// Other is the label value of everything past MaxLabelValues, and of an unmatched route.
const Other = "other"

// Metrics holds the registry and every collector. Its methods are safe for concurrent use; a nil
// *Metrics records nothing.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec

	runsStarted  prometheus.Counter
	runsFinished *prometheus.CounterVec
	runsActive   prometheus.Gauge

	modelCalls    *prometheus.CounterVec
	modelDuration *prometheus.HistogramVec
	modelTTFT     *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	cost          *prometheus.CounterVec

	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec

	streams *prometheus.GaugeVec

	subscribers *prometheus.CounterVec
	appends     *prometheus.HistogramVec
	publishes   *prometheus.HistogramVec
	relayLag    prometheus.Histogram

	models, providers, tools, servers bounded

	requests sync.Map                     // requestKey → *requestMetrics (Request)
	modelsBy sync.Map                     // the model as ModelCall is given it → *modelSeries
	finished sync.Map                     // finish reason → prometheus.Counter (RunFinished)
	kinds    sync.Map                     // stream kind → prometheus.Gauge (StreamOpen, StreamClose, StreamOpened)
	appended [2]lazy[prometheus.Observer] // StoreAppend's series: ok, error
}

// lazy holds one series of a vector once it has been looked up. The series is made at its
// first use, as WithLabelValues makes it, so the exposition shows the same series as when each
// call looked it up; later uses neither hash its labels nor take the vector's lock. Two first
// uses at once may both look it up: the vector gives both the same series.
type lazy[T any] struct{ p atomic.Pointer[T] }

func (l *lazy[T]) get(lookup func() T) T {
	if p := l.p.Load(); p != nil {
		return *p
	}
	v := lookup()
	l.p.Store(&v)
	return v
}

// modelSeries are the series of one model name given to ModelCall, each made at its first use.
type modelSeries struct {
	prov, name string
	calls      [2]lazy[prometheus.Counter] // ok, error
	duration   lazy[prometheus.Observer]
	ttft       lazy[prometheus.Observer]
	tokens     [len(tokenKinds)]lazy[prometheus.Counter]
	cost       lazy[prometheus.Counter]
}

// tokenKinds are the kind label's values of the token counter, in the order of modelSeries.tokens.
var tokenKinds = [...]string{"input", "output", "cached_input", "reasoning"}

func outcomeIndex(failed bool) int {
	if failed {
		return 1
	}
	return 0
}

// latencyBuckets suit calls from a few milliseconds to minutes (model calls and tools).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// New returns a Metrics with its own registry, holding Parley's collectors and the Go runtime's
// and process's.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_http_requests_total", Help: "HTTP requests answered, by route pattern, method and status code.",
	}, []string{"route", "method", "code", "class"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_http_request_duration_seconds", Help: "Time to answer an HTTP request (a stream: until it closed), by route pattern and method.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method"})
	m.runsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_runs_started_total", Help: "Runs started on this instance (recovered runs included).",
	})
	m.runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_runs_finished_total", Help: "Runs finished on this instance, by finish reason.",
	}, []string{"reason"})
	m.runsActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "parley_runs_active", Help: "Runs in progress on this instance.",
	})
	m.modelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_model_calls_total", Help: "Model calls, by provider, model and outcome (ok or error).",
	}, []string{"provider", "model", "outcome"})
	m.modelDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_model_call_duration_seconds", Help: "Duration of a model call, its whole stream included, by provider and model.",
		Buckets: latencyBuckets,
	}, []string{"provider", "model"})
	m.modelTTFT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_model_time_to_first_token_seconds", Help: "Time from the start of a model call to its first streamed output (text, reasoning or tool call), by provider and model.",
		Buckets: latencyBuckets,
	}, []string{"provider", "model"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_model_tokens_total", Help: "Tokens the providers reported, by provider, model and kind (input, output, cached_input, reasoning).",
	}, []string{"provider", "model", "kind"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_model_cost_dollars_total", Help: "Cost of the model calls in US dollars from the configured price table, by provider and model.",
	}, []string{"provider", "model"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_tool_calls_total", Help: "Tool calls, by tool, MCP server (empty for built-in tools) and outcome (ok, error, timeout, refused).",
	}, []string{"tool", "server", "outcome"})
	m.toolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_tool_call_duration_seconds", Help: "Duration of a tool call, by tool and MCP server.",
		Buckets: latencyBuckets,
	}, []string{"tool", "server"})
	m.streams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "parley_streams_open", Help: "Open event streams, by kind (sse or websocket).",
	}, []string{"kind"})
	m.subscribers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_slow_subscribers_total", Help: "Stream subscribers detached from their session's hub for falling a queue behind (event=detached), and detached ones that caught up and joined it again (event=caught_up).",
	}, []string{"event"})
	m.appends = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_store_append_duration_seconds", Help: "Time to store one batch of a run's events (one AppendEvents call, or the write of a run's end that carries its last events), by outcome (ok or error).",
		Buckets: prometheus.DefBuckets,
	}, []string{"outcome"})
	m.publishes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_relay_publish_duration_seconds", Help: "Time to publish one batch of a run's events to the other instances (Redis), by outcome (ok or error).",
		Buckets: prometheus.DefBuckets,
	}, []string{"outcome"})
	m.relayLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "parley_relay_lag_seconds", Help: "Time from an event's publication by the instance running its run to its reading from Redis by this instance (the instances' clocks must agree).",
		Buckets: prometheus.DefBuckets,
	})
	m.reg.MustRegister(m.relayLag, m.appends, m.publishes, m.subscribers, m.httpRequests, m.httpDuration, m.runsStarted, m.runsFinished, m.runsActive,
		m.modelCalls, m.modelDuration, m.modelTTFT, m.tokens, m.cost, m.toolCalls, m.toolDuration, m.streams,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, for tests and for collectors added by the caller.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format (or OpenMetrics when asked for).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Request records one answered HTTP request. route is the mux's pattern ("" when none matched);
// its method prefix is dropped, since method is its own label.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = Other
	} else if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	method = boundMethod(method)
	k := requestKey{route: route, method: method, status: status}
	rm, ok := m.requests.Load(k)
	if !ok {
		rm, _ = m.requests.LoadOrStore(k, &requestMetrics{
			count:    m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status), strconv.Itoa(status/100)+"xx"),
			duration: m.httpDuration.WithLabelValues(route, method),
		})
	}
	r := rm.(*requestMetrics)
	r.count.Inc()
	r.duration.Observe(d.Seconds())
}

// requestKey names a request's series: its route (a mux pattern's path, or Other), its method
// (boundMethod) and its status. Their number is bounded by the routes, the methods and the
// status codes the server writes; prometheus keeps every one of their series anyway.
type requestKey struct {
	route, method string
	status        int
}

// requestMetrics are a requestKey's series, looked up once: each request then neither formats
// its status code as labels nor hashes its four labels to find them.
type requestMetrics struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// boundMethod keeps the standard methods and counts any other as "other": a client may send any
// token as a method.
func boundMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return Other
}

// RunStarted records a run that started.
func (m *Metrics) RunStarted() {
	if m == nil {
		return
	}
	m.runsStarted.Inc()
	m.runsActive.Inc()
}

// RunFinished records a run that ended with finish reason (parley.Finish*).
func (m *Metrics) RunFinished(reason string) {
	if m == nil {
		return
	}
	if reason == "" {
		reason = "unknown"
	}
	c, ok := m.finished.Load(reason)
	if !ok {
		// The reasons are parley.Finish*, a fixed set: the map stays as small as the series.
		c, _ = m.finished.LoadOrStore(reason, m.runsFinished.WithLabelValues(reason))
	}
	c.(prometheus.Counter).Inc()
	m.runsActive.Dec()
}

// ModelCall records one model call of model ("provider/model", as the router names it): its
// duration, its time to first output (0: none came) and the usage it reported (nil: none).
func (m *Metrics) ModelCall(model string, failed bool, d, ttft time.Duration, u *parley.Usage) {
	if m == nil {
		return
	}
	ms := m.modelSeries(model)
	ms.calls[outcomeIndex(failed)].get(func() prometheus.Counter {
		return m.modelCalls.WithLabelValues(ms.prov, ms.name, outcome(failed))
	}).Inc()
	ms.duration.get(func() prometheus.Observer { return m.modelDuration.WithLabelValues(ms.prov, ms.name) }).Observe(d.Seconds())
	if ttft > 0 {
		ms.ttft.get(func() prometheus.Observer { return m.modelTTFT.WithLabelValues(ms.prov, ms.name) }).Observe(ttft.Seconds())
	}
	if u == nil {
		return
	}
	for i, n := range [len(tokenKinds)]int64{u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.ReasoningTokens} {
		if n > 0 {
			ms.tokens[i].get(func() prometheus.Counter {
				return m.tokens.WithLabelValues(ms.prov, ms.name, tokenKinds[i])
			}).Add(float64(n))
		}
	}
	if u.Cost > 0 {
		ms.cost.get(func() prometheus.Counter { return m.cost.WithLabelValues(ms.prov, ms.name) }).Add(u.Cost)
	}
}

// modelSeries returns the series of model ("provider/model"), its labels bounded as they were
// the first time it was given. Only a model whose provider and name both got labels of their
// own is kept: there are at most MaxLabelValues² of those, while the names counted as Other may
// be any number and are looked up each time.
func (m *Metrics) modelSeries(model string) *modelSeries {
	if ms, ok := m.modelsBy.Load(model); ok {
		return ms.(*modelSeries)
	}
	prov, name, ok := strings.Cut(model, "/")
	if !ok {
		prov, name = "", model
	}
	ms := &modelSeries{prov: m.providers.of(prov), name: m.models.of(name)}
	if ms.prov == prov && ms.name == name {
		if kept, loaded := m.modelsBy.LoadOrStore(model, ms); loaded {
			return kept.(*modelSeries)
		}
	}
	return ms
}

// ToolCall records one tool call: tool "" is a name the registry does not know (counted as
// "unknown", since the model may invent any), outcome one of ok, error, timeout or refused.
func (m *Metrics) ToolCall(tool, server, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	if tool == "" {
		tool = "unknown"
	}
	tool, server = m.tools.of(tool), m.servers.of(server)
	m.toolCalls.WithLabelValues(tool, server, outcome).Inc()
	m.toolDuration.WithLabelValues(tool, server).Observe(d.Seconds())
}

// StreamOpen records an open stream of kind ("sse" or "websocket") as StreamOpened does, without
// a callback to keep: the caller calls StreamClose once, at its end.
func (m *Metrics) StreamOpen(kind string) {
	if m != nil {
		m.stream(kind).Inc()
	}
}

// StreamClose records the end of a stream StreamOpen recorded.
func (m *Metrics) StreamClose(kind string) {
	if m != nil {
		m.stream(kind).Dec()
	}
}

// stream returns the open-streams gauge of kind. The kinds are the callers' constants ("sse",
// "websocket"): the map stays as small as the series.
func (m *Metrics) stream(kind string) prometheus.Gauge {
	g, ok := m.kinds.Load(kind)
	if !ok {
		g, _ = m.kinds.LoadOrStore(kind, m.streams.WithLabelValues(kind))
	}
	return g.(prometheus.Gauge)
}

// StreamOpened records an open stream of kind ("sse" or "websocket"); closed records its end and
// may be called more than once.
func (m *Metrics) StreamOpened(kind string) (closed func()) {
	if m == nil {
		return func() {}
	}
	g := m.stream(kind)
	g.Inc()
	var once sync.Once
	return func() { once.Do(g.Dec) }
}

// SubscriberDetached records a slow subscriber detached from its session's hub.
func (m *Metrics) SubscriberDetached() {
	if m != nil {
		m.subscribers.WithLabelValues("detached").Inc()
	}
}

// SubscriberCaughtUp records a detached subscriber that caught up and joined its hub again.
func (m *Metrics) SubscriberCaughtUp() {
	if m != nil {
		m.subscribers.WithLabelValues("caught_up").Inc()
	}
}

// StoreAppend records one batch of run events stored (or not: failed).
func (m *Metrics) StoreAppend(d time.Duration, failed bool) {
	if m != nil {
		m.appended[outcomeIndex(failed)].get(func() prometheus.Observer {
			return m.appends.WithLabelValues(outcome(failed))
		}).Observe(d.Seconds())
	}
}

// RelayPublish records one batch of run events published to the other instances.
func (m *Metrics) RelayPublish(d time.Duration, failed bool) {
	if m != nil {
		m.publishes.WithLabelValues(outcome(failed)).Observe(d.Seconds())
	}
}

// RelayLag records the time from an event's publication by another instance to its reading here.
func (m *Metrics) RelayLag(d time.Duration) {
	if m != nil {
		m.relayLag.Observe(d.Seconds())
	}
}

func outcome(failed bool) string {
	if failed {
		return "error"
	}
	return "ok"
}

// bounded admits at most MaxLabelValues distinct values of one label.
type bounded struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *bounded) of(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= MaxLabelValues {
		return Other
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	b.seen[v] = true
	return v
}
