package websearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/ask"
	"github.com/parleyhq/parley/tools"
)

// Retry is the backoff of a search on 429 and 5xx answers: Attempts tries in all, the wait
// doubling from Base up to Max with jitter (half of each wait is random), or the backend's
// Retry-After when it gives one. A Retry-After longer than Max is not waited for: the search fails
// at once with the backend's answer.
type Retry struct {
	Attempts int
	Base     time.Duration
	Max      time.Duration
	// Sleep waits d or until ctx ends (tests inject one that does not wait); Rand returns a
	// number in [0,1) for the jitter.
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = 3
	}
	if r.Base <= 0 {
		r.Base = 500 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 10 * time.Second
	}
	if r.Sleep == nil {
		r.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if r.Rand == nil {
		r.Rand = rand.Float64
	}
	return r
}

// wait is the pause before try n+1 (n from 1) after err.
func (r Retry) wait(n int, err error) (time.Duration, bool) {
	var he *HTTPError
	if !errors.As(err, &he) || !he.Retryable() || n >= r.Attempts {
		return 0, false
	}
	if he.RetryAfter > 0 {
		return he.RetryAfter, he.RetryAfter <= r.Max
	}
	d := r.Base << (n - 1)
	if d > r.Max || d <= 0 {
		d = r.Max
	}
	return d/2 + time.Duration(r.Rand()*float64(d/2)), true
}

// Config configures the web_search tool.
type Config struct {
	Backend Backend
	// Rewrite, when its Name is set, is the small model that turns the model's query into a
	// better search query; when it fails, the query goes as it is.
	Rewrite ask.Model
	Retry   Retry
	// DollarsPerCredit prices the backend's unit (a Tavily credit, a Brave request).
	DollarsPerCredit float64
	// Costs, when set, keeps a cost record of each call.
	Costs parley.SearchCostStore
	Now   func() time.Time
	Log   *slog.Logger
}

// Tool returns the web_search tool.
func Tool(cfg Config) parley.Tool {
	cfg.Retry = cfg.Retry.withDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &searcher{cfg: cfg}
	return &tools.Func{Def: parley.ToolSpec{
		Name:        "web_search",
		Description: "Searches the web and returns the top results (title, URL and a snippet of each). Use it for current events or facts you do not know; cite the URLs you use.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","minLength":1,"maxLength":400,"description":"What to search for"},` +
			`"count":{"type":"integer","minimum":1,"maximum":10,"description":"How many results (default 5)"},` +
			`"recency":{"type":"string","enum":["day","week","month","year"],"description":"Only results from the last day, week, month or year"}` +
			`},"required":["query"],"additionalProperties":false}`),
	}, Fn: s.call, Idempotent: true}
}

type searcher struct{ cfg Config }

type args struct {
	Query   string `json:"query"`
	Count   int    `json:"count"`
	Recency string `json:"recency"`
}

func (s *searcher) call(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
	var a args
	if err := json.Unmarshal(raw, &a); err != nil {
		return failed("arguments: %v", err), nil
	}
	a.Query = strings.TrimSpace(a.Query)
	if a.Query == "" {
		return failed("query is empty"), nil
	}
	if a.Count == 0 {
		a.Count = 5
	}
	query := s.rewrite(ctx, a.Query)
	backend := s.cfg.Backend.Name()
	res, err := s.search(ctx, Query{Text: query, Count: a.Count, Recency: a.Recency})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.cfg.Log.Warn("web search failed", "backend", backend, "err", err)
		return failed("the web search failed (%v); answer without it, or try again later", err), nil
	}
	ri := tools.RunOf(ctx)
	info := &parley.WebSearchInfo{ToolCallID: ri.ToolCallID, Query: query, Backend: backend, Sources: res.Sources}
	if info.Sources == nil {
		info.Sources = []parley.SearchSource{}
	}
	if query != a.Query {
		info.Original = a.Query
	}
	s.record(ctx, ri, query, res)
	ri.EmitEvent(parley.Event{Type: parley.EventWebSearch, WebSearch: info})
	return &parley.ToolResult{Content: parley.Text(Format(query, res.Sources))}, nil
}

// search runs the query with the retry policy.
func (s *searcher) search(ctx context.Context, q Query) (*Result, error) {
	r := s.cfg.Retry
	for n := 1; ; n++ {
		res, err := s.cfg.Backend.Search(ctx, q)
		if err == nil {
			return res, nil
		}
		d, again := r.wait(n, err)
		if !again {
			if n > 1 {
				return nil, fmt.Errorf("%w (after %d attempts)", err, n)
			}
			return nil, err
		}
		if err := r.Sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

const rewritePrompt = "You turn a question into one concise web search query: the key terms, names and dates, " +
	"no filler words, no quotes unless a phrase must match exactly. Answer with the query only, on one line."

// rewrite asks the rewrite model for a better query; any failure keeps the query as it is.
func (s *searcher) rewrite(ctx context.Context, q string) string {
	if s.cfg.Rewrite.Name == "" {
		return q
	}
	m := s.cfg.Rewrite
	if m.Timeout <= 0 {
		m.Timeout = 15 * time.Second
	}
	ans, err := m.Ask(ctx, rewritePrompt, q)
	if err != nil {
		s.cfg.Log.Warn("search query rewrite failed; the query goes as it is", "err", err)
		return q
	}
	out := strings.Trim(strings.TrimSpace(firstLine(ans.Content)), "\"'`")
	if out == "" || len([]rune(out)) > 400 {
		return q
	}
	return out
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			return l
		}
	}
	return ""
}

// record stores the call's cost; a failure is logged, the search result stands.
func (s *searcher) record(ctx context.Context, ri tools.RunInfo, query string, res *Result) {
	if s.cfg.Costs == nil {
		return
	}
	c := &parley.SearchCost{ID: parley.NewID(), Owner: ri.User, SessionID: ri.SessionID, RunID: ri.RunID,
		Backend: s.cfg.Backend.Name(), Query: truncate(query, 400), Results: len(res.Sources), Credits: res.Credits,
		Dollars: res.Credits * s.cfg.DollarsPerCredit, CreatedAt: s.cfg.Now().UTC().Truncate(time.Microsecond)}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.cfg.Costs.AddSearchCost(wctx, c); err != nil {
		s.cfg.Log.Error("search cost not recorded", "backend", c.Backend, "err", err)
	}
}

// Format is the text the model gets (seed 003 §6's formatted context).
func Format(query string, sources []parley.SearchSource) string {
	var b strings.Builder
	b.WriteString("WEB SEARCH RESULTS\nQuery: ")
	b.WriteString(query)
	b.WriteString("\n")
	if len(sources) == 0 {
		b.WriteString("\nNo results.\n")
	}
	for i, src := range sources {
		fmt.Fprintf(&b, "\nSource %d: %s\nURL: %s\n", i+1, src.Title, src.URL)
		if src.Published != "" {
			fmt.Fprintf(&b, "Published: %s\n", src.Published)
		}
		if src.Snippet != "" {
			b.WriteString(src.Snippet)
			b.WriteString("\n")
		}
	}
	return b.String()
}

func failed(format string, args ...any) *parley.ToolResult {
	return &parley.ToolResult{Content: parley.Text("error: " + fmt.Sprintf(format, args...)), IsError: true}
}
