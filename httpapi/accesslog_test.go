package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/redact"
)

// accessLines returns the access log lines ("msg":"request") in logs, decoded.
func accessLines(t *testing.T, logs *testlog.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// accessLineOf waits for the access log line of request id rid (it is written once the handler
// has returned, which may be just after the client read the answer).
func accessLineOf(t *testing.T, logs *testlog.Buffer, rid string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, l := range accessLines(t, logs) {
			if l["request_id"] == rid {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for request %s in:\n%s", rid, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 24 §3: one access log line per request, with method, route pattern (never the path),
// status, duration, bytes, user and request id; the client's X-Request-Id is used and returned.
func TestAccessLog(t *testing.T) {
	var logs testlog.Buffer
	e := newEnv(t, func(d *httpapi.Deps) {
		d.AccessLog = true
		d.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	sid := e.newSession(t, "alice")
	resp, body := e.raw(t, "GET", "/api/v1/sessions/"+sid, "", "X-Request-ID", "req-42.a:b_C", "Authorization", "Bearer "+e.key(t, "alice"))
	if resp.StatusCode != 200 {
		t.Fatalf("GET session: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "req-42.a:b_C" {
		t.Fatalf("X-Request-Id %q, want the client's", got)
	}
	line := accessLineOf(t, &logs, "req-42.a:b_C")
	for k, want := range map[string]any{"level": "INFO", "method": "GET", "route": "/api/v1/sessions/{id}", "status": 200.0,
		"bytes": float64(len(body)), "user": "alice"} {
		if line[k] != want {
			t.Errorf("access log %s = %v, want %v (line %v)", k, line[k], want, line)
		}
	}
	if d, ok := line["duration_ms"].(float64); !ok || d < 0 {
		t.Errorf("access log duration_ms = %v", line["duration_ms"])
	}
	if strings.Contains(logs.String(), sid) {
		t.Errorf("the session id (a raw path) is in the log:\n%s", logs.String())
	}

	// A refused request is logged too: no user, its status.
	resp, _ = e.raw(t, "GET", "/api/v1/sessions", "", "Authorization", "Bearer pk_nottherightkeyatall0000000000")
	line = accessLineOf(t, &logs, resp.Header.Get("X-Request-Id"))
	if line["status"] != 401.0 || line["user"] != "" || line["route"] != "/api/v1/sessions" {
		t.Errorf("access log of a 401: %v", line)
	}
	// No pattern but the UI's catch-all: the route is that pattern, not the path.
	resp, _ = e.raw(t, "GET", "/some/secret-ish/path", "")
	line = accessLineOf(t, &logs, resp.Header.Get("X-Request-Id"))
	if line["route"] != "/" || strings.Contains(logs.String(), "secret-ish") {
		t.Errorf("access log of an unrouted path: %v", line)
	}
}

// Issue 24 §3: a client's X-Request-Id is used only when it is 1 to 128 safe characters;
// otherwise the server makes one, and returns it.
func TestRequestIDValidated(t *testing.T) {
	e := newEnv(t, nil)
	generated := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for _, c := range []struct {
		sent string
		kept bool
	}{
		{"", false},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"has space", false},
		{"quote\"d", false},
		{"semi;colon", false},
		{"ünïcode", false},
		{"0af7651916cd43dd8448eb211c80319c", true},
		{"550e8400-e29b-41d4-a716-446655440000", true},
	} {
		req, _ := http.NewRequest("GET", e.url+"/healthz", nil)
		if c.sent != "" {
			req.Header.Set("X-Request-Id", c.sent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got := resp.Header.Get("X-Request-Id")
		if c.kept && got != c.sent {
			t.Errorf("sent %q: got %q, want it kept", c.sent, got)
		}
		if !c.kept && !generated.MatchString(got) {
			t.Errorf("sent %q: got %q, want a generated id", c.sent, got)
		}
	}
}

// Without AccessLog (--access-log=false) no line is written per request.
func TestAccessLogOff(t *testing.T) {
	var logs testlog.Buffer
	e := newEnv(t, func(d *httpapi.Deps) { d.Log = slog.New(slog.NewJSONHandler(&logs, nil)) })
	e.newSession(t, "alice")
	resp, _ := e.raw(t, "GET", "/api/v1/sessions", "", "Authorization", "Bearer "+e.key(t, "alice"))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if n := len(accessLines(t, &logs)); n != 0 {
		t.Errorf("%d access log lines with the access log off:\n%s", n, logs.String())
	}
}

// A browser app on an allowed origin may send X-Request-Id and traceparent, and read the
// X-Request-Id of the answer.
func TestCORSAllowsRequestIDs(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.CORSOrigins = []string{"https://app.example"} })
	resp, _ := e.raw(t, "OPTIONS", "/api/v1/sessions", "", "Origin", "https://app.example",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-request-id,traceparent")
	allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
	if resp.StatusCode != 204 || !strings.Contains(allowed, "x-request-id") || !strings.Contains(allowed, "traceparent") {
		t.Errorf("preflight: %d, Access-Control-Allow-Headers %q", resp.StatusCode, allowed)
	}
	resp, _ = e.raw(t, "GET", "/api/v1/sessions", "", "Origin", "https://app.example", "X-Request-Id", "from-the-app",
		"Authorization", "Bearer "+e.key(t, "alice"))
	if resp.Header.Get("X-Request-Id") != "from-the-app" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id") {
		t.Errorf("answer: X-Request-Id %q, Access-Control-Expose-Headers %q", resp.Header.Get("X-Request-Id"), resp.Header.Get("Access-Control-Expose-Headers"))
	}
}

// attrCapture keeps the attributes of every record, unresolved.
type attrCapture struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

func (c *attrCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *attrCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool { c.attrs = append(c.attrs, a); return true })
	return nil
}
func (c *attrCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *attrCapture) WithGroup(string) slog.Handler      { return c }

// The access log's route is marked redact.Safe: it is the mux's pattern, so redaction never hides
// it, whatever the route (one outside /api/ would otherwise read as a file path).
func TestAccessLogRouteSurvivesRedaction(t *testing.T) {
	c := &attrCapture{}
	e := newEnv(t, func(d *httpapi.Deps) {
		d.AccessLog = true
		d.Log = slog.New(c)
	})
	resp, _ := e.raw(t, "GET", "/healthz", "")
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		var route *slog.Attr
		for i := range c.attrs {
			if c.attrs[i].Key == "route" {
				route = &c.attrs[i]
			}
		}
		c.mu.Unlock()
		if route != nil {
			if s, ok := route.Value.Any().(redact.Safe); !ok || string(s) != "/healthz" {
				t.Errorf("route attribute %#v, want redact.Safe(\"/healthz\")", route.Value.Any())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no access log line")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A method outside the standard set is logged as _OTHER: the log holds no client-chosen token.
func TestAccessLogBoundsTheMethod(t *testing.T) {
	var logs testlog.Buffer
	e := newEnv(t, func(d *httpapi.Deps) {
		d.AccessLog = true
		d.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	resp, _ := e.raw(t, "BREW-A-VERY-LONG-INVENTED-METHOD", "/healthz", "")
	line := accessLineOf(t, &logs, resp.Header.Get("X-Request-Id"))
	if line["method"] != "_OTHER" || strings.Contains(logs.String(), "BREW") {
		t.Errorf("access log of an invented method: %v", line)
	}
}

// recordsHandler keeps the records logged to it.
type recordsHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordsHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordsHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordsHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordsHandler) WithGroup(string) slog.Handler      { return h }

// The access log line is made without its call site, which slog's Logger looks up by walking
// the stack (runtime.Callers) for every line: its record has no PC, and the same attributes in
// the same order as before.
func TestAccessLogRecordHasNoCallSite(t *testing.T) {
	h := &recordsHandler{}
	e := newEnv(t, func(d *httpapi.Deps) {
		d.AccessLog = true
		d.Log = slog.New(h)
	})
	resp, _ := e.raw(t, "GET", "/healthz", "")
	rid := resp.Header.Get("X-Request-Id")
	// The line is written once the handler has returned, which may be just after the client
	// read the answer: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, keys, ok := h.accessRecord(rid); ok {
			if r.PC != 0 {
				t.Errorf("the access log record has a call site (PC %#x): the stack was walked for it", r.PC)
			}
			if want := "method route status duration_ms bytes user request_id"; strings.Join(keys, " ") != want {
				t.Errorf("attributes %v, want %s", keys, want)
			}
			if r.Level != slog.LevelInfo {
				t.Errorf("level %v, want INFO", r.Level)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log record for request %s", rid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// accessRecord returns the access log record of request id rid and its attributes' keys.
func (h *recordsHandler) accessRecord(rid string) (slog.Record, []string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message != "request" {
			continue
		}
		var keys []string
		var got string
		r.Attrs(func(a slog.Attr) bool {
			keys = append(keys, a.Key)
			if a.Key == "request_id" {
				got = a.Value.String()
			}
			return true
		})
		if got == rid {
			return r, keys, true
		}
	}
	return slog.Record{}, nil, false
}
