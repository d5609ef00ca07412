package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mcpBin finds the reference servers' executables: PARLEY_TEST_MCP_BIN names the directory that
// `npm install @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem`
// filled (node_modules/.bin). Without it the tests skip, unless PARLEY_TEST_REQUIRE_MCP=1 (CI),
// where they fail.
func mcpBin(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("PARLEY_TEST_MCP_BIN")
	if dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			if _, err := exec.LookPath("node"); err == nil {
				return p
			}
		}
	}
	msg := fmt.Sprintf("the MCP reference server %s is not installed: set PARLEY_TEST_MCP_BIN to a node_modules/.bin holding it (.ci/run does)", name)
	if os.Getenv("PARLEY_TEST_REQUIRE_MCP") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func toolByName(t *testing.T, s *Server, name string) *Tool {
	t.Helper()
	for _, tl := range s.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	var names []string
	for _, tl := range s.Tools() {
		names = append(names, tl.Spec().Name)
	}
	t.Fatalf("no tool %s among %v", name, names)
	return nil
}

func connect(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
}

func call(t *testing.T, tl *Tool, args string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tl.Call(ctx, json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.Content)
	return string(b), res.IsError
}

// TestEverythingServerOverStdio drives @modelcontextprotocol/server-everything as a child process.
func TestEverythingServerOverStdio(t *testing.T) {
	s := New("everything", ServerConfig{Command: mcpBin(t, "mcp-server-everything")}, Options{})
	connect(t, s)
	if n := len(s.Tools()); n < 5 {
		t.Fatalf("only %d tools", n)
	}
	if got, isErr := call(t, toolByName(t, s, "everything__echo"), `{"message":"héllo"}`); isErr || got != `"Echo: héllo"` {
		t.Fatalf("echo: %s %v", got, isErr)
	}
	if got, _ := call(t, toolByName(t, s, "everything__get-sum"), `{"a":2,"b":40}`); !strings.Contains(got, "is 42") {
		t.Fatalf("get-sum: %s", got)
	}
	if got, _ := call(t, toolByName(t, s, "everything__get-tiny-image"), `{}`); !strings.Contains(got, `"url":"data:image/png;base64,`) {
		t.Fatalf("get-tiny-image: %.300s", got)
	}
	// Bad arguments are the server's validation error, reported to the model as a failed result.
	if got, isErr := call(t, toolByName(t, s, "everything__get-sum"), `{"a":"two"}`); !isErr {
		t.Fatalf("bad arguments: %s was not an error", got)
	}
}

// TestEverythingServerOverHTTP runs the same server with its streamable HTTP transport, and with
// the older SSE transport, on a loopback port.
func TestEverythingServerOverHTTP(t *testing.T) {
	bin := mcpBin(t, "mcp-server-everything")
	for _, tt := range []struct{ mode, typ, path string }{
		{"streamableHttp", "http", "/mcp"},
		{"sse", "sse", "/sse"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			cmd := exec.Command(bin, tt.mode)
			cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			deadline := time.Now().Add(30 * time.Second)
			for {
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the server did not listen in 30s")
				}
				time.Sleep(50 * time.Millisecond)
			}
			s := New("remote", ServerConfig{Type: tt.typ, URL: fmt.Sprintf("http://127.0.0.1:%d%s", port, tt.path)}, Options{})
			connect(t, s)
			if got, isErr := call(t, toolByName(t, s, "remote__echo"), `{"message":"over `+tt.mode+`"}`); isErr || got != `"Echo: over `+tt.mode+`"` {
				t.Fatalf("echo: %s %v", got, isErr)
			}
		})
	}
}

// TestFilesystemServerOverStdio reads and lists a directory through
// @modelcontextprotocol/server-filesystem, and is refused outside it.
func TestFilesystemServerOverStdio(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("Grüße aus der Datei\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New("fs", ServerConfig{Command: mcpBin(t, "mcp-server-filesystem"), Args: []string{dir}}, Options{})
	connect(t, s)
	got, isErr := call(t, toolByName(t, s, "fs__read_text_file"), fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "notes.txt")))
	if isErr || !strings.Contains(got, "Grüße aus der Datei") {
		t.Fatalf("read_text_file: %s %v", got, isErr)
	}
	if got, _ := call(t, toolByName(t, s, "fs__list_directory"), fmt.Sprintf(`{"path":%q}`, dir)); !strings.Contains(got, "notes.txt") {
		t.Fatalf("list_directory: %s", got)
	}
	if got, isErr := call(t, toolByName(t, s, "fs__read_text_file"), `{"path":"/etc/passwd"}`); !isErr {
		t.Fatalf("read outside the allowed directory: %.200s was not an error", got)
	}
}
