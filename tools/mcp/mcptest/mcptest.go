// Package mcptest is a small MCP server for tests that must start a real stdio server process:
// the test binary itself, re-executed. A test package calls Main first thing in its TestMain;
// Command gives the command line that starts the binary as the server.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	envServe    = "PARLEY_MCPTEST_SERVE"
	envPIDFile  = "PARLEY_MCPTEST_PIDFILE"
	envFailFile = "PARLEY_MCPTEST_FAILFILE"
	envLinger   = "PARLEY_MCPTEST_LINGER"
	envJournal  = "PARLEY_MCPTEST_JOURNAL"
)

// Main serves MCP over stdin and stdout, then exits, when the process was started by Command;
// otherwise it returns at once.
func Main() {
	if os.Getenv(envServe) != "1" {
		return
	}
	if f := os.Getenv(envPIDFile); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(fh, os.Getpid())
			fh.Close()
		}
	}
	if f := os.Getenv(envFailFile); f != "" {
		if _, err := os.Stat(f); err == nil {
			fmt.Fprintln(os.Stderr, "mcptest: failing to start, as", f, "exists")
			os.Exit(1)
		}
	}
	err := NewServer().Run(context.Background(), &sdk.StdioTransport{})
	if os.Getenv(envLinger) == "1" {
		time.Sleep(time.Hour) // until a signal ends it
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Options shape the server process.
type Options struct {
	PIDFile  string // when set, gets a line with the process id of every server started
	FailFile string // while this file exists, the server exits at start instead of serving
	// Linger keeps the process alive after its stdin closes, until a signal ends it: a server
	// that only a signal stops.
	Linger bool
	// Journal, when set, is the file where the tools write and read record their calls.
	Journal string
}

// Command is the command, arguments and environment that start this binary as the server.
func Command(o Options) (string, []string, map[string]string) {
	env := map[string]string{envServe: "1"}
	if o.PIDFile != "" {
		env[envPIDFile] = o.PIDFile
	}
	if o.FailFile != "" {
		env[envFailFile] = o.FailFile
	}
	if o.Linger {
		env[envLinger] = "1"
	}
	if o.Journal != "" {
		env[envJournal] = o.Journal
	}
	return os.Args[0], []string{"-test.run=^$"}, env
}

// PIDs reads the process ids written to pidFile.
func PIDs(pidFile string) []int {
	b, _ := os.ReadFile(pidFile)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// Alive reports whether process pid runs (Linux: a zombie, dead but not yet reaped, counts as
// gone).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// Journal reads the journal file: each line is "start <key>" or "end <key>", one per call of the
// write and read tools.
func Journal(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(strings.ReplaceAll(string(b), "start ", "start:"))
}

// journaled is a tool with an effect outside the server: it writes "start <key>" to the journal,
// waits ms milliseconds (only the first time it sees key), writes "end <key>" and answers
// "<verb> <key>". A test kills its caller in the wait and counts the starts.
func journaled(verb string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var a struct {
			Key string
			MS  int
		}
		json.Unmarshal(req.Params.Arguments, &a)
		path := os.Getenv(envJournal)
		seen := false
		for _, line := range Journal(path) {
			seen = seen || line == "start:"+a.Key
		}
		note := func(s string) {
			if fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintln(fh, s)
				fh.Sync()
				fh.Close()
			}
		}
		note("start " + a.Key)
		if !seen {
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		note("end " + a.Key)
		return text(verb + " " + a.Key), nil
	}
}

// NewServer returns the server: tools echo, add, pid, sleep, crash, and the journaled write (no
// hints: it may not run twice), read (read-only: it may) and erase (destructive: it asks for
// approval by default).
func NewServer() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "parley-mcptest", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "echo", Description: "Echoes the text back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ Text string }
			json.Unmarshal(req.Params.Arguments, &a)
			return text("echo: " + a.Text), nil
		})
	srv.AddTool(&sdk.Tool{Name: "add", Description: "Adds two numbers.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ A, B float64 }
			json.Unmarshal(req.Params.Arguments, &a)
			return text(strconv.FormatFloat(a.A+a.B, 'f', -1, 64)), nil
		})
	srv.AddTool(&sdk.Tool{Name: "pid", Description: "Tells the server's process id.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text(strconv.Itoa(os.Getpid())), nil
		})
	srv.AddTool(&sdk.Tool{Name: "sleep", Description: "Waits ms milliseconds.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ MS int }
			json.Unmarshal(req.Params.Arguments, &a)
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return text("slept"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	args := json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"ms":{"type":"integer"}},"required":["key"]}`)
	srv.AddTool(&sdk.Tool{Name: "write", Description: "Writes key to the journal.", InputSchema: args}, journaled("wrote"))
	srv.AddTool(&sdk.Tool{Name: "read", Description: "Reads key from the journal.", InputSchema: args,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, journaled("read"))
	destructive := true
	srv.AddTool(&sdk.Tool{Name: "erase", Description: "Erases key (writes it to the journal).", InputSchema: args,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &destructive}}, journaled("erased"))
	srv.AddTool(&sdk.Tool{Name: "crash", Description: "Exits the server process at once.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	return srv
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}
