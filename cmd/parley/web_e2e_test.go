package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// browserShards is how many parts the browser suite's cases are cut into, each run at once by a
// node process and a browser of its own against servers of its own. The suite waits more than it
// computes (about 35 CPU-seconds in its 77 s alone on an idle 2-core machine): two shards overlap
// those waits. The cases of one shard still run one after another, as each expects.
const browserShards = 2

// TestWebUIInABrowser runs the browser suite (web/e2e/run.mjs: Playwright driving Debian's
// Chromium) against a real Parley: `run` on a free port, with an OpenAI-compatible provider that
// is the scripted fake upstream and a stdio MCP server, plus a second instance with API keys and
// guests for the sign-in case. The suite scripts the model through a small control server.
// The cases are cut into browserShards subtests run in parallel, each with all of the above to
// itself: case i runs in shard i % browserShards.
//
// It needs node, chromium and web/node_modules (npm ci in web/); without them it skips, unless
// PARLEY_TEST_REQUIRE_BROWSER=1 (CI sets it), where it fails.
func TestWebUIInABrowser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser suite skipped in -short mode")
	}
	require := os.Getenv("PARLEY_TEST_REQUIRE_BROWSER") == "1"
	missing := func(what string) {
		t.Helper()
		if require {
			t.Fatalf("PARLEY_TEST_REQUIRE_BROWSER=1 but %s", what)
		}
		t.Skipf("skipping the browser suite: %s (set PARLEY_TEST_REQUIRE_BROWSER=1 to fail instead)", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	chromium := os.Getenv("PARLEY_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		missing(chromium + " is missing (apt-get install -y chromium)")
	}
	webDir, _ := filepath.Abs("../../web")
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "playwright-core")); err != nil {
		missing("web/node_modules is missing (npm ci in web/)")
	}
	for shard := range browserShards {
		t.Run(fmt.Sprintf("shard%d", shard), func(t *testing.T) {
			t.Parallel()
			browserShard(t, node, chromium, webDir, shard)
		})
	}
}

// browserShard runs the cases of one shard of the browser suite against servers of its own.
func browserShard(t *testing.T, node, chromium, webDir string, shard int) {
	fake := llmtest.NewServer()
	upstream := httptest.NewServer(fake)
	defer upstream.Close()
	controls := http.NewServeMux()
	controls.Handle("/", scriptControl(fake))
	control := httptest.NewServer(controls)
	defer control.Close()

	cmd, args, env := mcptest.Command(mcptest.Options{})
	cfg := map[string]any{
		"providers": []map[string]any{{"name": "oa", "kind": "openai", "base_url": upstream.URL + "/v1",
			"api_key": "sk-test", "models": []string{"gpt-4o", "gpt-4o-mini"}}},
		"prices":     map[string]any{"oa/gpt-4o": map[string]any{"input": 2.5, "cached_input": 1.25, "output": 10}},
		"mcpServers": map[string]any{"t": map[string]any{"command": cmd, "args": args, "env": env, "timeout": 5}},
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(t.TempDir(), "parley.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	searx := fakeSearXNG(t)
	imgs := fakeOpenAIImages(t, filestest.PNG(40, 30))
	// --tool-policy: t__write asks for approval by this flag, t__erase by its destructiveHint (the
	// approval case uses both).
	common := []string{"--config", cfgPath, "--rate-limit", "off", "--provider-attempts", "1", "--breaker-failures", "1000", "--artifacts",
		"--tool-policy", "t__write=ask",
		"--search-backend", "searxng", "--searxng-url", searx.URL,
		"--image-backend", "openai", "--image-model", "dall-e-2", "--image-base-url", imgs.URL + "/v1", "--image-api-key-env", "IMG_KEY"}
	imgEnv := map[string]string{"IMG_KEY": "sk-img"}
	dbPath := filepath.Join(t.TempDir(), "ui.db")
	base := startInProcess(t, imgEnv, append(common, "--db", dbPath)...)
	big := bigSession(t, dbPath, 5000)
	// --approval-timeout: the expiry case waits for a call nobody answers (no other case of this
	// server uses a tool that asks).
	withKeys := startInProcess(t, imgEnv, append(common, "--auth", "keys", "--guests", "--guest-rate-limit", "off", "--approval-timeout", "8s")...)
	crashable := startCrashable(t, upstream.URL)

	controls.HandleFunc("POST /crash-restart", crashable.crashRestart)
	shots := os.Getenv("PARLEY_SCREENSHOTS")
	if shots == "" {
		shots, _ = filepath.Abs("../../docs/screenshots")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // the whole suite, on a busy machine
	defer cancel()
	suite := exec.CommandContext(ctx, node, filepath.Join(webDir, "e2e", "run.mjs"))
	suite.Dir = webDir
	suite.Env = append(os.Environ(), "PARLEY_URL="+base, "PARLEY_AUTH_URL="+withKeys, "PARLEY_CONTROL_URL="+control.URL,
		"PARLEY_CRASH_URL="+crashable.url, "PARLEY_CHROMIUM="+chromium, "PARLEY_SCREENSHOTS="+shots, "PARLEY_BIG_SESSION="+big,
		fmt.Sprintf("PARLEY_E2E_SHARD=%d/%d", shard, browserShards))
	if only := os.Getenv("PARLEY_E2E_ONLY"); only != "" {
		suite.Env = append(suite.Env, "PARLEY_E2E_ONLY="+only)
	}
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
		t.Fatalf("browser suite failed: %v", err)
	}
}

// bigSession stores a session of n messages (user and assistant in turn, some with Markdown) in
// the running server's database, for the long-session scrolling case.
func bigSession(t *testing.T, dbPath string, n int) string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	sess := &parley.Session{ID: parley.NewID(), Title: fmt.Sprintf("A long session (%d messages)", n), Owner: "local", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 500 {
		var batch []*parley.Message
		for j := i; j < min(i+500, n); j++ {
			m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(fmt.Sprintf("Question %d: how does this work?", j+1)), CreatedAt: now}
			if j%2 == 1 {
				text := fmt.Sprintf("Answer %d. It works like this:\n\n- first\n- second\n", j+1)
				if j%10 == 1 {
					text += "\n```go\nfmt.Println(\"hello\")\n```\n"
				}
				m.Role, m.Content = parley.RoleAssistant, parley.Text(text)
			}
			batch = append(batch, m)
		}
		if err := st.AppendMessages(ctx, sess.ID, batch...); err != nil {
			t.Fatal(err)
		}
	}
	return sess.ID
}

// scriptControl lets the browser suite script the fake upstream: POST /enqueue with a JSON array
// of llmtest.Turn, POST /reset, GET /requests (the model and offered tool names of each request).
func scriptControl(fake *llmtest.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /enqueue", func(w http.ResponseWriter, r *http.Request) {
		var turns []llmtest.Turn
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&turns); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fake.Enqueue(turns...)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) {
		fake.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		type req struct {
			Model  string   `json:"model"`
			Tools  []string `json:"tools"`
			Last   string   `json:"last"`   // the text of the request's last message
			Images []string `json:"images"` // the image URLs of its last message
			System string   `json:"system"` // the text of its system message ("" when none)
		}
		out := []req{}
		for _, q := range fake.Requests() {
			x := req{Model: q.Model, Tools: []string{}, Images: []string{}}
			for _, s := range q.Tools {
				x.Tools = append(x.Tools, s.Name)
			}
			if len(q.Messages) > 0 && q.Messages[0].Role == parley.RoleSystem {
				x.System = q.Messages[0].Content.String()
			}
			if n := len(q.Messages); n > 0 {
				x.Last = strings.TrimSpace(q.Messages[n-1].Content.String())
				for _, p := range q.Messages[n-1].Content.Parts() {
					if p.ImageURL != nil {
						x.Images = append(x.Images, p.ImageURL.URL)
					}
				}
			}
			out = append(out, x)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}

// crashableServer is a Parley server in a process of its own (the test binary as a child, see
// TestMain) that the browser suite can SIGKILL mid-run and start again on the same database, port
// and --instance-id (POST /crash-restart on the control server), so that the new process takes the
// run over (a `recovered` run) while the page stays on the same origin.
type crashableServer struct {
	mu   sync.Mutex
	args []string
	url  string
	cmd  *exec.Cmd
	logs *testlog.Buffer
}

func startCrashable(t *testing.T, upstreamURL string) *crashableServer {
	t.Helper()
	cfg := map[string]any{"providers": []map[string]any{{"name": "oa", "kind": "openai", "base_url": upstreamURL + "/v1",
		"api_key": "sk-test", "models": []string{"gpt-4o"}}}}
	b, _ := json.Marshal(cfg)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "crash.yaml")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &crashableServer{args: []string{"serve", "--log-format", "json", "--config", cfgPath, "--db", filepath.Join(dir, "crash.db"),
		"--data-dir", filepath.Join(dir, "data"), "--instance-id", "e2e-crash", "--rate-limit", "off", "--provider-attempts", "1",
		"--tool-policy", "calculator=ask"}} // the approval case waits on a calculator call through a crash
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stop()
	})
	if err := c.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs the server on addr and waits (at most 30 s) until it listens.
func (c *crashableServer) start(addr string) error {
	a, _ := json.Marshal(append(append([]string{}, c.args...), "--addr", addr))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_E2E_ARGS="+string(a), "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd, c.logs = cmd, &testlog.Buffer{}
	found := make(chan string, 1)
	go func() { // owned by the child: ends when its stderr closes, at its exit
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			c.logs.Write([]byte(sc.Text() + "\n"))
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case got, ok := <-found:
		if !ok {
			c.stop()
			return fmt.Errorf("the crashable server exited before listening:\n%s", c.logs)
		}
		c.url = "http://" + got
		return nil
	case <-time.After(30 * time.Second):
		c.stop()
		return fmt.Errorf("the crashable server did not listen within 30 s:\n%s", c.logs)
	}
}

func (c *crashableServer) stop() {
	if c.cmd != nil && c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Wait()
	}
}

// crashRestart SIGKILLs the server and starts it again on the same port.
func (c *crashableServer) crashRestart(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop()
	if err := c.start(strings.TrimPrefix(c.url, "http://")); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
