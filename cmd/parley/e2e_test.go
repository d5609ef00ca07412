package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// The test binary doubles as the server (and as an MCP server, see mcptest): with PARLEY_E2E_CHILD set it runs `run` with the
// arguments in PARLEY_E2E_ARGS, so tests can start and SIGKILL a real server process.
func TestMain(m *testing.M) {
	mcptest.Main() // serves MCP instead when a test configured this binary as an MCP server
	if os.Getenv("PARLEY_E2E_CHILD") == "1" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv("PARLEY_E2E_ARGS")), &args); err != nil {
			fmt.Fprintln(os.Stderr, "bad PARLEY_E2E_ARGS:", err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "parley:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	// The package's parallel tests (the browser suite's shards, the crash test's two stores,
	// README's MCP example) spend most of their time waiting on other processes: the browser, the
	// servers they start and kill, npx. Four at once by default, not GOMAXPROCS (2 on CI's
	// machine); -parallel still sets it.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}

// listenRE finds the address in the "listening" log line (text or JSON format).
var listenRE = regexp.MustCompile(`"?msg"?[=:]"?listening"?.*?"?addr"?[=:]"?([0-9.]+:[0-9]+)`)

// waitListening reads log lines from r until the server says where it listens.
func waitListening(t testing.TB, r io.Reader, logs io.Writer) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			io.WriteString(logs, line+"\n")
			if m := listenRE.FindStringSubmatch(line); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatalf("server exited before listening:\n%s", logs)
		}
		return "http://" + addr
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not start in 30s:\n%s", logs)
	}
	return ""
}

// child is a server process started from the test binary.
type child struct {
	cmd  *exec.Cmd
	url  string
	logs *testlog.Buffer
}

// waitLog waits until the logs hold want, and returns them.
func waitLog(t *testing.T, logs *testlog.Buffer, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s := logs.String(); strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the logs after 30s:\n%s", want, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	a, _ := json.Marshal(append([]string{"serve", "--addr", "127.0.0.1:0", "--log-format", "json"}, args...))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PARLEY_E2E_CHILD=1", "PARLEY_E2E_ARGS="+string(a), "OPENAI_API_KEY=", "OPENAI_BASE_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, logs: &testlog.Buffer{}}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	c.url = waitListening(t, stderr, c.logs)
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// sseEvent is one parsed SSE event.
type sseEvent struct {
	ID    string
	Event string
	Data  parley.Event
}

// readSSE parses an SSE body, calling fn for each event until fn returns false or the body ends.
func readSSE(t *testing.T, body io.Reader, fn func(sseEvent) bool) {
	t.Helper()
	if err := scanSSE(body, fn); err != nil {
		t.Fatal(err)
	}
}

// scanSSE is readSSE for any goroutine: it returns the first malformed event. An event cut off by
// the end of the body is not an error (the server may have been killed mid-write).
func scanSSE(body io.Reader, fn func(sseEvent) bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	var (
		ev  sseEvent
		bad error
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if bad != nil {
				return bad
			}
			if ev.Event != "" && !fn(ev) {
				return nil
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.Data); err != nil {
				bad = fmt.Errorf("bad SSE data %q: %v", line, err)
			}
		}
	}
	return nil
}

func postStream(t *testing.T, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/chat/stream", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("chat/stream: %d %s", resp.StatusCode, b)
	}
	return resp
}

func getMessages(t *testing.T, url, session string) []parley.Message {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/sessions/" + session + "/messages?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("messages: %d %s", resp.StatusCode, b)
	}
	var out struct{ Messages []parley.Message }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

// TestSIGKILLKeepsAcknowledgedMessages kills the server process at several points of a streamed
// chat that calls a tool, restarts it on the same database, and finds every message whose storage
// had been acknowledged to the client (a record or tool_result event) exactly as acknowledged.
func TestSIGKILLKeepsAcknowledgedMessages(t *testing.T) {
	killAfter := []struct {
		name string
		stop func(ev sseEvent) bool
	}{
		{"first record (the user's message)", func(ev sseEvent) bool { return ev.Event == "record" }},
		{"assistant tool call stored", func(ev sseEvent) bool { return ev.Event == "tool_calls_start" }},
		{"tool result stored", func(ev sseEvent) bool { return ev.Event == "tool_result" }},
		{"mid-answer", func(ev sseEvent) bool { return ev.Event == "chunk" && ev.Data.Seq > 12 }},
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "parley.db")
	for _, k := range killAfter {
		t.Run(k.name, func(t *testing.T) {
			srv := startChild(t, "--db", db, "--mock-token-delay", "20ms")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp := postStream(t, ctx, srv.url, map[string]any{"message": "What is 12*(3+4)?"})
			acked := map[string]parley.Message{}
			var session string
			readSSE(t, resp.Body, func(ev sseEvent) bool {
				session = ev.Data.SessionID
				if (ev.Event == "record" || ev.Event == "tool_result") && ev.Data.Message != nil {
					acked[ev.Data.Message.ID] = *ev.Data.Message
				}
				if k.stop(ev) {
					srv.kill(t)
					return false
				}
				return true
			})
			resp.Body.Close()
			if srv.cmd.ProcessState == nil {
				t.Fatalf("the stream ended before the kill point")
			}
			if len(acked) == 0 {
				t.Fatal("no message was acknowledged before the kill")
			}

			again := startChild(t, "--db", db)
			stored := map[string]parley.Message{}
			for _, m := range getMessages(t, again.url, session) {
				stored[m.ID] = m
			}
			for id, want := range acked {
				got, ok := stored[id]
				if !ok {
					t.Fatalf("acknowledged %s message %s lost after SIGKILL", want.Role, id)
				}
				wj, _ := json.Marshal(want)
				gj, _ := json.Marshal(got)
				if !bytes.Equal(wj, gj) {
					t.Fatalf("message %s changed across SIGKILL:\n sent %s\n read %s", id, wj, gj)
				}
			}
			again.kill(t)
		})
	}
}
