// Package mcp makes the tools of MCP servers Parley tools, on the official MCP Go SDK. A Server
// is one configured server: it connects over stdio, streamable HTTP or SSE, lists the server's
// tools (all pages) under names namespaced by the server, keeps the list fresh on
// tools/list_changed, and calls them with the model's arguments, mapping each result (text,
// images, embedded resources, structured content, isError) into a parley.ToolResult.
package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/breaker"
	"github.com/parleyhq/parley/tracing"
)

// ServerConfig is one entry of the common "mcpServers" JSON shape (Claude Desktop, Cursor, VS
// Code): a command with args and env for stdio, or a url with headers for HTTP.
type ServerConfig struct {
	Command  string            `json:"command,omitempty" yaml:"command"`
	Args     []string          `json:"args,omitempty" yaml:"args"`
	Env      map[string]string `json:"env,omitempty" yaml:"env"`
	URL      string            `json:"url,omitempty" yaml:"url"`
	Headers  map[string]string `json:"headers,omitempty" yaml:"headers"`
	Type     string            `json:"type,omitempty" yaml:"type"` // "stdio", "http" (streamable HTTP) or "sse"; inferred when empty
	Disabled bool              `json:"disabled,omitempty" yaml:"disabled"`
	// Timeout is the time limit of one call to this server's tools, in seconds, in place of
	// Parley's --tool-timeout; 0 keeps that.
	Timeout int `json:"timeout,omitempty" yaml:"timeout"`
}

// Transport returns the kind of transport: the configured type, or stdio for a command and
// streamable HTTP for a url.
func (c ServerConfig) Transport() string {
	switch {
	case c.Type == "streamable-http" || c.Type == "streamableHttp":
		return "http"
	case c.Type != "":
		return c.Type
	case c.Command != "":
		return "stdio"
	}
	return "http"
}

// Installs reports whether the server is started through a package runner (npx, uvx, docker, …)
// whose first start may download the server before it runs: its first start gets
// Options.InstallTimeout instead of StartTimeout.
func (c ServerConfig) Installs() bool {
	if c.Transport() != "stdio" {
		return false
	}
	switch strings.TrimSuffix(filepath.Base(c.Command), ".cmd") {
	case "npx", "pnpx", "pnpm", "yarn", "bunx", "bun", "uvx", "uv", "pipx", "deno", "docker", "podman":
		return true
	}
	return false
}

// Validate checks the entry of server name.
func (c ServerConfig) Validate(name string) error {
	if !validServer.MatchString(name) {
		return fmt.Errorf("mcp server %q: a name is letters, digits, '-' and '_' (at most 32)", name)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("mcp server %q: timeout must not be negative", name)
	}
	switch t := c.Transport(); t {
	case "stdio":
		if c.Command == "" || c.URL != "" {
			return fmt.Errorf("mcp server %q: stdio needs a command and no url", name)
		}
	case "http", "sse":
		if c.URL == "" || c.Command != "" {
			return fmt.Errorf("mcp server %q: %s needs a url and no command", name, t)
		}
		if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
			return fmt.Errorf("mcp server %q: url must be http:// or https://", name)
		}
	default:
		return fmt.Errorf("mcp server %q: type must be stdio, http or sse, not %q", name, c.Type)
	}
	return nil
}

var validServer = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,32}$`)

// ParseConfig reads {"mcpServers": {name: ServerConfig}}.
func ParseConfig(data []byte) (map[string]ServerConfig, error) {
	var w struct {
		MCPServers map[string]ServerConfig `json:"mcpServers"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("mcp config: %v", err)
	}
	for name, c := range w.MCPServers {
		if err := c.Validate(name); err != nil {
			return nil, err
		}
	}
	return w.MCPServers, nil
}

// ToolName is the name the model sees for tool of server: "<server>__<tool>", with characters the
// model APIs refuse replaced by '_', and cut to 64 with a hash of the whole kept, so that two
// servers' tools never share a name.
func ToolName(server, tool string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
				return r
			}
			return '_'
		}, s)
	}
	name := clean(server) + "__" + clean(tool)
	if len(name) <= 64 && clean(tool) == tool {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	return name[:min(len(name), 64-len(suffix))] + suffix
}

// Options configure a Server.
type Options struct {
	HTTPClient *http.Client // for http and sse; nil: a client without a timeout (calls have their own)
	// Transport, when set, is used instead of the configured one (tests: in-memory transports).
	Transport func() sdk.Transport
	// OnToolsChanged is called after the tool list was refreshed.
	OnToolsChanged func()
	Logger         *slog.Logger // nil: discard

	// Supervision (Run). Zero values take the defaults below.
	StartTimeout time.Duration // one start: connecting, initializing and listing the tools
	// InstallTimeout replaces StartTimeout, when longer, until the first successful start of a
	// server started through a package runner (ServerConfig.Installs), which may first download
	// it: `npx -y @modelcontextprotocol/server-everything` fetches its package on first use.
	InstallTimeout  time.Duration
	RetryBase       time.Duration // first wait before a restart; it doubles per failed start, with jitter
	RetryMax        time.Duration // longest wait between restarts
	BreakerFailures int           // failed starts in a row that open the server's breaker
	BreakerCooldown time.Duration // how long an open breaker holds off the next start
	Now             func() time.Time
}

// Supervision defaults.
const (
	DefaultStartTimeout   = 30 * time.Second
	DefaultInstallTimeout = 5 * time.Minute
	DefaultRetryBase      = 500 * time.Millisecond
	DefaultRetryMax       = 30 * time.Second
)

// Server is one MCP server and its tools. Its methods are safe for concurrent use.
type Server struct {
	name    string
	cfg     ServerConfig
	opts    Options
	breaker *breaker.Breaker
	started chan struct{} // closed when Run's first start has succeeded or failed
	refresh chan struct{} // tools/list_changed was received; Run refreshes the list

	mu       sync.Mutex
	session  *sdk.ClientSession
	endCtx   context.CancelFunc // ends the context the current session's connection lives in
	cmd      *exec.Cmd          // the stdio process of the current session
	tools    []*Tool
	state    State
	since    time.Time
	lastErr  string
	restarts int
}

// New returns a Server for the configured entry; Run (or Connect) starts it.
func New(name string, cfg ServerConfig, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.InstallTimeout <= 0 {
		opts.InstallTimeout = DefaultInstallTimeout
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = DefaultRetryBase
	}
	if opts.RetryMax < opts.RetryBase {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryBase)
	}
	state := StateStarting
	if cfg.Disabled {
		state = StateDisabled
	}
	return &Server{name: name, cfg: cfg, opts: opts, started: make(chan struct{}), refresh: make(chan struct{}, 1),
		breaker: breaker.New(opts.BreakerFailures, opts.BreakerCooldown, opts.Now), state: state, since: opts.Now()}
}

// Name is the server's configured name.
func (s *Server) Name() string { return s.name }

func (s *Server) transport() (sdk.Transport, error) {
	if s.opts.Transport != nil {
		return s.opts.Transport(), nil
	}
	hc := s.opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	if len(s.cfg.Headers) > 0 {
		hc = &http.Client{Transport: headerTransport{base: hc.Transport, headers: s.cfg.Headers}, Timeout: hc.Timeout}
	}
	// A tool call's requests carry its trace on (traceparent), with tracing on.
	hc = &http.Client{Transport: tracing.Transport(hc.Transport), Timeout: hc.Timeout, Jar: hc.Jar, CheckRedirect: hc.CheckRedirect}
	switch s.cfg.Transport() {
	case "stdio":
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env = os.Environ()
		for k, v := range s.cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stderr = nil // a server's stderr is its own log; it is not read
		setProcAttr(cmd)
		s.mu.Lock()
		s.cmd = cmd
		s.mu.Unlock()
		return &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
	case "sse":
		return &sdk.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc}, nil
	case "http":
		return &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc}, nil
	}
	return nil, fmt.Errorf("mcp server %q: unknown transport", s.name)
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Connect starts the server (or opens the connection), initializes the session and lists its
// tools. ctx bounds the start; the session outlives it until Close.
func (s *Server) Connect(ctx context.Context) error {
	s.endSession(nil)
	t, err := s.transport()
	if err != nil {
		return err
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "parley", Version: "dev"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			// The handler runs on the session's reader: Run refreshes the list.
			select {
			case s.refresh <- struct{}{}:
			default: // a refresh is already due
			}
		},
	})
	// The connection lives in a context of its own (the SSE transport's event stream is bound to
	// the context it was opened with); ctx bounds only the start, until Connect returns.
	sessCtx, endCtx := context.WithCancel(context.WithoutCancel(ctx))
	stopBound := context.AfterFunc(ctx, endCtx)
	session, err := client.Connect(sessCtx, t, nil)
	if err != nil {
		endCtx()
		s.reap()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("mcp server %q: connecting: %w", s.name, err)
	}
	s.mu.Lock()
	s.session, s.endCtx = session, endCtx
	s.mu.Unlock()
	err = s.Refresh(ctx)
	if !stopBound() && err == nil {
		err = ctx.Err() // ctx ended as the start finished: the connection is cut
	}
	if err != nil {
		s.drop(session)
		return err
	}
	return nil
}

// Refresh lists the server's tools again, every page.
func (s *Server) Refresh(ctx context.Context) error {
	s.mu.Lock()
	session := s.session
	s.mu.Unlock()
	if session == nil {
		return fmt.Errorf("mcp server %q: not connected", s.name)
	}
	var tools []*Tool
	seen := map[string]bool{}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("mcp server %q: listing tools: %w", s.name, err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = []byte(`{"type":"object","properties":{}}`)
		}
		name := ToolName(s.name, t.Name)
		if seen[name] {
			continue
		}
		seen[name] = true
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		// The server's own hints say whether a call may run twice: read-only tools, and tools whose
		// repeated calls have no further effect.
		rerun := t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
		// And whether a call needs a person's approval: a destructive tool asks by default, a
		// read-only one runs (package approval). MCP's destructiveHint defaults to true, but
		// only a server that says so marks a tool destructive here: most say nothing.
		readOnly := t.Annotations != nil && t.Annotations.ReadOnlyHint
		destructive := !readOnly && t.Annotations != nil && t.Annotations.DestructiveHint != nil && *t.Annotations.DestructiveHint
		tools = append(tools, &Tool{server: s, remote: t.Name, rerun: rerun, readOnly: readOnly, destructive: destructive,
			spec: parley.ToolSpec{Name: name, Description: desc, Parameters: schema}})
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].spec.Name < tools[j].spec.Name })
	s.mu.Lock()
	s.tools = tools
	s.mu.Unlock()
	if s.opts.OnToolsChanged != nil {
		s.opts.OnToolsChanged()
	}
	return nil
}

// Tools returns the server's tools as last listed.
func (s *Server) Tools() []*Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Tool(nil), s.tools...)
}

// Close ends the session; a stdio server's process is stopped (stdin closed, then SIGTERM, then
// SIGKILL), and with it whatever it started.
func (s *Server) Close() error { return s.endSession(nil) }

// drop ends session if it is still the current one: after it broke, or to make Run restart.
func (s *Server) drop(session *sdk.ClientSession) { s.endSession(session) }

// endSession ends the current session (only if it is only, when only is not nil): it closes the
// session, ends its connection's context and stops what is left of its process group.
func (s *Server) endSession(only *sdk.ClientSession) error {
	s.mu.Lock()
	session, endCtx := s.session, s.endCtx
	if only != nil && session != only {
		s.mu.Unlock()
		return nil // a newer session is current; it is not this caller's to end
	}
	s.session, s.endCtx = nil, nil
	s.mu.Unlock()
	var err error
	if session != nil {
		err = session.Close()
		endCtx()
	}
	s.reap()
	return err
}

// reap kills what is left of the current stdio process's group, and forgets the process.
func (s *Server) reap() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		killGroup(cmd)
	}
}

// PID is the process id of the server's current stdio process, 0 when there is none.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Tool is one tool of an MCP server. It implements parley.Tool.
type Tool struct {
	server *Server
	remote string // the name the server knows
	spec   parley.ToolSpec
	rerun  bool // the server marks the tool read-only or idempotent

	readOnly, destructive bool // the server's readOnlyHint, and destructiveHint (true) on a tool not read-only
}

// ReadOnly reports whether the server marks the tool read-only (readOnlyHint).
func (t *Tool) ReadOnly() bool { return t.readOnly }

// Destructive reports whether the server marks the tool destructive (destructiveHint true) and
// not read-only.
func (t *Tool) Destructive() bool { return t.destructive }

var _ parley.Tool = (*Tool)(nil)

// Spec is the tool as the model sees it.
func (t *Tool) Spec() parley.ToolSpec { return t.spec }

// RerunSafe reports whether the server marks the tool read-only or idempotent (MCP's
// readOnlyHint and idempotentHint annotations).
func (t *Tool) RerunSafe() bool { return t.rerun }

// Server is the name of the tool's server.
func (t *Tool) Server() string { return t.server.name }

// Timeout is the server's configured time limit of one call; 0 when none is set.
func (t *Tool) Timeout() time.Duration { return time.Duration(t.server.cfg.Timeout) * time.Second }

// Call calls the tool. ctx bounds it: cancelling ctx cancels the request on the server.
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
	t.server.mu.Lock()
	session, state := t.server.session, t.server.state
	t.server.mu.Unlock()
	if session == nil {
		return nil, fmt.Errorf("mcp server %s is unavailable (%s)", t.server.name, state)
	}
	var arguments map[string]any
	if len(args) > 0 {
		if err := json.Unmarshal(args, &arguments); err != nil {
			return &parley.ToolResult{Content: parley.Text("error: the arguments are not a JSON object"), IsError: true}, nil
		}
	}
	ctx, span := tracing.Tracer().Start(ctx, "tools/call "+t.remote, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.MCPMethod.String("tools/call"), tracing.GenAIOperation.String("execute_tool"),
			tracing.GenAIToolName.String(t.remote), tracing.MCPServer.String(t.server.name)))
	defer span.End()
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: arguments})
	if err == nil && res.IsError {
		span.SetStatus(codes.Error, "tool_error")
		span.SetAttributes(tracing.ErrorType.String("tool_error"))
	} else if err != nil {
		span.SetStatus(codes.Error, "mcp_error")
		span.SetAttributes(tracing.ErrorType.String("mcp_error"))
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing) {
			// The connection is gone: end the session so that Run starts a new one.
			t.server.drop(session)
			return nil, fmt.Errorf("mcp server %s: the connection was lost; it is being restarted: %w", t.server.name, err)
		}
		return nil, fmt.Errorf("mcp server %s: %w", t.server.name, err)
	}
	return Result(res), nil
}

// Result maps an MCP tool result into what the model sees: text as text, images as image parts
// (data URLs), embedded text resources as their text, other resources and links as a line naming
// them, and the structured content as JSON when there is no other content. isError marks the
// result failed.
func Result(res *sdk.CallToolResult) *parley.ToolResult {
	var parts []parley.Part
	text := func(s string) { parts = append(parts, parley.Part{Type: "text", Text: s}) }
	images := false
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			text(c.Text)
		case *sdk.ImageContent:
			images = true
			parts = append(parts, parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{
				URL: "data:" + c.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(c.Data)}})
		case *sdk.AudioContent:
			text(fmt.Sprintf("[audio: %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.EmbeddedResource:
			if r := c.Resource; r != nil {
				if r.Text != "" {
					text(r.Text)
				} else {
					text(fmt.Sprintf("[resource %s: %s, %d bytes]", r.URI, r.MIMEType, len(r.Blob)))
				}
			}
		case *sdk.ResourceLink:
			text(fmt.Sprintf("[resource link %s: %s]", c.URI, c.Name))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			text(string(b))
		}
	}
	out := &parley.ToolResult{IsError: res.IsError}
	switch {
	case images:
		out.Content = parley.Parts(parts...)
	default:
		var b strings.Builder
		for i, p := range parts {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
		out.Content = parley.Text(b.String())
	}
	return out
}
