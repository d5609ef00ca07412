package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/provider/llmtest"
)

// TestOpenAISDKInterop runs interop/openai/run.mjs, written against the official `openai` npm
// client (the exact version interop/openai/package.json pins), against a real parley serve with
// keys, on the fake upstream's demo brain: list models, whole and streamed chats, a client-side
// tool call round trip, Parley's own tools with their activity, a stateful session (stored,
// followed again from the session's stream, refused to another user) and the SDK's error classes
// for 400, 401, 403, 404 and 429. It needs node and `npm ci` in interop/openai; without them it
// skips, unless PARLEY_TEST_REQUIRE_INTEROP=1 (CI sets it).
func TestOpenAISDKInterop(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "interop", "openai"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not on PATH"
	default:
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
			missing = "interop/openai/node_modules is missing (run npm ci in interop/openai)"
		}
	}
	if missing != "" {
		if os.Getenv("PARLEY_TEST_REQUIRE_INTEROP") == "1" {
			t.Fatalf("PARLEY_TEST_REQUIRE_INTEROP=1 but %s", missing)
		}
		t.Skipf("skipping the openai SDK interop test: %s (PARLEY_TEST_REQUIRE_INTEROP=1 makes this a failure)", missing)
	}

	up := httptest.NewServer(llmtest.NewServer())
	t.Cleanup(up.Close)
	db := filepath.Join(t.TempDir(), "p.db")
	keys := map[string]string{}
	for _, user := range []string{"alice", "bob"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"keys", "create", "--user", user, "--db", db}, func(string) string { return "" }, &out, &errOut); err != nil {
			t.Fatalf("keys create %s: %v\n%s", user, err, errOut.String())
		}
		keys[user] = strings.TrimSpace(out.String())
	}
	url := startServe(t, map[string]string{"PARLEY_OPENAI_BASE_URL": up.URL + "/v1"},
		"serve", "--addr", "127.0.0.1:0", "--db", db, "--auth", "keys", "--heartbeat", "1h",
		"--provider-attempts", "1", "--guest-rate-limit", "2/h,burst=2", "--mock-token-delay", "0s")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PARLEY_URL="+url, "PARLEY_MODEL=openai/gpt-4o-mini",
		"PARLEY_KEY_ALICE="+keys["alice"], "PARLEY_KEY_BOB="+keys["bob"])
	out, err := cmd.CombinedOutput()
	t.Logf("run.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("interop/openai/run.mjs failed: %v", err)
	}
	for _, s := range []string{"ok list models", "ok non-streaming chat", "ok streaming chat with usage", "ok client-side tool call round trip",
		"ok Parley's own tools, with tool activity", "ok stateful session", "ok error classes: 400, 401, 404, 429"} {
		if !strings.Contains(string(out), s+"\n") {
			t.Errorf("run.mjs did not report %q", s)
		}
	}
}

// startServe runs `parley <args>` in this process with env as its environment and returns the
// URL it listens on; the test's end stops it (as SIGTERM does) and waits.
func startServe(t testing.TB, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, func(k string) string { return env[k] }, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	var logs bytes.Buffer
	url := waitListening(t, pr, &logs)
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
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
	})
	return url
}

// TestReadmeOpenAICurl runs README's /v1 example, as written but for the host, against a server
// started the way README's first command starts it (defaults, offline mock model): Parley's own
// calculator answers it in Parley's loop.
func TestReadmeOpenAICurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	url := startInProcess(t, nil)
	script := readmeBlock(t, "example:openai")
	if !strings.Contains(script, "http://localhost:8080") {
		t.Fatal("README's example no longer targets http://localhost:8080")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.ReplaceAll(script, "http://localhost:8080", url)).CombinedOutput()
	if err != nil {
		t.Fatalf("README example failed: %v\n%s", err, out)
	}
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(out, &c); err != nil || c.Object != "chat.completion" || len(c.Choices) != 1 ||
		c.Choices[0].Message.Content != "12*(3+4) = 84." || c.Choices[0].FinishReason != "stop" {
		t.Fatalf("README example output: %s", out)
	}
}
