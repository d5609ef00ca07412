package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/provider/llmtest"
)

// jsonLines decodes the JSON log lines in logs.
func jsonLines(t *testing.T, logs *testlog.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// waitLine waits until a JSON log line satisfies ok, and returns it.
func waitLine(t *testing.T, logs *testlog.Buffer, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, l := range jsonLines(t, logs) {
			if ok(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %s after 30s:\n%s", what, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 24 §3, through the real server and its redacting logger: the chat's request has its
// access log line (the client's request id, route pattern, user), and a line logged during the
// run (the router retrying a model call the provider answered with 503) carries the run's
// run_id and session_id.
func TestLogsOfARequestAndItsRun(t *testing.T) {
	fake := llmtest.NewServer(llmtest.WithModel("mock"))
	fake.Enqueue(llmtest.Turn{Status: 503, ErrorMessage: "The server is overloaded"})
	up := httptest.NewServer(fake)
	defer up.Close()
	url, logs := startInProcessLogs(t, nil, "--log-format", "json", "--rate-limit", "off",
		"--openai-base-url", up.URL+"/v1", "--model", "openai/mock", "--provider-retry-base", "1ms", "--provider-retry-max", "2ms")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/chat/stream", strings.NewReader(`{"message":"What is 12*(3+4)?"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "chat-0001")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Request-Id") != "chat-0001" {
		t.Errorf("X-Request-Id %q, want the client's", resp.Header.Get("X-Request-Id"))
	}
	var runID, sessionID, finish string
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		runID, sessionID = ev.Data.RunID, ev.Data.SessionID
		if ev.Event == "done" {
			finish = ev.Data.FinishReason
			return false
		}
		return true
	})
	resp.Body.Close()
	if finish != "stop" || runID == "" || sessionID == "" {
		t.Fatalf("the chat ended with %q (run %q, session %q)", finish, runID, sessionID)
	}

	access := waitLine(t, logs, "the chat's access log", func(l map[string]any) bool {
		return l["msg"] == "request" && l["request_id"] == "chat-0001"
	})
	for k, want := range map[string]any{"level": "INFO", "method": "POST", "route": "/api/v1/chat/stream", "status": 200.0, "user": "local"} {
		if access[k] != want {
			t.Errorf("access log %s = %v, want %v: %v", k, access[k], want, access)
		}
	}
	if b, _ := access["bytes"].(float64); b <= 0 {
		t.Errorf("access log bytes = %v", access["bytes"])
	}
	retry := waitLine(t, logs, "the retried model call", func(l map[string]any) bool { return l["msg"] == "retrying model call" })
	if retry["run_id"] != runID || retry["session_id"] != sessionID {
		t.Errorf("a run's log line lacks its ids (run %s, session %s): %v", runID, sessionID, retry)
	}
	// Every other request is logged too, with its own id; no line of the run lacks its ids.
	for _, l := range jsonLines(t, logs) {
		if l["run_id"] == nil && strings.Contains(strings.ToLower(l["msg"].(string)), "model call") {
			t.Errorf("a model call's log line without run_id: %v", l)
		}
	}
}

// `parley serve -h` lists the observability flags and the OTEL_* variables that turn traces on.
func TestServeHelpListsObservability(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"serve", "-h"}, envOf(nil), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-access-log", "-trace-content", "-metrics-addr", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER=otlp", "OTEL_SDK_DISABLED"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("serve -h lacks %q:\n%s", s, out.String())
		}
	}
}

// Tracing's own variables are checked at start: an exporter or protocol Parley does not have
// is refused with a clear error, not ignored.
func TestTracingSettingsAreChecked(t *testing.T) {
	for env, want := range map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp only",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "OTLP/HTTP only",
	} {
		val := map[string]string{"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}[env]
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--db", t.TempDir() + "/x.db"}, envOf(map[string]string{env: val}), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: %v, want an error saying %q", env, val, err, want)
		}
	}
}
