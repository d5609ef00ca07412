// Package websearch is the web_search tool (seed 003 §6): a query, optionally rewritten by a
// small model, sent to a search backend people self-host or buy (SearXNG, Tavily, Brave Search)
// with backoff on rate limits and server errors, the results formatted for the model, a
// web_search event with the sources for the UI, and a cost record per call.
package websearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
)

// Query is one search.
type Query struct {
	Text    string
	Count   int    // results wanted (1-10)
	Recency string // "", day, week, month or year
}

// Result is what a backend found, and what the call cost in the backend's unit.
type Result struct {
	Sources []parley.SearchSource
	Credits float64
}

// Backend is a search API.
type Backend interface {
	Name() string
	Search(ctx context.Context, q Query) (*Result, error)
}

// HTTPError is a backend's answer other than success.
type HTTPError struct {
	Backend    string
	Status     int
	Message    string        // the backend's own words, from its error body
	RetryAfter time.Duration // from Retry-After (or the backend's rate-limit headers); 0 when none
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%s answered %d %s", e.Backend, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Retryable reports whether the call may succeed if made again: a rate limit or a server error.
func (e *HTTPError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// maxBody bounds a backend's answer.
const maxBody = 4 << 20

// do sends req and decodes a 200 answer's JSON into out; any other status becomes an
// *HTTPError, with the message errMsg finds in its body.
func do(hc *http.Client, req *http.Request, backend string, out any, errMsg func([]byte) string) error {
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", backend, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %w", backend, err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("%s: the answer is larger than %d bytes", backend, maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		e := &HTTPError{Backend: backend, Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header, time.Now())}
		if errMsg != nil {
			e.Message = truncate(errMsg(body), 300)
		}
		return e
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: the answer is not the JSON expected: %w", backend, err)
	}
	return nil
}

// retryAfter reads Retry-After (seconds or an HTTP date), or else the first window of Brave's
// X-RateLimit-Reset ("1, 1419704": seconds until each window resets).
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(0, t.Sub(now))
		}
	}
	if v := h.Get("X-RateLimit-Reset"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		if n, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
	}
	return 0
}

var tags = regexp.MustCompile(`<[^>]*>`)

// plain makes a snippet plain text: no HTML tags (Brave marks matches with <strong>), entities
// decoded, spaces collapsed, at most 500 characters.
func plain(s string) string {
	s = tags.ReplaceAllString(s, "")
	s = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&quot;", `"`, "&#39;", "'", "&#x27;", "'", "&nbsp;", " ").Replace(s)
	return truncate(strings.Join(strings.Fields(s), " "), 500)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func withBase(base, def string) string {
	if base == "" {
		base = def
	}
	return strings.TrimRight(base, "/")
}

// SearXNG queries a SearXNG instance's JSON API (GET /search?format=json; the instance must list
// json among its search.formats, or it answers 403).
type SearXNG struct {
	BaseURL string // the instance, e.g. http://localhost:8888
	Client  *http.Client
}

func (s *SearXNG) Name() string { return "searxng" }

func (s *SearXNG) Search(ctx context.Context, q Query) (*Result, error) {
	v := url.Values{"q": {q.Text}, "format": {"json"}, "pageno": {"1"}, "safesearch": {"1"}}
	if q.Recency != "" {
		v.Set("time_range", q.Recency) // day, week, month, year: SearXNG's own names
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, withBase(s.BaseURL, "")+"/search?"+v.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	var out struct {
		Results []struct {
			URL           string `json:"url"`
			Title         string `json:"title"`
			Content       string `json:"content"`
			PublishedDate string `json:"publishedDate"`
		} `json:"results"`
	}
	if err := do(client(s.Client), req, s.Name(), &out, func(b []byte) string {
		if strings.Contains(string(b), "<") {
			return "" // an HTML error page (403 when the json format is not enabled)
		}
		return strings.TrimSpace(string(b))
	}); err != nil {
		var he *HTTPError
		if errors.As(err, &he) && he.Status == http.StatusForbidden {
			he.Message = "the instance refuses format=json: add json to search.formats in its settings.yml"
		}
		return nil, err
	}
	r := &Result{}
	for _, x := range out.Results {
		if len(r.Sources) == q.Count {
			break
		}
		r.Sources = append(r.Sources, parley.SearchSource{Title: plain(x.Title), URL: x.URL, Snippet: plain(x.Content), Published: x.PublishedDate})
	}
	return r, nil
}

// Tavily queries Tavily's search API (POST /search, Bearer key), asking for its usage in
// credits.
type Tavily struct {
	BaseURL string // default https://api.tavily.com
	APIKey  string
	Depth   string // basic (1 credit) or advanced (2 credits); default basic
	Client  *http.Client
}

func (t *Tavily) Name() string { return "tavily" }

func (t *Tavily) Search(ctx context.Context, q Query) (*Result, error) {
	depth := t.Depth
	if depth == "" {
		depth = "basic"
	}
	body := map[string]any{"query": q.Text, "max_results": q.Count, "search_depth": depth, "topic": "general", "include_usage": true}
	if q.Recency != "" {
		body["time_range"] = q.Recency
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, withBase(t.BaseURL, "https://api.tavily.com")+"/search", strings.NewReader(string(b)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+t.APIKey)
	var out struct {
		Results []struct {
			Title         string `json:"title"`
			URL           string `json:"url"`
			Content       string `json:"content"`
			PublishedDate string `json:"published_date"`
		} `json:"results"`
		Usage *struct {
			Credits float64 `json:"credits"`
		} `json:"usage"`
	}
	if err := do(client(t.Client), req, t.Name(), &out, tavilyError); err != nil {
		return nil, err
	}
	r := &Result{Credits: 1}
	if depth == "advanced" {
		r.Credits = 2
	}
	if out.Usage != nil {
		r.Credits = out.Usage.Credits
	}
	for _, x := range out.Results {
		r.Sources = append(r.Sources, parley.SearchSource{Title: plain(x.Title), URL: x.URL, Snippet: plain(x.Content), Published: x.PublishedDate})
	}
	return r, nil
}

// tavilyError reads Tavily's error body, {"detail": {"error": "…"}} (or a plain "detail").
func tavilyError(b []byte) string {
	var e struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &e) != nil || len(e.Detail) == 0 {
		return ""
	}
	var d struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(e.Detail, &d) == nil && d.Error != "" {
		return d.Error
	}
	var s string
	if json.Unmarshal(e.Detail, &s) == nil {
		return s
	}
	return ""
}

// Brave queries the Brave Search API's web search (GET /res/v1/web/search, X-Subscription-Token).
type Brave struct {
	BaseURL string // default https://api.search.brave.com
	APIKey  string
	Client  *http.Client
}

func (b *Brave) Name() string { return "brave" }

var braveFreshness = map[string]string{"day": "pd", "week": "pw", "month": "pm", "year": "py"}

func (b *Brave) Search(ctx context.Context, q Query) (*Result, error) {
	v := url.Values{"q": {q.Text}, "count": {strconv.Itoa(q.Count)}, "safesearch": {"moderate"}, "text_decorations": {"false"}}
	if f := braveFreshness[q.Recency]; f != "" {
		v.Set("freshness", f)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, withBase(b.BaseURL, "https://api.search.brave.com")+"/res/v1/web/search?"+v.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Subscription-Token", b.APIKey)
	var out struct {
		Web *struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
				Age         string `json:"age"`
			} `json:"results"`
		} `json:"web"`
	}
	if err := do(client(b.Client), req, b.Name(), &out, braveError); err != nil {
		return nil, err
	}
	r := &Result{Credits: 1} // Brave bills per request
	if out.Web != nil {
		for _, x := range out.Web.Results {
			if len(r.Sources) == q.Count {
				break
			}
			r.Sources = append(r.Sources, parley.SearchSource{Title: plain(x.Title), URL: x.URL, Snippet: plain(x.Description), Published: x.Age})
		}
	}
	return r, nil
}

// braveError reads Brave's error body: {"type":"ErrorResponse","error":{"code":…,"detail":…}}.
func braveError(b []byte) string {
	var e struct {
		Error struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return ""
	}
	if e.Error.Code != "" && e.Error.Detail != "" {
		return e.Error.Code + ": " + e.Error.Detail
	}
	return e.Error.Detail
}

func client(hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	return &http.Client{Timeout: 30 * time.Second}
}
