// Package fetchurl is the fetch_url tool: one web page as readable text (a readability
// extractor), with SSRF protection. Only public addresses are reached: the host's name is
// resolved by the tool, every address checked, and the connection made to the checked address
// itself, for the first request and for every redirect, so that neither a redirect nor a DNS
// answer that changes between check and use (rebinding) reaches loopback, private, link-local
// or metadata addresses. Answers are bounded in size and time.
package fetchurl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	readability "codeberg.org/readeck/go-readability/v2"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
)

// Config configures fetch_url. Zero fields take their defaults.
type Config struct {
	MaxBytes     int64         // largest answer body read (default 2 MiB); a longer one is cut
	MaxChars     int           // longest text given to the model (default 20000 characters)
	Timeout      time.Duration // the whole fetch, redirects included (default 20s)
	MaxRedirects int           // default 5
	UserAgent    string

	// LookupIP resolves a host name (default net.DefaultResolver's). Tests inject one.
	LookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// AllowForTests, when set, replaces the public-address rule: tests use it to reach a fake
	// server on loopback. No configuration sets it; leaving it nil keeps the protection.
	AllowForTests func(netip.Addr) bool
}

// Fetcher fetches pages under the SSRF rules.
type Fetcher struct {
	cfg    Config
	client *http.Client
}

// ErrRefused is returned for a URL, a redirect or an address the rules do not allow.
var ErrRefused = errors.New("refused")

// New returns a Fetcher.
func New(cfg Config) *Fetcher {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 2 << 20
	}
	if cfg.MaxChars <= 0 {
		cfg.MaxChars = 20000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 5
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "Parley-fetch_url/1 (+https://github.com/parleyhq/parley)"
	}
	if cfg.LookupIP == nil {
		cfg.LookupIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	f := &Fetcher{cfg: cfg}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1,
		// The last word: whatever address the socket is about to connect to is checked again.
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !f.allowed(ap.Addr()) {
				return fmt.Errorf("%w: %s is not a public address", ErrRefused, address)
			}
			return nil
		}}
	tr := &http.Transport{
		Proxy: nil, // a proxy would make the connection to a host the rules never saw
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			ips, err := f.resolve(ctx, host)
			if err != nil {
				return nil, err
			}
			var lastErr error
			for _, ip := range ips {
				// Connect to the address that was checked, never to the name again.
				c, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
				if err == nil {
					return c, nil
				}
				lastErr = err
			}
			return nil, lastErr
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
		DisableKeepAlives:     true,
	}
	f.client = &http.Client{Transport: tr, Timeout: cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > cfg.MaxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrRefused, cfg.MaxRedirects)
			}
			// The new URL passes the same checks as the first (its address is checked when dialled).
			return f.checkURL(req.URL)
		}}
	return f
}

func (f *Fetcher) allowed(a netip.Addr) bool {
	if f.cfg.AllowForTests != nil {
		return f.cfg.AllowForTests(a)
	}
	return Public(a)
}

// resolve returns the addresses of host, all of them allowed, or an error naming the one that
// is not: a name with any non-public address is refused whole.
func (f *Fetcher) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if !f.allowed(a) {
			return nil, fmt.Errorf("%w: %s is not a public address", ErrRefused, a)
		}
		return []netip.Addr{a}, nil
	}
	ips, err := f.cfg.LookupIP(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolving %s: no address", host)
	}
	for _, ip := range ips {
		if !f.allowed(ip.Unmap()) {
			return nil, fmt.Errorf("%w: %s resolves to %s, which is not a public address", ErrRefused, host, ip)
		}
	}
	return ips, nil
}

// checkURL refuses what is not an http(s) URL to a host, or carries credentials.
func (f *Fetcher) checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: only http and https URLs are fetched, not %q", ErrRefused, u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("%w: URLs with credentials are not fetched", ErrRefused)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: the URL has no host", ErrRefused)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return fmt.Errorf("%w: %s is this machine", ErrRefused, host)
	}
	if a, err := netip.ParseAddr(host); err == nil && !f.allowed(a) {
		return fmt.Errorf("%w: %s is not a public address", ErrRefused, a)
	}
	return nil
}

// Page is a fetched page.
type Page struct {
	URL       string // after redirects
	Title     string
	Text      string
	Truncated bool
}

// Fetch reads the page at raw as text: HTML through the readability extractor, plain text, JSON
// and Markdown as they are.
func (f *Fetcher) Fetch(ctx context.Context, raw string) (*Page, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	if err := f.checkURL(u); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the page: %w", err)
	}
	p := &Page{URL: resp.Request.URL.String()}
	if int64(len(body)) > f.cfg.MaxBytes {
		body, p.Truncated = body[:f.cfg.MaxBytes], true
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case ct == "text/html" || ct == "application/xhtml+xml" || (ct == "" && looksHTML(body)):
		art, err := readability.FromReader(strings.NewReader(string(body)), resp.Request.URL)
		if err != nil || art.Node == nil {
			return nil, fmt.Errorf("no readable text found in the page")
		}
		var b strings.Builder
		if err := art.RenderText(&b); err != nil {
			return nil, fmt.Errorf("no readable text found in the page")
		}
		p.Title, p.Text = strings.TrimSpace(art.Title()), tidy(b.String())
	case strings.HasPrefix(ct, "text/") || ct == "application/json" || strings.HasSuffix(ct, "+json"):
		if !utf8.Valid(body) {
			body = []byte(strings.ToValidUTF8(string(body), "\uFFFD"))
		}
		p.Text = string(body)
	default:
		return nil, fmt.Errorf("the page is %s, not text; only HTML, text and JSON are read", ct)
	}
	if r := []rune(p.Text); len(r) > f.cfg.MaxChars {
		p.Text, p.Truncated = string(r[:f.cfg.MaxChars]), true
	}
	return p, nil
}

func looksHTML(b []byte) bool {
	s := strings.ToLower(strings.TrimSpace(string(b[:min(len(b), 512)])))
	return strings.HasPrefix(s, "<!doctype html") || strings.HasPrefix(s, "<html")
}

// tidy collapses runs of blank lines and trailing spaces.
func tidy(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	blank := 0
	for _, l := range lines {
		l = strings.TrimRight(l, " \t\r")
		if strings.TrimSpace(l) == "" {
			blank++
			if blank > 1 {
				continue
			}
		} else {
			blank = 0
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

// Tool returns the fetch_url tool.
func Tool(f *Fetcher) parley.Tool {
	return &tools.Func{Def: parley.ToolSpec{
		Name:        "fetch_url",
		Description: "Reads one web page (http or https) and returns its main text. Only public internet addresses can be read.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","minLength":1,"maxLength":2048,` +
			`"description":"The page's URL, e.g. https://go.dev/doc/"}},"required":["url"],"additionalProperties":false}`),
	}, Idempotent: true, Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
		var args struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(raw, &args); err != nil {
			return failed("arguments: %v", err), nil
		}
		p, err := f.Fetch(ctx, args.URL)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, ErrRefused) {
				return failed("fetch_url refused this URL: %s", refusal(err)), nil
			}
			return failed("fetching %s failed: %v", truncate(args.URL, 200), err), nil
		}
		var b strings.Builder
		if p.Title != "" {
			fmt.Fprintf(&b, "Title: %s\n", p.Title)
		}
		fmt.Fprintf(&b, "URL: %s\n\n%s", p.URL, p.Text)
		if p.Truncated {
			b.WriteString("\n\n[the page was cut at the size limit]")
		}
		return &parley.ToolResult{Content: parley.Text(b.String())}, nil
	}}
}

// refusal is the reason of a refused fetch, without the wrapping of the HTTP client
// ("Get …: dial tcp …:").
func refusal(err error) string {
	s := err.Error()
	if i := strings.Index(s, ErrRefused.Error()+": "); i >= 0 {
		s = s[i+len(ErrRefused.Error())+2:]
	}
	return s + " (only public internet addresses are fetched)"
}

func failed(format string, args ...any) *parley.ToolResult {
	return &parley.ToolResult{Content: parley.Text("error: " + fmt.Sprintf(format, args...)), IsError: true}
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
