package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// mcpConfigFile writes an --mcp-config file naming this test binary as the stdio MCP server
// "t" (tools t__echo, t__add, t__pid, t__sleep, t__crash), and a disabled server "off".
func mcpConfigFile(t *testing.T, o mcptest.Options) string {
	t.Helper()
	cmd, args, env := mcptest.Command(o)
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"t":   map[string]any{"command": cmd, "args": args, "env": env},
		"off": map[string]any{"command": "/nonexistent", "disabled": true},
	}})
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type toolList struct {
	Tools []struct {
		Stats   map[string]int64 `json:"stats"`
		Name    string           `json:"name"`
		Server  string           `json:"server"`
		Health  string           `json:"health"`
		Breaker string           `json:"breaker"`
	} `json:"tools"`
	Servers []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		Breaker  string `json:"breaker"`
		Tools    int    `json:"tools"`
		Restarts int    `json:"restarts"`
	} `json:"servers"`
}

func getTools(t *testing.T, url string) toolList {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out toolList
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tools: %d %v", resp.StatusCode, err)
	}
	return out
}

// mcpChatConfig writes a config file with the provider "oa" (model gpt-4o) at the fake upstream
// upstreamURL and the mcptest server "t" over stdio, and returns its path.
func mcpChatConfig(t *testing.T, upstreamURL string) string {
	t.Helper()
	return mcpChatConfigWith(t, upstreamURL, mcptest.Options{})
}

func mcpChatConfigWith(t *testing.T, upstreamURL string, o mcptest.Options) string {
	t.Helper()
	cmd, args, env := mcptest.Command(o)
	cfg := map[string]any{
		"providers":  []map[string]any{{"name": "oa", "kind": "openai", "base_url": upstreamURL + "/v1", "api_key": "sk-test", "models": []string{"gpt-4o"}}},
		"mcpServers": map[string]any{"t": map[string]any{"command": cmd, "args": args, "env": env, "timeout": 5}},
	}
	b, _ := json.Marshal(cfg) // JSON is YAML
	path := filepath.Join(t.TempDir(), "parley.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestChatCallsAnMCPTool: the model (the fake upstream, over real HTTP) calls a tool of a stdio
// MCP server configured in the config file's mcpServers key; the final answer carries the tool's
// result, and the stored tool message names the server, with its execution time.
func TestChatCallsAnMCPTool(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	url := startInProcess(t, nil, "--config", mcpChatConfig(t, hs.URL))

	tl := getTools(t, url)
	found := false
	for _, tool := range tl.Tools {
		if tool.Name == "t__echo" {
			found = tool.Server == "t" && tool.Health == "ready" && tool.Breaker == "closed"
		}
	}
	if !found || len(tl.Servers) != 1 || tl.Servers[0].State != "ready" || tl.Servers[0].Tools != 8 {
		t.Fatalf("tools: %+v", tl)
	}

	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_1", Type: "function",
		Function: parley.FunctionCall{Name: "t__echo", Arguments: `{"text":"hello from MCP"}`}}}})
	session, answer, errs := chatTurn(t, url, "", "oa/gpt-4o", "Echo something through MCP.")
	if len(errs) > 0 {
		t.Fatalf("error event: %+v", *errs[0].Error)
	}
	if !strings.Contains(answer, "t__echo returned: echo: hello from MCP") {
		t.Fatalf("answer %q does not carry the tool's result", answer)
	}
	// The model was offered the MCP tool under its namespaced name, with the server's schema.
	reqs := fake.Requests()
	offered := false
	for _, spec := range reqs[0].Tools {
		offered = offered || (spec.Name == "t__echo" && spec.Description == "Echoes the text back." && strings.Contains(string(spec.Parameters), `"required":["text"]`))
	}
	if len(reqs) != 2 || !offered {
		t.Fatalf("the first model request did not offer t__echo with its description and schema: %+v", reqs[0].Tools)
	}
	var tool *parley.Message
	for _, m := range validHistory(t, url, session) {
		if m.Role == parley.RoleTool {
			tool = &m
		}
	}
	if tool == nil || tool.Server != "t" || tool.Success == nil || !*tool.Success || tool.Content.String() != "echo: hello from MCP" || tool.Name != "t__echo" {
		t.Fatalf("stored tool message: %+v", tool)
	}

	// selected_tools takes MCP tools too.
	if err := checkSelect(url, []string{"t__add"}); err != nil {
		t.Fatal(err)
	}
	if err := checkSelect(url, []string{"t__nope"}); err == nil {
		t.Fatal("an unknown MCP tool was accepted in selected_tools")
	}
}

// checkSelect starts a chat that selects tools and reports the server's refusal, if any.
func checkSelect(url string, selected []string) error {
	b, _ := json.Marshal(map[string]any{"message": "2+2?", "selected_tools": selected})
	resp, err := http.Post(url+"/api/v1/chat", "application/json", strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var e struct{ Error struct{ Message string } }
		json.NewDecoder(resp.Body).Decode(&e)
		return &statusError{resp.StatusCode, e.Error.Message}
	}
	return nil
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return strconv.Itoa(e.code) + " " + e.msg }

// TestMCPServerKilledMidSession SIGKILLs the MCP server between two turns of one session: the
// server comes back (GET /api/v1/tools shows the restart), the next turn's call reaches the new
// process, and the history stays valid.
func TestMCPServerKilledMidSession(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	pidFile := filepath.Join(t.TempDir(), "pids")
	url := startInProcess(t, map[string]string{"OPENAI_BASE_URL": hs.URL + "/v1", "OPENAI_API_KEY": "sk-test"},
		"--mcp-config", mcpConfigFile(t, mcptest.Options{PIDFile: pidFile}), "--mcp-retry-base", "20ms", "--mcp-retry-max", "200ms")
	pidCall := llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_pid", Type: "function", Function: parley.FunctionCall{Name: "t__pid", Arguments: `{}`}}}}

	fake.Enqueue(pidCall)
	session, first, errs := chatTurn(t, url, "", "openai/gpt-4o-mini", "Which process serves you?")
	if len(errs) > 0 {
		t.Fatalf("error event: %+v", *errs[0].Error)
	}
	pids := mcptest.PIDs(pidFile)
	if len(pids) != 1 || !strings.Contains(first, "t__pid returned: "+strconv.Itoa(pids[0])) {
		t.Fatalf("first answer %q, servers started %v", first, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		tl := getTools(t, url)
		if s := tl.Servers; len(s) == 2 && s[1].Name == "t" && s[1].State == "ready" && s[1].Restarts == 1 {
			if s[0].Name != "off" || s[0].State != "disabled" {
				t.Fatalf("the disabled server: %+v", s[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server did not come back in 15s: %+v", tl.Servers)
		}
		time.Sleep(20 * time.Millisecond)
	}

	fake.Enqueue(pidCall)
	_, second, errs := chatTurn(t, url, session, "openai/gpt-4o-mini", "And now?")
	pids = mcptest.PIDs(pidFile)
	if len(errs) > 0 || len(pids) != 2 || !strings.Contains(second, "t__pid returned: "+strconv.Itoa(pids[1])) {
		t.Fatalf("second answer %q (errors %v), servers started %v", second, errs, pids)
	}
	validHistory(t, url, session)
}

// TestNoMCPServerOutlivesParley: a stdio MCP server stops with Parley, on SIGTERM and on SIGKILL,
// even one that does not exit when its stdin closes (only a signal stops it).
func TestNoMCPServerOutlivesParley(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			srv := startChild(t, "--db", filepath.Join(t.TempDir(), "p.db"), "--mcp-config", mcpConfigFile(t, mcptest.Options{PIDFile: pidFile, Linger: true}))
			pids := mcptest.PIDs(pidFile)
			if len(pids) != 1 || !mcptest.Alive(pids[0]) {
				t.Fatalf("MCP server processes: %v", pids)
			}
			if err := srv.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = srv.cmd.Wait()
			deadline := time.Now().Add(10 * time.Second)
			for mcptest.Alive(pids[0]) {
				if time.Now().After(deadline) {
					syscall.Kill(pids[0], syscall.SIGKILL)
					t.Fatalf("the MCP server %d outlived Parley's %s by 10s", pids[0], sig)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestReadmeMCPConfig starts Parley with README's mcp.json exactly as written (npx fetching the
// npm reference servers), checks both servers are ready with the tools README names, and has the
// model call everything__echo. It needs Node.js and the npm registry: it runs where the MCP tests
// run (PARLEY_TEST_MCP_BIN set, as .ci/run does) and must not skip where PARLEY_TEST_REQUIRE_MCP=1.
func TestReadmeMCPConfig(t *testing.T) {
	t.Parallel() // it mostly waits for npx to start the reference servers
	_, npxErr := exec.LookPath("npx")
	if os.Getenv("PARLEY_TEST_MCP_BIN") == "" || npxErr != nil {
		msg := "README's MCP example needs npx and the npm registry; set PARLEY_TEST_MCP_BIN (.ci/run does) to run it"
		if os.Getenv("PARLEY_TEST_REQUIRE_MCP") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- mcp-config -->\\s*```json\\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no ```json block after <!-- mcp-config -->")
	}
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, m[1], 0o600); err != nil {
		t.Fatal(err)
	}
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	// The default settings, as README's command has them: a first npx start that outlasts
	// --mcp-start-timeout goes on in the background (--mcp-install-timeout), so the tools are
	// awaited, within that bound, rather than expected at once.
	// Parley may wait the whole --mcp-start-timeout (30s) before it listens: serveLogged waits 60s.
	url, _ := serveLogged(t, map[string]string{"OPENAI_BASE_URL": hs.URL + "/v1", "OPENAI_API_KEY": "sk-test"},
		"--db", filepath.Join(t.TempDir(), "p.db"), "--mcp-config", path)

	deadline := time.Now().Add(6 * time.Minute)
	for {
		tl := getTools(t, url)
		health := map[string]string{}
		for _, tool := range tl.Tools {
			health[tool.Name] = tool.Server + "/" + tool.Health
		}
		if health["everything__echo"] == "everything/ready" && health["files__read_text_file"] == "files/ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("README's tools are not ready: %v (servers %+v)", health, tl.Servers)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_1", Type: "function",
		Function: parley.FunctionCall{Name: "everything__echo", Arguments: `{"message":"as written"}`}}}})
	session, answer, errs := chatTurn(t, url, "", "openai/gpt-4o", "Echo through the reference server.")
	if len(errs) > 0 || !strings.Contains(answer, "as written") {
		t.Fatalf("answer %q, errors %v", answer, errs)
	}
	validHistory(t, url, session)
}
