// Package redact takes out of error text what must reach neither a client, nor the stored
// history, nor the logs (seed 003 §10): API keys and bearer tokens, secrets in URLs and headers,
// e-mail addresses, file paths and stack traces. URLs keep their scheme and host only.
//
// It is applied to error text: error responses and events, failed tool results, log records. A
// tool's successful output is data the user asked for and is left alone.
//
// What is not secret stays readable: the paths of Parley's own API (/api/…, as in "GET
// /api/v1/models lists them" or "no route for GET /api/v1/nothing") are routes, not files, and a
// log value the program marks Safe (the configured database file in the start-up log) is the
// operator's own setting.
package redact

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
)

// The rules, applied in order. Stack traces are cut first (everything from their first line on),
// then secrets, then URLs (so that a path inside a URL is not taken for a file path), then e-mail
// addresses and file paths.
var (
	// Go's "goroutine 1 [running]:", a Python traceback, JavaScript's "    at f (file:1:2)" frames.
	stackStart = regexp.MustCompile(`(?m)^(goroutine \d+ \[|Traceback \(most recent call last\)|\s+at .*[:(].*\d+:\d+\)?\s*$)`)

	// Each rule has a cheap test that text it could match must pass (nil: always run); most
	// text passes few, and the regular expressions are what costs (a log line's ids and words
	// pass none).
	rules = []struct {
		re   *regexp.Regexp
		with string // the replacement; pathRule: an API route is kept, another path is [path]
		may  func(string) bool
	}{
		// user:password@ in URLs.
		{regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@"'<>]+@`), `${1}[redacted]@`, has("://")},
		// Header and parameter style secrets: "Authorization: Bearer x", "api_key=x", "x-api-key: x".
		{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{6,}`), `${1} [redacted]`, hasFold("bearer", "basic")},
		{regexp.MustCompile(`(?i)\b((?:x-)?(?:goog-)?api[_-]?key|access[_-]?token|refresh[_-]?token|auth[_-]?token|client[_-]?secret|secret|password|passwd|pwd|key)(["']?\s*[:=]\s*["']?)[^\s"'&,;)\]}\[][^\s"'&,;)\]}]*`), `${1}${2}[redacted]`, hasAny(":=")},
		// Key formats of the providers and of common services.
		{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{8,}`), `sk-[redacted]`, has("sk-")},
		{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{20,}`), `[redacted]`, has("AIza")},
		{regexp.MustCompile(`\b(?:ghp|gho|ghs|ghu|github_pat|glpat|xox[abpr]|pk_live|pk_test|sk_live|sk_test|pk|pg)_[A-Za-z0-9_\-]{12,}`), `[redacted]`, has("_")},
		{regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+`), `[redacted]`, has("eyJ")}, // JWTs
		// URLs: scheme and host only.
		{regexp.MustCompile(`(?i)\b(https?|wss?)://([^\s/?#"'<>]+)[/?#][^\s"'<>]*`), `${1}://${2}/…`, has("://")},
		// E-mail addresses.
		{regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}`), `[email]`, has("@")},
		// Source positions ("main.go:12", "/src/x.js:3:14") and absolute paths of two segments or
		// more ("/home/u/.env"; "/tmp" alone is kept), Windows paths too.
		{regexp.MustCompile(`[\w.\-/\\]*\.(?:go|js|mjs|cjs|ts|py|rb|java|rs|c|cc|cpp|h):\d+(?::\d+)?`), `[path]`, has(".")},
		{regexp.MustCompile(`(^|[\s"'(=:\[,])(?:~|\.{1,2})?/(?:[\w.\-@+]+/)+[\w.\-@+]*`), pathRule, has("/")},
		{regexp.MustCompile(`\b[A-Za-z]:\\[^\s"'<>|]+`), `[path]`, has(":\\")},
	}
)

// pathRule marks the rule of absolute and relative paths, whose matches are replaced by
// replacePath.
const pathRule = "\x00path"

// replacePath replaces a path matched with its leading delimiter by [path], unless it is a route
// of Parley's API: /api/ then segments of route characters, without "..".
func replacePath(m string) string {
	lead := ""
	if m != "" && strings.IndexByte(" \t\n\f\r\"'(=:[,", m[0]) >= 0 {
		lead, m = m[:1], m[1:]
	}
	if strings.HasPrefix(m, "/api/") && !strings.Contains(m, "..") && !strings.Contains(m, "@") {
		return lead + m
	}
	return lead + "[path]"
}

// Safe is a log value that is not secret and is logged as it is: the configured database file in
// the start-up log, for instance. Only the program's own settings are Safe, never text from a
// client, an upstream or a tool.
type Safe string

// mayHaveStack is true of text in which stackStart could match: each of its forms has one of
// these.
func mayHaveStack(s string) bool {
	return strings.Contains(s, "at ") || strings.Contains(s, "goroutine ") || strings.Contains(s, "Traceback (")
}

// hasFold is true of text that has one of the (lower-case ASCII) words in any case.
func hasFold(words ...string) func(string) bool {
	return func(s string) bool {
		for _, w := range words {
			for i := 0; i+len(w) <= len(s); i++ {
				if s[i]|0x20 == w[0] && strings.EqualFold(s[i:i+len(w)], w) {
					return true
				}
			}
		}
		return false
	}
}

func has(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}
func hasAny(chars string) func(string) bool {
	return func(s string) bool { return strings.ContainsAny(s, chars) }
}

// String returns s with the rules applied.
func String(s string) string {
	if s == "" {
		return s
	}
	if mayHaveStack(s) {
		if loc := stackStart.FindStringIndex(s); loc != nil {
			s = strings.TrimRight(s[:loc[0]], " \t\r\n")
		}
	}
	for _, r := range rules {
		if r.may == nil || r.may(s) {
			if r.with == pathRule {
				s = r.re.ReplaceAllStringFunc(s, replacePath)
				continue
			}
			s = r.re.ReplaceAllString(s, r.with)
		}
	}
	return s
}

// Error is String of err's text; "" for nil.
func Error(err error) string {
	if err == nil {
		return ""
	}
	return String(err.Error())
}

// Handler wraps h so that every record's message and attributes (strings, errors, and whatever
// else prints as text) are redacted before h sees them.
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = attr(a)
	}
	return handler{h.next.WithAttrs(clean)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, ga := range g {
			clean[i] = attr(ga)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		if safe, ok := v.Any().(Safe); ok {
			return slog.String(a.Key, string(safe))
		}
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, Error(err))
		}
		return slog.String(a.Key, String(v.String()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
