// Package tools holds the registry of tools the model may call and runs each call guarded: a
// timeout, panic recovery, argument checks, and results that always reach the model, failures
// included.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/breaker"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/tools/guard"
)

// DefaultTimeout bounds one tool call when no timeout is configured.
const DefaultTimeout = 30 * time.Second

// Registry is a goroutine-safe set of tools, addressed by name. Each tool belongs to a source:
// "" for the tools registered one by one (built-in ones), or a name such as an MCP server's, whose
// whole set Replace swaps when the server's tool list changes.
type Registry struct {
	mu       sync.RWMutex
	tools    map[string]entry
	breakers map[string]*breaker.Breaker // by tool name; kept when a tool is replaced
	// listed is List's answer, kept until the tools change (nil then): every chat that offers
	// all the tools asks for it.
	listed  atomic.Pointer[[]parley.ToolSpec]
	timeout time.Duration
	log     *slog.Logger

	breakerFailures int
	breakerCooldown time.Duration
	now             func() time.Time

	guard   Guard
	stats   statsMap
	observe func(tool, server, outcome string, d time.Duration)
}

type entry struct {
	tool    parley.Tool
	source  string
	checker *guard.Checker // the tool's argument checks
}

// Sourced is implemented by tools that run elsewhere, such as an MCP server's: the name of the
// server is stored with each of the tool's results.
type Sourced interface {
	Server() string
}

// Timed is implemented by tools with a time limit of their own, which then replaces the
// registry's for their calls.
type Timed interface {
	Timeout() time.Duration
}

// RerunSafe is implemented by tools that say whether running a call twice has the same effect as
// running it once (an idempotent or read-only tool). After a crash, a call that was under way when
// the process died is run again only when its tool says so; otherwise the model is told it was
// interrupted.
type RerunSafe interface {
	RerunSafe() bool
}

// RerunSafe reports whether the named tool may run a call again after a crash left it in doubt.
// An unknown tool, or one that does not say, may not.
func (r *Registry) RerunSafe(name string) bool {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return false
	}
	rs, ok := e.tool.(RerunSafe)
	return ok && rs.RerunSafe()
}

// Hinted is implemented by tools whose server says what a call does (MCP's readOnlyHint and
// destructiveHint annotations); the tool approval policy reads them.
type Hinted interface {
	ReadOnly() bool
	Destructive() bool
}

// Hints returns what the named tool's server says of it: read-only, or destructive (false, false
// for a tool that says nothing, or an unknown name).
func (r *Registry) Hints(name string) (readOnly, destructive bool) {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return false, false
	}
	h, ok := e.tool.(Hinted)
	if !ok {
		return false, false
	}
	return h.ReadOnly(), h.Destructive()
}

// Server returns the MCP server of the named tool ("" for a built-in or unknown tool).
func (r *Registry) Server(name string) string {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return ""
	}
	if s, ok := e.tool.(Sourced); ok {
		return s.Server()
	}
	return ""
}

// CheckArgs validates args against the named tool's argument checks (its JSON Schema, made
// strict, and the key and size limits), as a call would be checked before it runs; the error
// says what is wrong. Prompt-injection patterns are not looked for: these are a person's edits.
func (r *Registry) CheckArgs(name string, args []byte) error {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return parley.Errorf(parley.ECNotFound, "unknown tool %q", name)
	}
	obj, err := guard.Decode(args)
	if err != nil {
		return parley.Errorf(parley.ECInvalid, "arguments: not a JSON object")
	}
	if e.checker != nil {
		if err := e.checker.Validate(obj); err != nil {
			return parley.Errorf(parley.ECInvalid, "arguments do not fit the schema of %s: %v", name, err)
		}
	}
	return nil
}

// Option configures a Registry.
type Option func(*Registry)

// WithTimeout bounds every tool call; d <= 0 keeps DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(r *Registry) {
		if d > 0 {
			r.timeout = d
		}
	}
}

// WithBreakers sets the circuit breaker every tool has (seed 003 §5): failures consecutive
// failures open it for cooldown, then one trial call decides. Zero values keep the defaults (3,
// 30s); now may be nil (time.Now).
func WithBreakers(failures int, cooldown time.Duration, now func() time.Time) Option {
	return func(r *Registry) {
		r.breakerFailures, r.breakerCooldown, r.now = failures, cooldown, now
	}
}

// WithLogger sets the logger for tool failures.
func WithLogger(l *slog.Logger) Option {
	return func(r *Registry) {
		if l != nil {
			r.log = l
		}
	}
}

// Tool call outcomes, as WithObserver reports them.
const (
	OutcomeOK      = "ok"      // the tool ran and succeeded
	OutcomeError   = "error"   // the tool ran and failed (an error result, an error or a crash), or the run ended first
	OutcomeTimeout = "timeout" // the tool reached its time limit
	OutcomeRefused = "refused" // not run: unknown tool, bad arguments, injection, breaker open or quota spent
)

// WithObserver reports every call: its tool ("" for a name the registry does not know), the MCP
// server that ran it ("" for a built-in tool), its outcome (Outcome*) and its duration.
func WithObserver(fn func(tool, server, outcome string, d time.Duration)) Option {
	return func(r *Registry) { r.observe = fn }
}

// NewRegistry returns an empty registry.
func NewRegistry(opts ...Option) *Registry {
	r := &Registry{tools: map[string]entry{}, breakers: map[string]*breaker.Breaker{}, timeout: DefaultTimeout, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(r)
	}
	return r
}

// validName is what the OpenAI and Anthropic APIs accept as a function name.
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Register adds t. Its name must be unique and valid for the model APIs, and its parameters a JSON
// Schema object.
func (r *Registry) Register(t parley.Tool) error {
	if err := check(t.Spec()); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name := t.Spec().Name
	if _, ok := r.tools[name]; ok {
		return fmt.Errorf("tool %s: registered twice", name)
	}
	r.tools[name] = entry{tool: t, checker: r.compile(t)}
	r.listed.Store(nil)
	return nil
}

func check(spec parley.ToolSpec) error {
	if !validName.MatchString(spec.Name) {
		return fmt.Errorf("tool name %q: must match %s", spec.Name, validName)
	}
	var schema struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(spec.Parameters, &schema); err != nil || schema.Type != "object" {
		return fmt.Errorf("tool %s: parameters must be a JSON Schema with \"type\": \"object\"", spec.Name)
	}
	return nil
}

// Replace makes ts the tools of source, in place of the ones it had; nil removes them all. The
// swap is atomic: a call sees the old set or the new one. A tool that is invalid, or whose name
// another source holds, is left out, and the error names each one; the others are registered.
func (r *Registry) Replace(source string, ts []parley.Tool) error {
	if source == "" {
		return errors.New("tools: Replace needs a source name")
	}
	var errs []error
	valid := make([]parley.Tool, 0, len(ts))
	for _, t := range ts {
		if err := check(t.Spec()); err != nil {
			errs = append(errs, err)
			continue
		}
		valid = append(valid, t)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listed.Store(nil)
	for name, e := range r.tools {
		if e.source == source {
			delete(r.tools, name)
		}
	}
	for _, t := range valid {
		name := t.Spec().Name
		if e, ok := r.tools[name]; ok {
			if e.source != source {
				errs = append(errs, fmt.Errorf("tool %s of %s: the name is taken by %s", name, source, sourceName(e.source)))
			}
			continue
		}
		r.tools[name] = entry{tool: t, source: source, checker: r.compile(t)}
	}
	return errors.Join(errs...)
}

func sourceName(s string) string {
	if s == "" {
		return "a built-in tool"
	}
	return s
}

// Entry is a registered tool with its source.
type Entry struct {
	parley.ToolSpec
	Source string // "" for tools registered with Register
}

// Entries lists every tool with its source, sorted by name.
func (r *Registry) Entries() []Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Entry, 0, len(r.tools))
	for _, e := range r.tools {
		out = append(out, Entry{ToolSpec: e.tool.Spec(), Source: e.source})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SessionBound is implemented by tools that keep state of the run's stored session.
type SessionBound interface {
	NeedsSession() bool
}

// NeedsSession reports whether the tool called name keeps state of a stored session (false for
// an unknown name).
func (r *Registry) NeedsSession(name string) bool {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return false
	}
	sb, ok := e.tool.(SessionBound)
	return ok && sb.NeedsSession()
}

// List returns the specs of every tool, sorted by name. The slice is shared by every caller until
// the tools change: it must not be changed (an append copies it: it has no spare capacity).
func (r *Registry) List() []parley.ToolSpec {
	if p := r.listed.Load(); p != nil {
		return *p
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	specs := make([]parley.ToolSpec, 0, len(r.tools))
	for _, e := range r.tools {
		specs = append(specs, e.tool.Spec())
	}
	slices.SortFunc(specs, func(a, b parley.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
	// Kept under the read lock: a change of the tools, which takes the write lock, comes after
	// and clears it.
	r.listed.Store(&specs)
	return specs
}

// Specs returns the tools to offer the model: all of them when selected is nil, otherwise exactly
// the selected ones (seed 001's selected_tools; an empty, non-nil list offers none). An unknown
// name is an ECInvalid error naming it. All of them is List's shared slice: it must not be changed.
func (r *Registry) Specs(selected []string) ([]parley.ToolSpec, error) {
	if selected == nil {
		return r.List(), nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	specs := make([]parley.ToolSpec, 0, len(selected))
	seen := map[string]bool{}
	for _, name := range selected {
		e, ok := r.tools[name]
		if !ok {
			return nil, parley.Errorf(parley.ECInvalid, "selected_tools: unknown tool %q", name)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		specs = append(specs, e.tool.Spec())
	}
	return specs, nil
}

// Outcome is the result of one guarded tool call, ready to be stored as a tool message.
type Outcome struct {
	Content    parley.Content
	Success    bool
	ResourceID string
	Server     string // the MCP server that ran the tool; "" for built-in tools
	Latency    time.Duration
	TimedOut   bool // the call reached its time limit
}

// Call runs one tool call with the registry's timeout. It never fails: an unknown tool, arguments
// that are not a JSON object, a tool error, a timeout or a panic all become an unsuccessful Outcome
// whose text tells the model what went wrong. allowed, when non-nil, lists the names the model was
// offered; a call to any other tool is refused.
func (r *Registry) Call(ctx context.Context, call parley.ToolCall, allowed map[string]bool) Outcome {
	start := time.Now()
	name := call.Function.Name
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok || (allowed != nil && !allowed[name]) {
		out := failure("unknown tool %q", name)
		out.Latency = time.Since(start)
		if r.observe != nil {
			tool := ""
			if ok {
				tool = name // a known tool the run did not offer
			}
			r.observe(tool, "", OutcomeRefused, out.Latency)
		}
		return out
	}
	out, ran := r.call(withCallID(ctx, call.ID), e, call)
	if s, ok := e.tool.(Sourced); ok {
		out.Server = s.Server()
	}
	out.Latency = time.Since(start)
	if r.observe != nil {
		outcome := OutcomeRefused
		switch {
		case !ran:
		case out.TimedOut:
			outcome = OutcomeTimeout
		case out.Success:
			outcome = OutcomeOK
		default:
			outcome = OutcomeError
		}
		r.observe(name, out.Server, outcome, out.Latency)
	}
	return out
}

// call runs one call to a known tool; ran reports whether it got past the guards (arguments,
// breaker and quotas) and reached the tool, or the run ended before its turn came.
func (r *Registry) call(ctx context.Context, e entry, call parley.ToolCall) (_ Outcome, ran bool) {
	name := call.Function.Name
	st := r.stats.of(name)
	args := json.RawMessage(call.Function.Arguments)
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if out, ok := r.admit(ctx, e, name, args, st); !ok {
		return out, false
	}
	if ctx.Err() != nil {
		// The run ended before this call's turn came: the tool is not started.
		out, _ := r.ctxFailure(ctx, name, r.timeout)
		return out, true
	}
	report, wait, ok := r.breaker(name).Allow()
	if !ok {
		st.limited.Add(1)
		return failure("%s is switched off for %s after repeated failures (circuit breaker open); answer without it or try later",
			name, wait.Round(time.Second)), false
	}
	if out, ok := r.quota(ctx, name); !ok {
		report(breaker.Ignore)
		st.limited.Add(1)
		return out, false
	}
	start := time.Now()
	out, health := r.run(ctx, e.tool, name, args)
	report(health)
	out.Latency = time.Since(start)
	st.ran(out)
	return out, true
}

// breaker returns the breaker of tool name, created on first use.
func (r *Registry) breaker(name string) *breaker.Breaker {
	r.mu.RLock()
	b, ok := r.breakers[name]
	r.mu.RUnlock()
	if ok {
		return b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok = r.breakers[name]
	if !ok {
		b = breaker.New(r.breakerFailures, r.breakerCooldown, r.now)
		r.breakers[name] = b
	}
	return b
}

// BreakerState is the state of tool name's circuit breaker.
func (r *Registry) BreakerState(name string) breaker.State { return r.breaker(name).State() }

// run calls t with the time limit. Its second result is what the call says of the tool's health:
// an error, a panic or a timeout is a failure; a result, even one marked isError (the tool worked
// and told the model what went wrong), is a success; a call the run cancelled says nothing.
func (r *Registry) run(ctx context.Context, t parley.Tool, name string, args json.RawMessage) (Outcome, breaker.Outcome) {
	timeout := r.timeout
	if tt, ok := t.(Timed); ok && tt.Timeout() > 0 {
		timeout = tt.Timeout()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		res *parley.ToolResult
		err error
	}
	// The tool runs in its own goroutine so that a tool ignoring its context cannot hold the run
	// past the timeout; the buffered channel lets that goroutine finish and exit on its own.
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.ErrorContext(ctx, "tool panicked", "tool", name, "panic", p)
				done <- result{err: errors.New("the tool crashed")}
			}
		}()
		res, err := t.Call(ctx, args)
		done <- result{res, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			if ctx.Err() != nil && errors.Is(res.err, ctx.Err()) {
				return r.ctxFailure(ctx, name, timeout)
			}
			r.log.WarnContext(ctx, "tool failed", "tool", name, "err", res.err)
			return failure("%s failed: %v", name, res.err), breaker.Failure
		}
		if res.res == nil {
			return Outcome{Content: parley.Text(""), Success: true}, breaker.Success
		}
		c := res.res.Content
		if c.IsNull() {
			c = parley.Text("")
		}
		if res.res.IsError {
			c = redactText(c) // a failure's text is error text; a success's is the data asked for
		}
		return Outcome{Content: c, Success: !res.res.IsError, ResourceID: res.res.ResourceID}, breaker.Success
	case <-ctx.Done():
		return r.ctxFailure(ctx, name, timeout)
	}
}

func (r *Registry) ctxFailure(ctx context.Context, name string, timeout time.Duration) (Outcome, breaker.Outcome) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		r.log.WarnContext(ctx, "tool timed out", "tool", name, "timeout", timeout)
		out := failure("%s timed out after %s", name, timeout)
		out.TimedOut = true
		return out, breaker.Failure
	}
	return failure("%s was interrupted: the run was cancelled", name), breaker.Ignore
}

// redactText redacts the text of c (a string, or the text parts of a list).
func redactText(c parley.Content) parley.Content {
	if parts := c.Parts(); parts != nil {
		out := make([]parley.Part, len(parts))
		for i, p := range parts {
			if p.Type == "text" {
				p.Text = redact.String(p.Text)
			}
			out[i] = p
		}
		return parley.Parts(out...)
	}
	return parley.Text(redact.String(c.String()))
}

// failure is an unsuccessful outcome whose text, redacted, tells the model what went wrong.
func failure(format string, args ...any) Outcome {
	return Outcome{Content: parley.Text("error: " + redact.String(fmt.Sprintf(format, args...)))}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// Func adapts a function to parley.Tool.
type Func struct {
	Def parley.ToolSpec
	Fn  func(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error)
	// Idempotent says that a call may run again, after a crash left it in doubt, with no harm.
	Idempotent bool
	// Session says that the tool keeps state of the run's stored session (its todo list, its
	// project's memory, its artifacts): it is not offered to a conversation held outside the
	// store (the OpenAI-compatible API's stateless requests).
	Session bool
}

// NeedsSession reports Session.
func (f *Func) NeedsSession() bool { return f.Session }

// RerunSafe reports Idempotent.
func (f *Func) RerunSafe() bool { return f.Idempotent }

// Spec returns the tool's description.
func (f *Func) Spec() parley.ToolSpec { return f.Def }

// Call runs the function.
func (f *Func) Call(ctx context.Context, args json.RawMessage) (*parley.ToolResult, error) {
	return f.Fn(ctx, args)
}
