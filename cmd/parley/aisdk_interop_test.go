package main

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/provider/llmtest"
)

// TestAISDKInterop runs interop/aisdk/test.mjs, tests written against the real `ai` npm package
// (the version package.json pins), on a parley serve process with API keys and the scripted fake
// upstream: the package's own readUIMessageStream and chunk schema read Parley's UI message
// stream, and its DefaultChatTransport, driven by its AbstractChat as useChat drives it, sends,
// regenerates and resumes. It needs node and interop/aisdk/node_modules (npm ci there); without
// them it skips, unless PARLEY_TEST_REQUIRE_INTEROP=1 (CI sets it), where it fails.
func TestAISDKInterop(t *testing.T) {
	require := os.Getenv("PARLEY_TEST_REQUIRE_INTEROP") == "1"
	missing := func(what string) {
		t.Helper()
		if require {
			t.Fatalf("PARLEY_TEST_REQUIRE_INTEROP=1 but %s", what)
		}
		t.Skipf("skipping the AI SDK interop tests: %s (set PARLEY_TEST_REQUIRE_INTEROP=1 to fail instead)", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	dir, _ := filepath.Abs("../../interop/aisdk")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ai", "package.json")); err != nil {
		missing("interop/aisdk/node_modules is missing (npm ci in interop/aisdk)")
	}

	up := &gatedUpstream{fake: llmtest.NewServer(llmtest.WithChunkSize(8))}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	ctl, release := interopControl(up)
	control := httptest.NewServer(ctl)
	defer control.Close()
	defer release() // a request the script left held must not block the upstream's Close

	db := filepath.Join(t.TempDir(), "interop.db")
	keys := map[string]string{}
	for _, user := range []string{"alice", "bob"} {
		out, err := keysCmd(t, "create", "--db", db, "--user", user, "--name", "interop")
		if err != nil {
			t.Fatal(err)
		}
		keys[user] = strings.TrimSpace(out)
	}
	url := startInProcess(t, map[string]string{"PARLEY_OPENAI_BASE_URL": upstream.URL + "/v1"},
		"--db", db, "--auth", "keys", "--rate-limit", "off", "--provider-attempts", "1", "--heartbeat", "1h",
		"--tool-policy", "get_current_time=ask")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suite := exec.CommandContext(ctx, node, filepath.Join(dir, "test.mjs"))
	suite.Dir = dir
	suite.Env = append(os.Environ(), "PARLEY_URL="+url, "PARLEY_KEY="+keys["alice"], "PARLEY_KEY_BOB="+keys["bob"],
		"PARLEY_CONTROL_URL="+control.URL)
	out, err := suite.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	suite.Stderr = suite.Stdout
	if err := suite.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		t.Log(sc.Text())
	}
	if err := suite.Wait(); err != nil {
		t.Fatalf("AI SDK interop tests failed: %v", err)
	}
}

// interopControl is the script's handle on the fake upstream: scriptControl's /enqueue, /reset
// and /requests, plus POST /hold?at=N (the next model request stops before its N-th stream write)
// and POST /release (it goes on).
func interopControl(up *gatedUpstream) (http.Handler, func()) {
	mux := http.NewServeMux()
	var mu sync.Mutex
	var gate chan struct{}
	mux.HandleFunc("POST /hold", func(w http.ResponseWriter, r *http.Request) {
		at, err := strconv.Atoi(r.URL.Query().Get("at"))
		if err != nil || at < 1 {
			http.Error(w, "at: a positive integer", http.StatusBadRequest)
			return
		}
		mu.Lock()
		gate = up.hold(at)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		if gate != nil {
			close(gate)
			gate = nil
		}
	}
	mux.HandleFunc("POST /release", func(w http.ResponseWriter, r *http.Request) {
		release()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("/", scriptControl(up.fake))
	return mux, release
}
