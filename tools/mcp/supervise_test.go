package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.Main() // serves MCP instead when started as a server by a test
	os.Exit(m.Run())
}

// supervised runs a stdio server made of this test binary under Run, until the test ends, and
// checks that Run returns and leaves no process behind.
func supervised(t *testing.T, opts Options, failFile string) (*Server, string) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd, args, env := mcptest.Command(mcptest.Options{PIDFile: pidFile, FailFile: failFile})
	if opts.RetryBase == 0 {
		opts.RetryBase, opts.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	}
	logs := &lockedBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s := New("t", ServerConfig{Command: cmd, Args: args, Env: env}, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15s of cancellation")
		}
		for _, pid := range mcptest.PIDs(pidFile) {
			waitGone(t, pid)
		}
		if h := s.Health(); h.State != StateStopped {
			t.Errorf("state after Run: %s", h.State)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return s, pidFile
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 15s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for mcptest.Alive(pid) {
		if time.Now().After(deadline) {
			t.Errorf("process %d outlived its server", pid)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func callText(t *testing.T, s *Server, tool, args string) (string, error) {
	t.Helper()
	for _, tl := range s.Tools() {
		if tl.Spec().Name == "t__"+tool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := tl.Call(ctx, json.RawMessage(args))
			if err != nil {
				return "", err
			}
			return res.Content.String(), nil
		}
	}
	t.Fatalf("no tool %s among %d", tool, len(s.Tools()))
	return "", nil
}

// TestKilledServerComesBack SIGKILLs a supervised stdio server between two calls: the server is
// started again, its tools answer, and the health shows the restart.
func TestKilledServerComesBack(t *testing.T) {
	s, pidFile := supervised(t, Options{}, "")
	<-s.Started()
	if h := s.Health(); h.State != StateReady || h.Tools != 8 || h.Breaker != "closed" || h.Transport != "stdio" {
		t.Fatalf("health after start: %+v", h)
	}
	first, err := callText(t, s, "pid", `{}`)
	if err != nil || first != strconv.Itoa(s.PID()) {
		t.Fatalf("pid tool: %q %v, want %d", first, err, s.PID())
	}
	pid, _ := strconv.Atoi(first)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to come back", func() bool {
		h := s.Health()
		return h.State == StateReady && h.Restarts == 1 && s.PID() != pid && s.PID() != 0
	})
	second, err := callText(t, s, "echo", `{"text":"again"}`)
	if err != nil || second != "echo: again" {
		t.Fatalf("after the restart: %q %v", second, err)
	}
	if pids := mcptest.PIDs(pidFile); len(pids) != 2 || mcptest.Alive(pid) {
		t.Fatalf("started %v; the killed one alive: %v", pids, mcptest.Alive(pid))
	}
}

// TestCallThatKillsTheServer: a server that dies during a call fails that call with an error the
// model can read, and is started again.
func TestCallThatKillsTheServer(t *testing.T) {
	s, _ := supervised(t, Options{}, "")
	<-s.Started()
	pid := s.PID()
	_, err := callText(t, s, "crash", `{}`)
	if err == nil {
		t.Fatal("a call whose server died returned no error")
	}
	waitFor(t, "a new process", func() bool { return s.Health().State == StateReady && s.PID() != pid })
	if out, err := callText(t, s, "add", `{"a":2,"b":40}`); err != nil || out != "42" {
		t.Fatalf("after the crash: %q %v", out, err)
	}
}

// TestBreakerHoldsOffAFailingServer: a server that dies and then fails to start is retried with
// backoff until its breaker opens; while open, nothing starts and its tools fail at once with the
// reason; after the cooldown one trial start runs (a failed trial opens the breaker again), and
// once the server starts again it is ready and the breaker closed.
func TestBreakerHoldsOffAFailingServer(t *testing.T) {
	failFile := filepath.Join(t.TempDir(), "fail")
	s, pidFile := supervised(t, Options{BreakerFailures: 2, BreakerCooldown: time.Second, StartTimeout: 5 * time.Second}, failFile)
	<-s.Started()
	starts := func() int { return len(mcptest.PIDs(pidFile)) }
	if err := os.WriteFile(failFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the breaker to open", func() bool { return s.Health().State == StateDown })
	if h := s.Health(); h.Breaker != "open" || starts() != 3 || h.LastError == "" {
		t.Fatalf("down: %+v after %d starts, want 3", h, starts())
	}
	if _, err := callText(t, s, "echo", `{"text":"x"}`); err == nil || !strings.Contains(err.Error(), "unavailable (down)") {
		t.Fatalf("a call while down: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := starts(); n != 3 {
		t.Fatalf("%d starts while the breaker was open, want none", n-3)
	}
	waitFor(t, "the trial start", func() bool { return starts() == 4 })
	waitFor(t, "the failed trial to open the breaker again", func() bool { return s.Health().State == StateDown })
	if err := os.Remove(failFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to come back", func() bool { return s.Health().State == StateReady })
	if h := s.Health(); h.Breaker != "closed" || starts() != 5 {
		t.Fatalf("back: %+v after %d starts, want 5", h, starts())
	}
	if out, err := callText(t, s, "echo", `{"text":"back"}`); err != nil || out != "echo: back" {
		t.Fatalf("after coming back: %q %v", out, err)
	}
}

// TestCloseStopsWhatTheServerStarted: a stdio server started through a shell that leaves a
// child of its own behind; stopping the server stops that child too.
func TestCloseStopsWhatTheServerStarted(t *testing.T) {
	dir := t.TempDir()
	cmd, args, env := mcptest.Command(mcptest.Options{PIDFile: filepath.Join(dir, "pids")})
	sleeper := filepath.Join(dir, "sleeper")
	script := `sleep 300 & echo $! > "` + sleeper + `"; exec "$0" "$@"`
	s := New("t", ServerConfig{Command: "/bin/sh", Args: append([]string{"-c", script, cmd}, args...), Env: env}, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	pids := mcptest.PIDs(sleeper)
	if len(pids) != 1 || !mcptest.Alive(pids[0]) {
		t.Fatalf("the shell's child: %v", pids)
	}
	server := s.PID()
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	waitGone(t, server)
	waitGone(t, pids[0])
}

func TestToolListChangedRefreshes(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	srv.AddTool(textTool("first", "", func(map[string]any) (*sdk.CallToolResult, error) { return &sdk.CallToolResult{}, nil }))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan int, 10)
	var s *Server
	s = New("live", ServerConfig{Command: "unused"}, Options{
		OnToolsChanged: func() { changed <- len(s.Tools()) },
		Transport: func() sdk.Transport {
			ct, st := sdk.NewInMemoryTransports()
			go srv.Run(ctx, st)
			return ct
		}})
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if n := <-changed; n != 1 {
		t.Fatalf("first listing: %d tools", n)
	}
	srv.AddTool(textTool("second", "", func(map[string]any) (*sdk.CallToolResult, error) { return &sdk.CallToolResult{}, nil }))
	select {
	case n := <-changed:
		if n != 2 || len(s.Tools()) != 2 {
			t.Fatalf("after the server added a tool: %d", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no refresh within 10s of tools/list_changed")
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHTTPServerRestartIsFollowed: a streamable HTTP server that restarts (its sessions gone) is
// reconnected to; the call that finds the session gone fails, and the next one reaches the new
// server.
func TestHTTPServerRestartIsFollowed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener, generation string) *http.Server {
		srv := sdk.NewServer(&sdk.Implementation{Name: "http", Version: generation}, nil)
		srv.AddTool(textTool("gen", "", func(map[string]any) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: generation}}}, nil
		}))
		hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)}
		go hs.Serve(ln)
		return hs
	}
	first := serve(ln, "first")
	s := New("h", ServerConfig{URL: "http://" + addr + "/mcp"}, Options{RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-s.Started()
	call := func() (string, error) {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		tools := s.Tools()
		if len(tools) != 1 {
			return "", fmt.Errorf("%d tools", len(tools))
		}
		res, err := tools[0].Call(cctx, json.RawMessage(`{}`))
		if err != nil {
			return "", err
		}
		return res.Content.String(), nil
	}
	if out, err := call(); err != nil || out != "first" {
		t.Fatalf("first server: %q %v", out, err)
	}
	first.Close()
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	second := serve(ln2, "second")
	defer second.Close()
	waitFor(t, "a call to reach the restarted server", func() bool {
		out, err := call()
		return err == nil && out == "second" && s.Health().State == StateReady
	})
	if h := s.Health(); h.State != StateReady || h.Restarts < 1 {
		t.Fatalf("after the server restarted: %+v", h)
	}
}

// TestSessionOutlivesTheStartContext: the context given to Connect bounds the start only. The SSE
// transport binds its event stream to the context it is opened with; were that the start's
// context, every call after the start would find the connection gone.
func TestSessionOutlivesTheStartContext(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "sse", Version: "1"}, nil)
	srv.AddTool(textTool("ping", "", func(map[string]any) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
	}))
	hs := httptest.NewServer(sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	s := New("old", ServerConfig{Type: "sse", URL: hs.URL}, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	defer s.Close()
	time.Sleep(50 * time.Millisecond)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	res, err := s.Tools()[0].Call(cctx, json.RawMessage(`{}`))
	if err != nil || res.Content.String() != "pong" {
		t.Fatalf("a call after the start's context ended: %v %v", res, err)
	}
}
