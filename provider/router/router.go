// Package router puts the configured providers behind one parley.Provider per model, addressed
// as "provider/model". Each call is retried with exponential backoff and jitter on 429, 5xx and
// connection errors (honouring Retry-After) until the first event of the answer arrives, never
// after; each provider endpoint has a circuit breaker, which counts a call and its retries once
// and opens only on an endpoint that looks down (5xx, connection errors, timeouts), never on a
// 429; a model may name fallback models that
// answer while its endpoint's breaker is open or its retries ran out; the price table turns each
// call's usage into a cost. It knows no wire format: cmd/parley gives it the adapters.
package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/breaker"
	"github.com/parleyhq/parley/llmctx"
)

// Endpoint is one configured provider.
type Endpoint struct {
	Name     string // the prefix of its model names: "openai", "anthropic", "glm", …
	Kind     string // the wire format, for listings: "openai", "anthropic", "gemini", "ollama", "mock"
	Provider parley.Provider
	// Models are the models it offers. With none, any model name is passed through.
	Models []string
	// ToolResultsAsText sends tool results as user messages in seed 003's XML envelope, for
	// models without a native tool role.
	ToolResultsAsText bool
}

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	Input       float64 `json:"input" yaml:"input"`               // prompt tokens not read from the cache
	CachedInput float64 `json:"cached_input" yaml:"cached_input"` // prompt tokens read from the cache
	Output      float64 `json:"output" yaml:"output"`             // completion tokens, reasoning included
}

// Cost returns the price of u.
func (p Price) Cost(u parley.Usage) float64 {
	fresh := max(u.PromptTokens-u.CachedTokens, 0)
	return (float64(fresh)*p.Input + float64(u.CachedTokens)*p.CachedInput + float64(u.CompletionTokens)*p.Output) / 1e6
}

// Retry is the retry policy of one call.
type Retry struct {
	Attempts int           // tries per model, the first included (default 3; 1 turns retries off)
	Base     time.Duration // the first backoff (default 500 ms); each next one doubles
	Max      time.Duration // the longest backoff (default 10 s)
	// MaxWait is the longest Retry-After honoured (default 60 s); a provider asking for more
	// is not retried (a fallback answers, if there is one).
	MaxWait time.Duration
}

// Config configures a Router.
type Config struct {
	Endpoints []Endpoint
	// Default is the model used when a request names none ("provider/model").
	Default string
	// Fallbacks maps a model to the models that answer, in order, while its endpoint's breaker is
	// open or its retries ran out.
	Fallbacks map[string][]string
	// Prices maps a model to its price; a model without one costs nothing.
	Prices map[string]Price
	Retry  Retry
	// BreakerFailures and BreakerCooldown configure every endpoint's breaker (defaults 3, 30 s).
	BreakerFailures int
	BreakerCooldown time.Duration

	Log *slog.Logger
	// Now, Sleep and Jitter are for tests: the clock, a wait that ends early when ctx does, and a
	// random number in [0, 1).
	Now    func() time.Time
	Sleep  func(ctx context.Context, d time.Duration) error
	Jitter func() float64
}

// Router resolves model names to providers. It is safe for concurrent use.
type Router struct {
	cfg       Config
	endpoints map[string]*endpoint
	order     []string // endpoint names in configuration order

	// routes holds the routes Resolve made, by the name it was given ("" included): the
	// configuration does not change, so a name always resolves to the same route. At most
	// maxRoutes are kept (a provider that takes any model name takes names without end).
	routes  sync.Map // string → *route
	nroutes atomic.Int32
}

// maxRoutes bounds the routes a Router keeps.
const maxRoutes = 1024

type endpoint struct {
	Endpoint
	breaker *breaker.Breaker
}

// New checks cfg and returns a Router.
func New(cfg Config) (*Router, error) {
	if cfg.Retry.Attempts == 0 {
		cfg.Retry.Attempts = 3
	}
	if cfg.Retry.Base <= 0 {
		cfg.Retry.Base = 500 * time.Millisecond
	}
	if cfg.Retry.Max <= 0 {
		cfg.Retry.Max = 10 * time.Second
	}
	if cfg.Retry.MaxWait <= 0 {
		cfg.Retry.MaxWait = 60 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	if cfg.Retry.Attempts < 1 {
		return nil, errors.New("retry attempts must be at least 1")
	}
	r := &Router{cfg: cfg, endpoints: map[string]*endpoint{}}
	for _, e := range cfg.Endpoints {
		switch {
		case e.Name == "" || strings.Contains(e.Name, "/"):
			return nil, fmt.Errorf("provider name %q: must be non-empty and without '/'", e.Name)
		case e.Provider == nil:
			return nil, fmt.Errorf("provider %q: no adapter", e.Name)
		case r.endpoints[e.Name] != nil:
			return nil, fmt.Errorf("provider %q: configured twice", e.Name)
		}
		r.endpoints[e.Name] = &endpoint{Endpoint: e, breaker: breaker.New(cfg.BreakerFailures, cfg.BreakerCooldown, cfg.Now)}
		r.order = append(r.order, e.Name)
	}
	if len(r.order) == 0 {
		return nil, errors.New("no provider configured")
	}
	if _, _, err := r.lookup(cfg.Default); err != nil {
		return nil, fmt.Errorf("default model: %v", parley.MessageOf(err))
	}
	for from, tos := range cfg.Fallbacks {
		if _, _, err := r.lookup(from); err != nil {
			return nil, fmt.Errorf("fallbacks of %q: %v", from, parley.MessageOf(err))
		}
		for _, to := range tos {
			if _, _, err := r.lookup(to); err != nil {
				return nil, fmt.Errorf("fallback %q of %q: %v", to, from, parley.MessageOf(err))
			}
		}
	}
	for m := range cfg.Prices {
		if _, _, err := r.lookup(m); err != nil {
			return nil, fmt.Errorf("price of %q: %v", m, parley.MessageOf(err))
		}
	}
	return r, nil
}

// lookup finds the endpoint of a model name: "provider/model", or a bare model name that exactly
// one provider lists. It returns the endpoint and the model as the provider knows it.
func (r *Router) lookup(name string) (*endpoint, string, error) {
	if name == "" {
		return nil, "", parley.Errorf(parley.ECInvalid, "model: no model named")
	}
	if prefix, model, ok := strings.Cut(name, "/"); ok {
		if e := r.endpoints[prefix]; e != nil {
			if model == "" || model == "*" {
				return nil, "", parley.Errorf(parley.ECInvalid, "model: %q names no model of provider %q", name, prefix)
			}
			if len(e.Models) > 0 && !slices.Contains(e.Models, model) {
				return nil, "", parley.Errorf(parley.ECInvalid, "model: provider %q does not offer %q (it offers %s)", prefix, model, strings.Join(e.Models, ", "))
			}
			return e, model, nil
		}
	}
	var found []*endpoint
	for _, n := range r.order {
		if e := r.endpoints[n]; slices.Contains(e.Models, name) {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 1:
		return found[0], name, nil
	case 0:
		// The only provider, taking any model name (Ollama's /v1 configured by
		// PARLEY_OPENAI_BASE_URL, say): a bare name is its model.
		if len(r.order) == 1 {
			if e := r.endpoints[r.order[0]]; len(e.Models) == 0 {
				return e, name, nil
			}
		}
		var any []string
		for _, n := range r.order {
			if len(r.endpoints[n].Models) == 0 {
				any = append(any, n+"/"+name)
			}
		}
		if len(any) > 0 {
			return nil, "", parley.Errorf(parley.ECInvalid, "model: unknown model %q: no provider lists it; name it as provider/model (%s; GET /api/v1/models lists them)", name, strings.Join(any, " or "))
		}
		return nil, "", parley.Errorf(parley.ECInvalid, "model: unknown model %q (name it as provider/model; GET /api/v1/models lists them)", name)
	}
	return nil, "", parley.Errorf(parley.ECInvalid, "model: %q is offered by several providers; name it as provider/model", name)
}

// Resolve maps a requested model ("" for the default) to a provider for it and its full name,
// "provider/model". The provider retries, breaks and falls back as configured; its streams
// report the model that answered (parley.ModelReporter) and put the cost into usage.
func (r *Router) Resolve(name string) (parley.Provider, string, error) {
	if rt, ok := r.routes.Load(name); ok {
		return rt.(*route), rt.(*route).full, nil
	}
	asked := name
	if name == "" {
		name = r.cfg.Default
	}
	e, model, err := r.lookup(name)
	if err != nil {
		return nil, "", err
	}
	full := e.Name + "/" + model
	rt := &route{r: r, full: full, targets: []target{{e: e, model: model, full: full, name: name}}}
	for _, to := range r.cfg.Fallbacks[full] {
		t := target{name: to}
		if t.e, t.model, t.err = r.lookup(to); t.err == nil {
			t.full = t.e.Name + "/" + t.model
		}
		rt.targets = append(rt.targets, t)
	}
	if r.nroutes.Add(1) <= maxRoutes {
		if old, loaded := r.routes.LoadOrStore(asked, rt); loaded {
			r.nroutes.Add(-1)
			rt = old.(*route)
		}
	} else {
		r.nroutes.Add(-1)
	}
	return rt, full, nil
}

// Default returns the default model, "provider/model".
func (r *Router) Default() string {
	e, model, _ := r.lookup(r.cfg.Default)
	return e.Name + "/" + model
}

// ModelInfo describes a configured model.
type ModelInfo struct {
	ID        string   `json:"id"`       // "provider/model"
	Provider  string   `json:"provider"` // the provider's name
	Kind      string   `json:"kind"`     // its wire format
	Default   bool     `json:"default,omitempty"`
	Breaker   string   `json:"breaker"` // the provider endpoint's breaker: closed, open or half_open
	Fallbacks []string `json:"fallbacks,omitempty"`
	Price     *Price   `json:"price,omitempty"`
}

// Models lists the configured models, the default first. A provider that lists no models is
// shown with its name and "*".
func (r *Router) Models() []ModelInfo {
	def := r.Default()
	var out []ModelInfo
	for _, n := range r.order {
		e := r.endpoints[n]
		models := e.Models
		if len(models) == 0 {
			models = []string{"*"}
		}
		for _, m := range models {
			id := n + "/" + m
			mi := ModelInfo{ID: id, Provider: n, Kind: e.Kind, Default: id == def, Breaker: string(e.breaker.State()), Fallbacks: r.cfg.Fallbacks[id]}
			if p, ok := r.cfg.Prices[id]; ok {
				mi.Price = &p
			}
			out = append(out, mi)
		}
	}
	if !slices.ContainsFunc(out, func(m ModelInfo) bool { return m.Default }) {
		e, _, _ := r.lookup(def)
		mi := ModelInfo{ID: def, Provider: e.Name, Kind: e.Kind, Default: true, Breaker: string(e.breaker.State()), Fallbacks: r.cfg.Fallbacks[def]}
		if p, ok := r.cfg.Prices[def]; ok {
			mi.Price = &p
		}
		out = append(out, mi)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Default && !out[j].Default })
	return out
}

// route is the provider of one model.
type route struct {
	r       *Router
	full    string
	targets []target // the model, then its fallbacks
}

// target is one model a route may call: its name as configured, its endpoint, the model as the
// endpoint knows it and its full name, or the error looking it up gave.
type target struct {
	name  string
	e     *endpoint
	model string
	full  string // "provider/model"
	err   error
}

// Stream tries the model and then its fallbacks, each with retries, until one gives the first
// event of an answer.
func (rt *route) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	var last error
	for i, t := range rt.targets {
		if t.err != nil {
			return nil, t.err
		}
		s, err := rt.r.attempt(ctx, t.e, t.model, t.full, req)
		if err == nil {
			if i > 0 {
				rt.r.cfg.Log.WarnContext(ctx, "model call fell back", "model", rt.full, "answered_by", t.name, "error", last)
			}
			return s, nil
		}
		last = err
		if ctx.Err() != nil || !fallsBack(err) {
			return nil, err
		}
	}
	return nil, last
}

// fallsBack reports whether another model should be tried after err: the endpoint is unwell,
// not the request.
func fallsBack(err error) bool {
	switch parley.CodeOf(err) {
	case parley.ECUnavailable, parley.ECUpstream, parley.ECRateLimited:
		return true
	}
	return false
}

// attempt calls one model with retries. It returns a stream whose first event has arrived.
// The retries of one call are one call to the endpoint's breaker: it is asked once, and told
// once how the call ended (by the stream, when one opens).
func (r *Router) attempt(ctx context.Context, e *endpoint, model, full string, req *parley.ChatRequest) (parley.Stream, error) {
	call := *req
	call.Model = model
	if e.ToolResultsAsText {
		call.Messages = llmctx.ToolResultsAsText(req.Messages)
	}
	done, wait, ok := e.breaker.Allow()
	if !ok {
		secs := int(wait.Round(time.Second) / time.Second)
		return nil, &parley.Error{Code: parley.ECUnavailable, RetryAfter: wait,
			Err:     &parley.StatusError{StatusCode: 503, RetryAfter: wait},
			Message: fmt.Sprintf("provider %q is unavailable: it failed repeatedly and is not called for now (circuit open; retry in %ds)", e.Name, max(secs, 1))}
	}
	for try := 1; ; try++ {
		s, err := r.open(ctx, e, &call, full, done)
		if err == nil {
			return s, nil
		}
		if ctx.Err() != nil || !retryable(err) || try >= r.cfg.Retry.Attempts {
			done(outcome(ctx, err))
			return nil, r.named(e, err, try)
		}
		delay := r.backoff(try)
		var se *parley.StatusError
		if errors.As(err, &se) && se.RetryAfter > 0 {
			if se.RetryAfter > r.cfg.Retry.MaxWait {
				done(outcome(ctx, err))
				return nil, r.named(e, err, try)
			}
			delay = max(delay, se.RetryAfter)
		}
		r.cfg.Log.InfoContext(ctx, "retrying model call", "model", full, "attempt", try+1, "after", delay, "error", err)
		if err := r.cfg.Sleep(ctx, delay); err != nil {
			done(breaker.Ignore)
			return nil, parley.WrapError(parley.ECCanceled, err, "the run was cancelled")
		}
	}
}

// named returns the error a caller gets for a call that failed after tries tries. A provider that
// asked to slow down (HTTP 429) is named as the cause, with the wait it asked for, or else the
// wait the next retry would have had, as RetryAfter; other errors are returned as they are.
func (r *Router) named(e *endpoint, err error, tries int) error {
	var se *parley.StatusError
	if parley.CodeOf(err) != parley.ECRateLimited || !errors.As(err, &se) {
		return err
	}
	wait := se.RetryAfter
	if wait <= 0 {
		wait = r.backoff(tries)
	}
	secs := int((wait + time.Second - 1) / time.Second)
	return &parley.Error{Code: parley.ECRateLimited, Err: err, RetryAfter: wait,
		Message: fmt.Sprintf("provider %q is rate limiting requests (HTTP 429); retry in %ds", e.Name, max(secs, 1))}
}

// open starts one try of a call and waits for its first event. A try that fails before its first
// event tells the breaker nothing (attempt reports the call once); an opened stream reports the
// call's outcome at its end.
func (r *Router) open(ctx context.Context, e *endpoint, req *parley.ChatRequest, full string, done func(breaker.Outcome)) (parley.Stream, error) {
	s, err := e.Provider.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	first, err := s.Next()
	if err != nil && err != io.EOF {
		s.Close()
		return nil, err
	}
	price, priced := r.cfg.Prices[full]
	return &stream{Stream: s, model: full, first: &first, firstErr: err, done: done, ctx: ctx, price: price, priced: priced}, nil
}

// retryable reports whether a failed call may be tried again: 408, 409, 429 and 5xx answers, and
// provider failures without a status (a refused or broken connection, a stream cut before its
// first event).
func retryable(err error) bool {
	var se *parley.StatusError
	if errors.As(err, &se) {
		return se.StatusCode == 408 || se.StatusCode == 409 || se.StatusCode == 429 || se.StatusCode >= 500
	}
	return parley.CodeOf(err) == parley.ECUpstream
}

// outcome is what a call's error says of the endpoint's health. Only an endpoint that looks down
// counts against it: a 5xx or 408 answer, a connection that failed or broke, a call that ran out
// of time. A 429 is an endpoint asking to slow down, and a refused request (400, 401, …) or a call
// its caller cancelled says nothing of the endpoint: neither counts.
func outcome(ctx context.Context, err error) breaker.Outcome {
	switch {
	case err == nil || err == io.EOF:
		return breaker.Success
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return breaker.Failure // the provider did not answer in time
	case ctx.Err() != nil:
		return breaker.Ignore
	}
	var se *parley.StatusError
	if errors.As(err, &se) {
		if se.StatusCode == 408 || se.StatusCode >= 500 {
			return breaker.Failure
		}
		return breaker.Ignore
	}
	switch parley.CodeOf(err) {
	case parley.ECUpstream, parley.ECTimeout:
		return breaker.Failure
	}
	return breaker.Ignore
}

// backoff is the wait before try+1: Base doubled per try, at most Max, with half of it random.
func (r *Router) backoff(try int) time.Duration {
	return breaker.Backoff(r.cfg.Retry.Base, r.cfg.Retry.Max, try, r.cfg.Jitter())
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stream hands out the first event it was opened with, then the rest; it puts the cost into
// usage and tells the breaker how the call ended.
type stream struct {
	parley.Stream
	ctx      context.Context
	model    string
	first    *parley.StreamEvent
	firstErr error
	price    Price
	priced   bool

	mu   sync.Mutex
	done func(breaker.Outcome)
}

var _ parley.ModelReporter = (*stream)(nil)

// Model is the model that answered, "provider/model".
func (s *stream) Model() string { return s.model }

// Next stays under the model's read for a whole streamed answer, so it keeps only the read in
// its frame; the rest is taken's work (issue 25: memory per active stream).
func (s *stream) Next() (ev parley.StreamEvent, err error) {
	if s.first != nil {
		ev, err = *s.first, s.firstErr
		s.first = nil
	} else {
		ev, err = s.Stream.Next()
	}
	if err != nil || ev.Type == parley.StreamUsage {
		s.taken(&ev, err)
	}
	return ev, err
}

// taken is Next's work on the event ev and err read: the call's outcome reported at an error,
// a usage event priced.
//
//go:noinline
func (s *stream) taken(ev *parley.StreamEvent, err error) {
	if err != nil {
		s.report(outcome(s.ctx, err))
		return
	}
	if ev.Usage != nil && s.priced {
		u := *ev.Usage
		u.Cost = s.price.Cost(u)
		ev.Usage = &u
	}
}

// Close ends the call; a stream closed before its end says nothing of the endpoint's health.
func (s *stream) Close() error {
	s.report(breaker.Ignore)
	return s.Stream.Close()
}

func (s *stream) report(o breaker.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		s.done(o)
		s.done = nil
	}
}
