package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// startInProcess runs `parley serve` in this process on a free port and returns its URL. The
// server is stopped (as by SIGTERM) when the test ends, and must stop cleanly.
func startInProcess(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	url, _ := startInProcessLogs(t, env, args...)
	return url
}

// startInProcessLogs is startInProcess that also returns the server's log, as it grows (every
// line logged before the "listening" line is in it on return).
func startInProcessLogs(t *testing.T, env map[string]string, args ...string) (string, *testlog.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	getenv := func(k string) string { return env[k] }
	all := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "p.db"), "--data-dir", filepath.Join(t.TempDir(), "data"), "--mock-token-delay", "0s"}, args...)
	go func() {
		err := run(ctx, all, getenv, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	logs := &testlog.Buffer{}
	url := waitListening(t, pr, logs)
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not stop within 20s of cancellation")
		}
	})
	return url, logs
}

// readmeBlock returns the shell block that follows the marker comment in README.md.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + " -->\\s*```(?:sh|bash)\\n(.*?)```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("README.md has no ```sh block after <!-- %s -->", marker)
	}
	return string(m[1])
}

// TestReadmeCurlStreamsAToolCall runs README's curl example, as written but for the host, against
// a server started the way README's first command starts it (defaults, offline mock model).
func TestReadmeCurlStreamsAToolCall(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	url := startInProcess(t, nil)
	script := readmeBlock(t, "example:stream")
	if !strings.Contains(script, "http://localhost:8080") {
		t.Fatal("README's example no longer targets http://localhost:8080")
	}
	script = strings.ReplaceAll(script, "http://localhost:8080", url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("README example failed: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"event: start", "event: record", "event: tool_calls_start", "event: tool_call", "event: tool_result", "event: chunk", "event: usage", "event: done", `"finish_reason":"stop"`, "84"} {
		if !strings.Contains(text, want) {
			t.Errorf("README example output lacks %q:\n%s", want, text)
		}
	}
	// Event ids are the sequence numbers 1, 2, 3, …
	ids := regexp.MustCompile(`(?m)^id: (\d+)$`).FindAllStringSubmatch(text, -1)
	for i, m := range ids {
		if m[1] != itoa(i+1) {
			t.Fatalf("event %d has id %s", i+1, m[1])
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestServeAPI drives the main endpoints of a real server end to end.
func TestServeAPI(t *testing.T) {
	url := startInProcess(t, nil)
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, out := do("GET", "/healthz", ""); code != 200 || out["status"] != "ok" {
		t.Fatalf("healthz: %d %v", code, out)
	}
	if code, out := do("GET", "/readyz", ""); code != 200 || out["status"] != "ready" {
		t.Fatalf("readyz: %d %v", code, out)
	}
	code, out := do("POST", "/api/v1/chat", `{"message":"What time is it in UTC, and what is 2+3?"}`)
	if code != 200 {
		t.Fatalf("batch chat: %d %v", code, out)
	}
	if !strings.Contains(out["response"].(string), "5") || out["finish_reason"] != "stop" {
		t.Fatalf("batch answer: %v", out)
	}
	if md := out["metadata"].(map[string]any); md["tool_calls"].(float64) != 2 || md["batch_mode"] != true {
		t.Fatalf("batch metadata: %v", md)
	}
	session := out["session_id"].(string)
	code, out = do("GET", "/api/v1/sessions/"+session+"/records", "")
	if code != 200 {
		t.Fatalf("records: %d", code)
	}
	var tools []string
	for _, r := range out["records"].([]any) {
		rec := r.(map[string]any)
		if rec["type"] == "tool_call" {
			if rec["success"] != true {
				t.Fatalf("tool record not successful: %v", rec)
			}
			tools = append(tools, rec["tool_name"].(string))
		}
	}
	if len(tools) != 2 {
		t.Fatalf("tool_call records: %v", tools)
	}
	if code, out = do("POST", "/api/v1/chat", `{"message":"hi","model":"gpt-9"}`); code != 400 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "gpt-9") {
		t.Fatalf("unknown model: %d %v", code, out)
	}
	if code, out = do("GET", "/api/v1/models", ""); code != 200 || len(out["models"].([]any)) != 1 {
		t.Fatalf("models: %d %v", code, out)
	}
	if code, out = do("GET", "/api/v1/tools", ""); code != 200 || len(out["tools"].([]any)) != 8 { // calculator, get_current_time, 2 todo and 4 memory tools
		t.Fatalf("tools: %d %v", code, out)
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "parley.yaml")
	if err := os.WriteFile(file, []byte("addr: 127.0.0.1:7000\nmax_iterations: 4\ntool-timeout: 5s\nmodel: mock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c config
	fs := flagSet("serve", io.Discard, "")
	serveFlags(fs, &c)
	env := map[string]string{"PARLEY_CONFIG": file, "PARLEY_MAX_ITERATIONS": "6", "PARLEY_ADDR": "127.0.0.1:7001"}
	if err := parseConfig(fs, []string{"--addr", "127.0.0.1:7002"}, func(k string) string { return env[k] }, nil); err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:7002" || c.MaxIterations != 6 || c.ToolTimeout != 5*time.Second || c.Model != "mock" || c.ToolHistoryRounds != 10 {
		t.Fatalf("precedence flag > env > file > default broken: %+v", c)
	}

	for _, bad := range []struct {
		file string
		env  map[string]string
		args []string
		want string
	}{
		{file: "nope: 1\n", want: `unknown key "nope"`},
		{file: "max_iterations: many\n", want: "max_iterations"},
		{env: map[string]string{"PARLEY_TOOL_TIMEOUT": "soon"}, want: "PARLEY_TOOL_TIMEOUT"},
		{args: []string{"--no-such-flag"}, want: "no-such-flag"},
	} {
		var c config
		fs := flagSet("serve", io.Discard, "")
		serveFlags(fs, &c)
		env := bad.env
		if bad.file != "" {
			f := filepath.Join(dir, "bad.yaml")
			os.WriteFile(f, []byte(bad.file), 0o600)
			env = map[string]string{"PARLEY_CONFIG": f}
		}
		err := parseConfig(fs, bad.args, func(k string) string { return env[k] }, nil)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want it to mention %q", bad, err, bad.want)
		}
	}
}

func TestValidateRejectsBadSettings(t *testing.T) {
	var c config
	fs := flagSet("serve", io.Discard, "")
	serveFlags(fs, &c)
	if err := fs.Parse([]string{"--max-iterations", "0", "--log-format", "xml"}); err != nil {
		t.Fatal(err)
	}
	err := c.validate()
	if err == nil || !strings.Contains(err.Error(), "max-iterations") || !strings.Contains(err.Error(), "log-format") {
		t.Fatalf("validate: %v", err)
	}
	rejectsEach(t, [][]string{{"--provider-attempts", "0"}, {"--breaker-failures", "0"}, {"--provider-timeout", "0s"},
		{"--breaker-cooldown", "-1s"}, {"--provider-retry-base", "0s"}, {"--provider-max-wait", "0s"},
		{"--max-file-bytes", "0"}, {"--file-quota-bytes", "-1"}, {"--attachment-text-bytes", "0"}, {"--attachment-inline-bytes", "0"},
		{"--blob-store", "ftp"}, {"--blob-store", "s3", "--s3-bucket", "b"}, {"--memory-prompt-tokens", "-1"}, {"--stream-ring-bytes", "100"},
		{"--approval-retention", "-1h"}})
}

// rejectsEach checks that validate refuses each set of serve flags with an error naming its first
// flag.
func rejectsEach(t *testing.T, sets [][]string) {
	t.Helper()
	for _, args := range sets {
		var c config
		fs := flagSet("serve", io.Discard, "")
		serveFlags(fs, &c)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: validate %v", args, err)
		}
	}
}

// TestReadmeConfigTableIsComplete keeps README's configuration table in step with the flags.
func TestReadmeConfigTableIsComplete(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var c config
	fs := flagSet("serve", io.Discard, "")
	serveFlags(fs, &c)
	fs.VisitAll(func(f *flag.Flag) {
		row := "| `--" + f.Name + "` | `" + envName(f.Name) + "` |"
		if !bytes.Contains(b, []byte(row)) {
			t.Errorf("README.md configuration table lacks a row starting %q", row)
		}
	})
}

func TestRunCommands(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, os.Getenv, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "parley ") {
		t.Fatalf("version: %v %q", err, out.String())
	}
	if err := run(context.Background(), []string{"frobnicate"}, os.Getenv, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
	db := filepath.Join(t.TempDir(), "m.db")
	for _, step := range []string{"up", "status", "down", "up"} {
		out.Reset()
		if err := run(context.Background(), []string{"migrate", "--db", db, step}, os.Getenv, &out, io.Discard); err != nil {
			t.Fatalf("migrate %s: %v", step, err)
		}
		if step == "status" && !strings.Contains(out.String(), "applied") {
			t.Fatalf("migrate status printed %q", out.String())
		}
	}
	if err := run(context.Background(), []string{"migrate", "--db", db, "sideways"}, os.Getenv, io.Discard, io.Discard); err == nil {
		t.Fatal("bad migrate direction accepted")
	}
}

// TestMigrateCommandOnPostgres runs `parley migrate` against PostgreSQL (skipped without one).
func TestMigrateCommandOnPostgres(t *testing.T) {
	url := pgtest.Schema(t)
	for _, step := range []string{"status", "up", "status", "down", "status", "up"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"migrate", "--database-url", url, step}, os.Getenv, &out, io.Discard); err != nil {
			t.Fatalf("migrate %s: %v", step, err)
		}
		if !strings.HasPrefix(out.String(), "postgres ") {
			t.Fatalf("migrate %s did not say which database: %q", step, out.String())
		}
		if step == "status" && !strings.Contains(out.String(), "00001") {
			t.Fatalf("migrate status printed %q", out.String())
		}
	}
	// serve on the migrated schema, with migrations off at start.
	base := startInProcess(t, nil, "--database-url", url, "--migrate=false")
	resp, err := http.Post(base+"/api/v1/chat", "application/json", strings.NewReader(`{"message":"What is 2+3?"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != 200 || !strings.Contains(fmt.Sprint(out["response"]), "5") {
		t.Fatalf("chat on PostgreSQL: %d %v", resp.StatusCode, out)
	}
}

func TestValidateRejectsBadDatabaseSettings(t *testing.T) {
	var c config
	fs := flagSet("serve", io.Discard, "")
	serveFlags(fs, &c)
	if err := fs.Parse([]string{"--database-url", "mysql://u:pw@h/db", "--history-cache-mb", "-1"}); err != nil {
		t.Fatal(err)
	}
	err := c.validate()
	if err == nil || !strings.Contains(err.Error(), "database-url") || !strings.Contains(err.Error(), "history-cache-mb") {
		t.Fatalf("validate: %v", err)
	}
	if got := redactURL("postgres://parley:s3cret@db:5432/parley"); strings.Contains(got, "s3cret") || !strings.Contains(got, "db:5432") {
		t.Fatalf("redactURL: %q", got)
	}
}

// TestLogsAreRedacted: the server's logger, in both formats, keeps keys, e-mail addresses and
// file paths out of the log.
func TestLogsAreRedacted(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log, err := newLogger(&buf, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		log.Error("upstream failed for ops@example.com", "err", errors.New("401: Incorrect API key provided: sk-proj-abcdefghijklmnop"), "file", "/etc/parley/keys.yaml")
		for _, leak := range []string{"ops@", "abcdefghijklmnop", "/etc/parley"} {
			if strings.Contains(buf.String(), leak) {
				t.Errorf("%s log leaks %q: %s", format, leak, buf.String())
			}
		}
	}
}
