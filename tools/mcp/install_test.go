package mcp

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"time"

	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// TestFirstStartThroughNpxIsNotCutShort: a server run through npx whose first start takes longer
// than StartTimeout (npx downloading the package) is not killed and started again: Start returns
// after StartTimeout with a log that says the server is still starting and why, and the one start
// goes on in the background until the server is ready.
func TestFirstStartThroughNpxIsNotCutShort(t *testing.T) {
	dir := t.TempDir()
	count, gate := filepath.Join(dir, "starts"), filepath.Join(dir, "downloaded")
	// A stand-in for npx: it "downloads" until the test creates the gate file, then runs the server.
	script := "#!/bin/sh\necho start >> \"$PARLEY_TEST_COUNT\"\nwhile [ ! -e \"$PARLEY_TEST_GATE\" ]; do sleep 0.05; done\nexec \"$@\"\n"
	npx := filepath.Join(dir, "npx")
	if err := os.WriteFile(npx, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, args, env := mcptest.Command(mcptest.Options{PIDFile: filepath.Join(dir, "pids")})
	env["PARLEY_TEST_COUNT"], env["PARLEY_TEST_GATE"] = count, gate
	cfg := ServerConfig{Command: npx, Args: append([]string{cmd}, args...), Env: env}
	if !cfg.Installs() {
		t.Fatal("a server run through npx does not count as installing")
	}

	logs := &lockedBuffer{}
	opts := Options{StartTimeout: 300 * time.Millisecond, InstallTimeout: 2 * time.Minute,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	began := time.Now()
	m := Start(context.Background(), map[string]ServerConfig{"everything": cfg}, opts, nil)
	t.Cleanup(m.Close)
	if waited := time.Since(began); waited > time.Minute {
		t.Fatalf("Start waited %v for a server still downloading", waited)
	}
	if h := m.Health()[0]; h.State != StateStarting {
		t.Fatalf("state after Start: %+v", h)
	}
	if !strings.Contains(logs.String(), "mcp server still starting (a first start through npx may download it)") {
		t.Fatalf("no log saying the server is still starting:\n%s", logs.String())
	}
	// The wait is well past StartTimeout before the "download" ends.
	time.Sleep(3 * opts.StartTimeout)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to be ready", func() bool { return m.Health()[0].State == StateReady })
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "start"); n != 1 || strings.Contains(logs.String(), "failed to start") {
		t.Fatalf("the first start was cut short: %d starts\n%s", n, logs.String())
	}
	if h := m.Health()[0]; h.Tools == 0 || h.Restarts != 0 {
		t.Fatalf("health: %+v", h)
	}
}

// Only package runners get the longer first start; a plain command keeps StartTimeout.
func TestInstallsIsForPackageRunners(t *testing.T) {
	for cmd, want := range map[string]bool{"npx": true, "/usr/local/bin/uvx": true, "docker": true, "node": false, "/opt/server": false} {
		if got := (ServerConfig{Command: cmd}).Installs(); got != want {
			t.Errorf("Installs(%q) = %v", cmd, got)
		}
	}
	if (ServerConfig{URL: "https://mcp.example.com/mcp"}).Installs() {
		t.Error("an HTTP server installs")
	}
	s := New("x", ServerConfig{Command: "node"}, Options{StartTimeout: time.Second, InstallTimeout: time.Hour})
	n := New("x", ServerConfig{Command: "npx"}, Options{StartTimeout: time.Second, InstallTimeout: time.Hour})
	if s.startTimeout(false) != time.Second || n.startTimeout(false) != time.Hour || n.startTimeout(true) != time.Second {
		t.Errorf("start limits: node %v, npx first %v, npx later %v", s.startTimeout(false), n.startTimeout(false), n.startTimeout(true))
	}
}
