package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// inProcess starts an MCP server in this process with the given tools and returns a Server
// connected to it over the SDK's in-memory transports. The server pages its tool list 2 by 2.
func inProcess(t *testing.T, name string, setup func(*sdk.Server)) (*Server, *sdk.Server) {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ServerOptions{PageSize: 2})
	setup(srv)
	ctx, cancel := context.WithCancel(context.Background())
	var st *sdk.InMemoryTransport
	s := New(name, ServerConfig{Command: "unused"}, Options{Transport: func() sdk.Transport {
		ct, serverT := sdk.NewInMemoryTransports()
		st = serverT
		go srv.Run(ctx, st)
		return ct
	}})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := s.Connect(cctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); cancel() })
	return s, srv
}

func textTool(name, desc string, fn func(args map[string]any) (*sdk.CallToolResult, error)) (*sdk.Tool, sdk.ToolHandler) {
	return &sdk.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args map[string]any
			json.Unmarshal(req.Params.Arguments, &args)
			return fn(args)
		}
}

func TestDiscoveryListsEveryPageUnderNamespacedNames(t *testing.T) {
	s, _ := inProcess(t, "files", func(srv *sdk.Server) {
		for i := range 5 {
			srv.AddTool(textTool(fmt.Sprintf("tool%d", i), fmt.Sprintf("tool number %d", i), func(map[string]any) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{}, nil
			}))
		}
		srv.AddTool(textTool("read.file/v2", "", func(map[string]any) (*sdk.CallToolResult, error) { return &sdk.CallToolResult{}, nil }))
	})
	tools := s.Tools()
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Spec().Name)
	}
	want := "files__read_file_v2_" // dots and slashes replaced, with a hash suffix that keeps it unique
	if len(tools) != 6 || !strings.HasPrefix(names[0], want) || names[1] != "files__tool0" || names[5] != "files__tool4" {
		t.Fatalf("tools %v (want 6 over 3 pages)", names)
	}
	if tools[1].Spec().Description != "tool number 0" || !strings.Contains(string(tools[1].Spec().Parameters), `"x"`) || tools[1].Server() != "files" {
		t.Fatalf("spec %+v", tools[1].Spec())
	}
}

// A server's readOnlyHint or idempotentHint makes a tool safe to run again after a crash; no hint,
// or a destructive tool, does not.
func TestRerunSafeFollowsTheServersHints(t *testing.T) {
	s, _ := inProcess(t, "hints", func(srv *sdk.Server) {
		for name, ann := range map[string]*sdk.ToolAnnotations{
			"plain": nil, "read": {ReadOnlyHint: true}, "idem": {IdempotentHint: true}, "write": {ReadOnlyHint: false},
		} {
			tool, h := textTool(name, name, func(map[string]any) (*sdk.CallToolResult, error) { return &sdk.CallToolResult{}, nil })
			tool.Annotations = ann
			srv.AddTool(tool, h)
		}
	})
	got := map[string]bool{}
	for _, tl := range s.Tools() {
		got[tl.Spec().Name] = tl.RerunSafe()
	}
	want := map[string]bool{"hints__plain": false, "hints__read": true, "hints__idem": true, "hints__write": false}
	if !maps.Equal(got, want) {
		t.Fatalf("RerunSafe by tool: %v, want %v", got, want)
	}
}

func TestToolNamesNeverClash(t *testing.T) {
	long := strings.Repeat("a", 80)
	for _, pair := range [][4]string{
		{"one", "search", "two", "search"},
		{"s", long + "x", "s", long + "y"},
		{"s", "a.b", "s", "a_b"},
	} {
		a, b := ToolName(pair[0], pair[1]), ToolName(pair[2], pair[3])
		if a == b || len(a) > 64 || len(b) > 64 {
			t.Errorf("%v: %q and %q", pair, a, b)
		}
	}
	if got := ToolName("fs", "read_file"); got != "fs__read_file" {
		t.Errorf("a plain name changed: %q", got)
	}
}

func TestCallMapsResults(t *testing.T) {
	png := []byte("\x89PNG\r\n")
	s, _ := inProcess(t, "ev", func(srv *sdk.Server) {
		srv.AddTool(textTool("echo", "", func(a map[string]any) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + fmt.Sprint(a["x"])}}}, nil
		}))
		srv.AddTool(textTool("picture", "", func(map[string]any) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "here"}, &sdk.ImageContent{MIMEType: "image/png", Data: png}}}, nil
		}))
		srv.AddTool(textTool("resource", "", func(map[string]any) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "file text"}},
				&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///b.bin", MIMEType: "application/octet-stream", Blob: []byte{1, 2, 3}}},
				&sdk.ResourceLink{URI: "file:///c", Name: "c"}}}, nil
		}))
		srv.AddTool(textTool("structured", "", func(map[string]any) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{StructuredContent: map[string]any{"temp": 18}}, nil
		}))
		srv.AddTool(textTool("fails", "", func(map[string]any) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no such file"}}}, nil
		}))
	})
	byName := map[string]*Tool{}
	for _, tl := range s.Tools() {
		byName[tl.Spec().Name] = tl
	}
	ctx := context.Background()
	for _, tt := range []struct {
		tool, args, want string
		isErr            bool
	}{
		{"ev__echo", `{"x":"héllo"}`, `"echo: héllo"`, false},
		{"ev__picture", `{}`, `[{"type":"text","text":"here"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0K"}}]`, false},
		{"ev__resource", `{}`, `"file text\n[resource file:///b.bin: application/octet-stream, 3 bytes]\n[resource link file:///c: c]"`, false},
		{"ev__structured", `{}`, `"{\"temp\":18}"`, false},
		{"ev__fails", `{}`, `"no such file"`, true},
		{"ev__echo", `[1,2]`, `"error: the arguments are not a JSON object"`, true},
	} {
		res, err := byName[tt.tool].Call(ctx, json.RawMessage(tt.args))
		if err != nil {
			t.Fatalf("%s: %v", tt.tool, err)
		}
		got, _ := json.Marshal(res.Content)
		if string(got) != tt.want || res.IsError != tt.isErr {
			t.Errorf("%s: %s (error %v), want %s (error %v)", tt.tool, got, res.IsError, tt.want, tt.isErr)
		}
	}
}

func TestCancellingACallCancelsItOnTheServer(t *testing.T) {
	cancelled := make(chan struct{})
	s, _ := inProcess(t, "slow", func(srv *sdk.Server) {
		srv.AddTool(&sdk.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				select {
				case <-ctx.Done():
					close(cancelled)
					return nil, ctx.Err()
				case <-time.After(30 * time.Second):
					return &sdk.CallToolResult{}, nil
				}
			})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := s.Tools()[0].Call(ctx, json.RawMessage(`{}`))
	if err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's handler never saw the cancellation")
	}
}

func TestParseConfig(t *testing.T) {
	good := `{"mcpServers": {
		"everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"], "env": {"A": "1"}},
		"remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer x"}},
		"old": {"type": "sse", "url": "http://localhost:3001/sse"},
		"off": {"command": "x", "disabled": true}}}`
	cfg, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if cfg["everything"].Transport() != "stdio" || cfg["remote"].Transport() != "http" || cfg["old"].Transport() != "sse" || !cfg["off"].Disabled {
		t.Fatalf("%+v", cfg)
	}
	for _, bad := range []string{
		`{"mcpServers": {"x": {}}}`,
		`{"mcpServers": {"x": {"command": "a", "url": "http://b"}}}`,
		`{"mcpServers": {"x": {"url": "ftp://b"}}}`,
		`{"mcpServers": {"x": {"type": "carrier-pigeon", "url": "http://b"}}}`,
		`{"mcpServers": {"bad name!": {"command": "a"}}}`,
		`{"mcpServers": {"x": {"command": "a", "cwd": "/"}}}`,
		`{"mcpServers": {"x": {"command": "a", "timeout": -1}}}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestConfiguredTimeoutIsTheToolsOwn(t *testing.T) {
	s := New("x", ServerConfig{Command: "unused", Timeout: 7}, Options{})
	tool := &Tool{server: s, remote: "r"}
	if tool.Timeout() != 7*time.Second || tool.Server() != "x" {
		t.Fatalf("timeout %v server %q", tool.Timeout(), tool.Server())
	}
	if (&Tool{server: New("y", ServerConfig{Command: "unused"}, Options{})}).Timeout() != 0 {
		t.Fatal("a server without a timeout gave its tools one")
	}
}
