package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"parley key", `key pk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde was used`, `key [redacted] was used`},
		{"parley guest token", `token=pg_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde`, `token=[redacted]`},
		{"openai key", `Incorrect API key provided: sk-proj-AbCdEf1234567890xyz.`, `Incorrect API key provided: sk-[redacted].`},
		{"anthropic key", `x-api-key sk-ant-api03-abcdefghijklmnop invalid`, `x-api-key sk-[redacted] invalid`},
		{"bearer", `Authorization: Bearer eyJhbGciOi.abc_DEF-123`, `Authorization: Bearer [redacted]`},
		{"bearer in capitals", `AUTHORIZATION: BEARER abcdef123456`, `AUTHORIZATION: BEARER [redacted]`},
		{"basic", `header basic dXNlcjpwYXNz`, `header basic [redacted]`},
		{"tab stack", "TypeError: x\n\tat f (/srv/app/index.js:3:14)", "TypeError: x"},
		{"header style", `x-api-key: abc123def456`, `x-api-key: [redacted]`},
		{"query style", `GET ?key=AIzaSyA1234567890abcdefghijklmnopqrs&alt=sse`, `GET ?key=[redacted]&alt=sse`},
		{"google key alone", `key AIzaSyA1234567890abcdefghijklmnopqrs rejected`, `key [redacted] rejected`},
		{"json secret", `{"password": "hunter22", "user": "x"}`, `{"password": "[redacted]", "user": "x"}`},
		{"github token", `token ghp_abcdefghijklmnopqrstuvwx`, `token [redacted]`},
		{"jwt", `session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig-nature_x`, `session [redacted]`},
		{"url credentials", `dial postgres://parley:s3cret@db.internal:5432/prod failed`, `dial postgres://[redacted]@db.internal:5432/prod failed`},
		{"url path and query", `Post "https://api.example.com/v1/chat/completions?user=7": EOF`, `Post "https://api.example.com/…": EOF`},
		{"url without path", `see https://example.com for more`, `see https://example.com for more`},
		{"email", `no account for jane.doe+test@mail.example.co.uk here`, `no account for [email] here`},
		{"unix path", `open /home/jane/project/.env: permission denied`, `open [path]: permission denied`},
		{"relative path", `read ./config/secrets.yaml failed`, `read [path] failed`},
		{"short path kept", `no space left on /tmp`, `no space left on /tmp`},
		{"windows path", `cannot open C:\Users\jane\key.pem`, `cannot open [path]`},
		{"source position", `panic in agent/agent.go:123 while calling`, `panic in [path] while calling`},
		{"go stack", "panic: boom\n\ngoroutine 7 [running]:\nmain.f()\n\t/src/main.go:12 +0x1d\n", "panic: boom"},
		{"js stack", "TypeError: x is undefined\n    at f (/srv/app/index.js:3:14)\n    at g (/srv/app/index.js:9:2)", "TypeError: x is undefined"},
		{"python traceback", "failed\nTraceback (most recent call last):\n  File \"/a/b.py\", line 1", "failed"},
		{"plain text kept", `the calculator failed: division by zero (3/0)`, `the calculator failed: division by zero (3/0)`},
		{"words with slashes kept", `and/or either/or`, `and/or either/or`},
		{"host and port kept", `dial tcp 127.0.0.1:5432: connection refused`, `dial tcp 127.0.0.1:5432: connection refused`},
		{"empty", ``, ``},
		// Routes of Parley's API are not secrets: hints and 404s stay readable.
		{"api route hint", `model: unknown model "x" (name it as provider/model; GET /api/v1/models lists them)`, `model: unknown model "x" (name it as provider/model; GET /api/v1/models lists them)`},
		{"api route 404", `no route for GET /api/v1/nothing/here`, `no route for GET /api/v1/nothing/here`},
		{"api route with an id", `DELETE /api/v1/admin/keys/0190a000-0000-7000-8000-000000000000`, `DELETE /api/v1/admin/keys/0190a000-0000-7000-8000-000000000000`},
		{"api route with a secret in its query", `GET /api/v1/x?api_key=abc123def456`, `GET /api/v1/x?api_key=[redacted]`},
		{"api route with an e-mail", `GET /api/v1/admin/keys?user=jane@example.com`, `GET /api/v1/admin/keys?user=[email]`},
		{"climbing out of /api/", `open /api/../home/jane/.env`, `open [path]`},
		{"a file under an api directory", `cannot read /srv/api/keys.txt`, `cannot read [path]`},
		{"api-like file path", `open /apix/home/jane`, `open [path]`},
		{"relative api path", `open ./api/v1/secrets`, `open [path]`},
		{"upstream URL with an api path", `Post "https://api.example.com/api/v1/chat?key=1": EOF`, `Post "https://api.example.com/…": EOF`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in); got != tt.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if again := String(String(tt.in)); again != String(tt.in) {
				t.Errorf("not idempotent: %q then %q", String(tt.in), again)
			}
		})
	}
}

func TestHandlerRedactsMessagesAndAttributes(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil))).With("base_url", "https://api.example.com/v1?key=abc123secret")
	log.Warn("call to jane@example.com failed",
		"err", errors.New("401 from upstream: Incorrect API key provided: sk-live1234567890abcd"),
		"path", "/var/lib/parley/secret.db",
		slog.Group("req", "auth", "Bearer abcdef123456"),
		"n", 3)
	out := buf.String()
	for _, leak := range []string{"jane@", "sk-live", "abc123secret", "/var/lib", "abcdef123456"} {
		if strings.Contains(out, leak) {
			t.Errorf("log line leaks %q: %s", leak, out)
		}
	}
	for _, kept := range []string{`"n":3`, `"err":"401 from upstream: Incorrect API key provided: sk-[redacted]"`, `"msg":"call to [email] failed"`} {
		if !strings.Contains(out, kept) {
			t.Errorf("log line lacks %s: %s", kept, out)
		}
	}
}

// A value marked Safe (the program's own setting, such as the database file) is logged as it is;
// the same text unmarked is redacted.
func TestSafeValuesAreLoggedAsTheyAre(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil)))
	log.Info("database", "db", Safe("/var/lib/parley/parley.db"), "other", "/var/lib/parley/parley.db")
	out := buf.String()
	if !strings.Contains(out, "db=/var/lib/parley/parley.db") || !strings.Contains(out, "other=[path]") {
		t.Fatalf("log line: %s", out)
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"sk-abcdefghijklmnop", "a@b.co", "/a/b/c", "https://x.y/z?q=1", "goroutine 1 [x", "Bearer abcdefgh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := String(s)
		if String(once) != once {
			t.Fatalf("not idempotent: %q → %q → %q", s, once, String(once))
		}
	})
}

// BenchmarkString redacts a typical error message (one URL, one key) and a plain log value.
func BenchmarkString(b *testing.B) {
	for _, tt := range []struct{ name, s string }{
		{"error", `provider call failed: Post "https://api.example.com/v1/chat/completions": 401 Incorrect API key provided: sk-proj-abcdefghijklmnop`},
		{"plain", `run finished after 3 iterations with 2 tool calls and 1840 tokens in 2.4 seconds`},
		{"id", `01a20d9d-cb5a-7b31-8da0-ece6060eef94`},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(tt.s)))
			b.ReportAllocs()
			for b.Loop() {
				String(tt.s)
			}
		})
	}
}
