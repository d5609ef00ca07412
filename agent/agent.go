// Package agent runs the tool-calling loop of one chat turn (seed 000, "Tool Call Loop Process"):
// call the model with the session's history; if it asks for tools, store its message, run the
// tools in parallel (bounded, each with a timeout), store each result, and call the model again;
// stop when it answers without tools or after MaxIterations model calls.
//
// Everything is stored before the event that announces it is emitted, so a client that saw an
// event finds its message in the store, even after a crash.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/llmctx"
	"github.com/parleyhq/parley/tools"
	"go.opentelemetry.io/otel/trace"
)

// Defaults for a zero Config.
const (
	DefaultMaxIterations    = 10
	DefaultMaxParallelTools = 4
	// storeTimeout bounds the writes made after a run was cancelled, which cannot use the run's
	// own context.
	storeTimeout = 10 * time.Second
)

// Config wires an Agent.
type Config struct {
	Store parley.Store
	// History reads a session's model view before each model call; nil reads Store. A
	// historycache.Cache in front of Store reads only the messages stored since its last read.
	History interface {
		ModelHistory(ctx context.Context, sessionID string) ([]parley.Message, error)
	}
	// Resolve maps a requested model name ("" for the default) to its provider and the model name
	// that provider knows.
	Resolve func(model string) (parley.Provider, string, error)
	// ModelTimeout bounds one model call, its whole stream included (0: no bound but the run's).
	ModelTimeout time.Duration
	Tools        *tools.Registry
	// MaxIterations bounds the model calls of one run (seed 000's max_iterations).
	MaxIterations int
	// MaxParallelTools bounds the tool calls of one model response that run at once.
	MaxParallelTools int
	// MaxToolCalls bounds the tool calls of one run, all model responses together (seed 003 §9's
	// checkMaxToolCalls); the calls past it are answered with an error result and not run.
	// 0: no bound.
	MaxToolCalls int
	// Attachments, when set, replaces the file references of the history (the "file" parts of
	// user messages) by the files' content before each model call (files.Service.Expand).
	Attachments interface {
		Expand(ctx context.Context, msgs []parley.Message) ([]parley.Message, error)
	}
	// ToolHistoryRounds and SystemPrompt shape the history sent to the model (package llmctx).
	ToolHistoryRounds int
	SystemPrompt      string
	// TraceContent puts message content (the messages sent, the answer, tool arguments and
	// results) in the model and tool call spans; without it they hold ids, names, models and
	// token counts only.
	TraceContent bool
	// SessionPrompt, when set, returns what the session adds to SystemPrompt (its project's
	// instructions and memory, package workspace), read again before each model call; "" adds
	// nothing. An error ends the run. sess is the session when the run's caller knows it
	// (Input.Session, for the first model call), nil when it is to be read.
	SessionPrompt func(ctx context.Context, sessionID string, sess *parley.Session) (string, error)
	// Approvals decides which tool calls wait for the session owner's approval and which are
	// refused (issue 23); nil runs every call.
	Approvals *approval.Resolver
	// ApprovalTimeout is how long a call waits for a decision before it is denied (default
	// DefaultApprovalTimeout).
	ApprovalTimeout time.Duration
	// Metrics records each model call; nil records nothing.
	Metrics Metrics
	Log     *slog.Logger
	Now     func() time.Time
}

// Metrics records model calls.
type Metrics interface {
	// ModelCall records one call of model ("provider/model"): whether it failed, its duration,
	// the time to its first output (0: none came) and the usage it reported (nil: none).
	ModelCall(model string, failed bool, d, ttft time.Duration, u *parley.Usage)
}

// Input is one run's request.
type Input struct {
	SessionID string
	RunID     string
	Model     string
	// SelectedTools restricts the tools offered to the model (seed 001); nil offers all.
	SelectedTools []string
	// User is who the run acts for: its tool calls count against that user's quota.
	User string
	// Gate, when set, is called before each step (each model call and each batch of tool
	// calls): it waits while the run is paused, and an error from it ends the run.
	Gate func(ctx context.Context) error
	// AwaitApproval, when set, holds the run until check reports that its pending approvals are
	// decided (runs.Run.AwaitApproval); without it, a call that needs approval is refused.
	AwaitApproval func(ctx context.Context, until time.Time, check func(context.Context) (bool, error)) error
	// Begun, when set, waits until the run's beginning (the user's message) is durable, and
	// returns the error of that write: the run was started while it was being written
	// (runs.Manager.Launch). The first model call is made meanwhile; nothing is stored before
	// Begun returns, and nothing at all when it returns an error.
	Begun func() error
	// History, when set, is the model view the first model call is sent (the caller knows it: a
	// new session's is its user message) instead of one read from History; the agent may reuse
	// its array. Later calls read it again.
	History []parley.Message
	// Session, when set, is the session as the caller just wrote or read it: the first model
	// call takes what the session adds to the system prompt from it (SessionPrompt) instead of
	// reading it again.
	Session *parley.Session
	// StoreWithEnd, when set, may take the run's answer (its last assistant message, after which
	// Run returns) to be stored with the run's end in one write (runs.Run.StoreWithEnd): the run
	// then announces it (its record event) once stored, and calls stored with it first. When it
	// reports false, or is not set, the agent stores and announces the answer itself.
	StoreWithEnd func(msg *parley.Message, stored func(*parley.Message)) bool
	// Run, when set, gives Gate, AwaitApproval, Begun and StoreWithEnd at once (a *runs.Run has
	// all four), without a method value made for each; a func field that is set wins over it.
	Run RunHooks
}

// RunHooks is what a run offers its loop (Input.Run): runs.Run's methods of the same names.
type RunHooks interface {
	Gate(ctx context.Context) error
	AwaitApproval(ctx context.Context, until time.Time, check func(context.Context) (bool, error)) error
	Begun() error
	StoreWithEnd(msg *parley.Message, stored func(*parley.Message)) bool
}

// Result is how a run ended.
type Result struct {
	Final        *parley.Message // the last assistant message stored, if any
	FinishReason string          // parley.FinishStop, FinishMaxIterations, ...
	Iterations   int             // model calls made
	Usage        parley.Usage    // summed over the model calls
}

// Agent runs chat turns. It is safe for concurrent use.
type Agent struct {
	cfg Config
	// sessionless: the conversation is held outside the store (WithStore), so the tools that
	// keep state of a stored session are not offered.
	sessionless bool
}

// New returns an Agent; zero Config fields take their defaults.
func New(cfg Config) *Agent {
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = DefaultMaxIterations
	}
	if cfg.MaxParallelTools <= 0 {
		cfg.MaxParallelTools = DefaultMaxParallelTools
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tools == nil {
		cfg.Tools = tools.NewRegistry()
	}
	if cfg.History == nil {
		cfg.History = cfg.Store
	}
	return &Agent{cfg: cfg}
}

// WithStore returns an Agent configured as a, except that it reads and writes conversations in
// st (both the history it sends the model and what it stores). The OpenAI-compatible API runs
// stateless requests this way, on a conversation held in memory for the one request.
func (a *Agent) WithStore(st parley.Store) *Agent {
	cfg := a.cfg
	cfg.Store, cfg.History = st, st
	// A conversation outside the store belongs to no project and names no stored file: nothing
	// of the workspace is read for it (and another user's file could not be named through it).
	cfg.SessionPrompt, cfg.Attachments = nil, nil
	return &Agent{cfg: cfg, sessionless: true}
}

// MaxIterationsText is the answer stored when the loop stops at MaxIterations.
func MaxIterationsText(n int) string {
	return fmt.Sprintf("I stopped after %d rounds of tool calls (the max_iterations limit) without reaching a final answer.", n)
}

// Run runs the loop for the user message already stored in the session. emit receives the run's
// events (chunk, reasoning, record, tool_calls_start, tool_call, tool_result, usage); it may be
// called from several goroutines, one event at a time. A cancelled ctx ends the run with an
// ECCanceled error after storing what was already done: partial text, and a result for every tool
// call that was started.
func (a *Agent) Run(ctx context.Context, in Input, emit func(parley.Event)) (*Result, error) {
	t, err := a.prepare(&in, emit)
	if err != nil {
		return nil, err
	}
	return a.loop(ctx, &in, t, &Result{})
}

// turn is what one run's loop needs, resolved once.
type turn struct {
	prov    parley.Provider
	model   string
	specs   []parley.ToolSpec
	allowed map[string]bool    // the names of specs, made when the model first calls a tool (allowedNames)
	emit    func(parley.Event) // safe for concurrent use: send
	emitMu  sync.Mutex
	to      func(parley.Event) // the run's emit
}

// send emits ev, one event at a time.
func (t *turn) send(ev parley.Event) {
	t.emitMu.Lock()
	defer t.emitMu.Unlock()
	t.to(ev)
}

// allowedNames returns the names of the tools offered, as a set: what the registry lets the
// model call. Most runs never call a tool, so it is made at the first call. The run's goroutine
// calls it.
func (t *turn) allowedNames() map[string]bool {
	if t.allowed == nil {
		t.allowed = make(map[string]bool, len(t.specs))
		for _, s := range t.specs {
			t.allowed[s.Name] = true
		}
	}
	return t.allowed
}

func (a *Agent) prepare(in *Input, emit func(parley.Event)) (*turn, error) {
	t := &turn{to: emit}
	t.emit = t.send
	var err error
	if t.prov, t.model, err = a.cfg.Resolve(in.Model); err != nil {
		return nil, err
	}
	if t.specs, err = a.cfg.Tools.Specs(in.SelectedTools); err != nil {
		return nil, err
	}
	if a.sessionless {
		if t.specs, err = withoutSessionTools(a.cfg.Tools, t.specs, in.SelectedTools != nil); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// withoutSessionTools drops the tools that keep state of a stored session (todos, memory,
// artifacts) from specs: a conversation held outside the store has no session for them. Named
// explicitly (named is true), such a tool is an ECInvalid error saying why.
func withoutSessionTools(reg *tools.Registry, specs []parley.ToolSpec, named bool) ([]parley.ToolSpec, error) {
	out := specs[:0:0]
	for _, s := range specs {
		if !reg.NeedsSession(s.Name) {
			out = append(out, s)
			continue
		}
		if named {
			return nil, parley.Errorf(parley.ECInvalid, "tool %q keeps state of a stored session: name a session to use it", s.Name)
		}
	}
	return out, nil
}

// loop calls the model and runs the tools it asks for until it answers, from the history as the
// store holds it.
//
// Its frame, and callModel's, stay under the model's read for a whole streamed answer: they
// keep only what the call needs, and what comes before and after a call is done by functions of
// their own (nextCall, answered, maxIterations). A run's stack comes back to 8 KiB after a
// collection only if, at rest, it uses less than a quarter of 16 KiB less the 800 bytes the
// runtime keeps free (issue 25: memory per active stream).
func (a *Agent) loop(ctx context.Context, in *Input, t *turn, res *Result) (*Result, error) {
	st := loopState{waitBegun: in.Begun != nil || in.Run != nil}
	for res.Iterations < a.cfg.MaxIterations {
		c, err := a.nextCall(ctx, in, t, res)
		if err != nil {
			return res, err
		}
		c.resp, c.answeredBy, c.ttft, c.err = a.callModel(c.ctx, t.prov, c.req, t.emit)
		if done, err := a.answered(ctx, in, t, res, &st, c); done {
			return res, err
		}
	}
	return a.maxIterations(ctx, in, t, res)
}

// loopState is what loop carries from one model call to the next.
type loopState struct {
	waitBegun bool // the run's beginning may not be durable yet (Input.Begun)
	toolCalls int  // calls run so far, against MaxToolCalls
}

// modelCall is one of loop's model calls: what it sends, and what it got.
type modelCall struct {
	ctx   context.Context // the call's, with its span
	span  trace.Span
	req   *parley.ChatRequest
	start time.Time

	resp       *parley.Response
	answeredBy string
	ttft       time.Duration
	err        error
}

// nextCall starts loop's next model call: it waits at the step's gate, counts the iteration, and
// builds the request from the history as the store holds it (or as the caller knew it, for the
// first call).
//
//go:noinline
func (a *Agent) nextCall(ctx context.Context, in *Input, t *turn, res *Result) (*modelCall, error) {
	if err := in.gate(ctx); err != nil {
		return nil, a.canceledOr(ctx, err)
	}
	res.Iterations++
	history := in.History
	if history == nil {
		var err error
		if history, err = a.cfg.History.ModelHistory(ctx, in.SessionID); err != nil {
			return nil, a.canceledOr(ctx, err)
		}
	}
	system, err := a.systemPrompt(ctx, in.SessionID, in.Session)
	if err != nil {
		return nil, a.canceledOr(ctx, err)
	}
	// What the caller knew holds for the first call only: the next ones read the store.
	in.History, in.Session = nil, nil
	msgs := llmctx.BuildOwned(history, llmctx.Options{SystemPrompt: system, ToolHistoryRounds: a.cfg.ToolHistoryRounds})
	if a.cfg.Attachments != nil {
		if msgs, err = a.cfg.Attachments.Expand(ctx, msgs); err != nil {
			return nil, a.canceledOr(ctx, fmt.Errorf("reading attached files: %w", err))
		}
	}
	c := &modelCall{
		req: &parley.ChatRequest{
			Model:    t.model,
			Messages: msgs,
			Tools:    t.specs,
		},
		start: time.Now(),
	}
	c.ctx, c.span = a.startModelSpan(ctx, *in, c.req)
	return c, nil
}

// answered goes on from the model call c's answer: it stores the answer and runs the tools it
// asks for. It reports whether the loop is done (with res set, and the error it ends with).
//
//go:noinline
func (a *Agent) answered(ctx context.Context, in *Input, t *turn, res *Result, st *loopState, c *modelCall) (bool, error) {
	resp, answeredBy, err, emitSafe := c.resp, c.answeredBy, c.err, t.emit
	latency := time.Since(c.start)
	a.endModelSpan(c.span, answeredBy, resp, err)
	if st.waitBegun {
		// The call overlapped the write of the run's beginning: nothing is stored before
		// it is durable, nothing at all if it failed.
		if berr := in.begun(); berr != nil {
			return true, berr
		}
		st.waitBegun = false
	}
	if a.cfg.Metrics != nil {
		var u *parley.Usage
		if resp != nil {
			u = resp.Usage
		}
		a.cfg.Metrics.ModelCall(answeredBy, err != nil, latency, c.ttft, u)
	}
	if resp != nil && resp.Usage != nil {
		res.Usage.Add(*resp.Usage)
		emitSafe(parley.Event{Type: parley.EventUsage, Usage: resp.Usage})
	}
	if err != nil {
		// Keep what the user already saw: its record replaces the client's draft. A failed
		// call's turn is marked with its error, so that the model is not sent it again and
		// it can be retried; a stopped one only when nothing came (the question stays
		// answered, so the next is not merged with it: Anthropic and Gemini join adjacent
		// user turns).
		code := parley.CodeOf(err)
		if ctx.Err() != nil {
			code, err = parley.ECCanceled, canceled()
		}
		if msg := a.keepPartial(ctx, *in, answeredBy, resp, latency, code); msg != nil {
			res.Final = msg
			emitSafe(parley.Event{Type: parley.EventRecord, Message: msg})
		}
		return true, err
	}

	msg := a.assistant(*in, answeredBy, resp, latency)
	if len(msg.ToolCalls) == 0 && a.storeWithEnd(*in, msg) {
		res.Final, res.FinishReason = msg, parley.FinishStop
		return true, nil
	}
	if err := a.store(ctx, in.SessionID, msg); err != nil {
		return true, err
	}
	res.Final = msg
	emitSafe(parley.Event{Type: parley.EventRecord, Message: msg})
	if len(msg.ToolCalls) == 0 {
		res.FinishReason = parley.FinishStop
		return true, nil
	}

	emitSafe(parley.Event{Type: parley.EventToolCallsStart, ToolCalls: msg.ToolCalls})
	budget := len(msg.ToolCalls)
	if a.cfg.MaxToolCalls > 0 {
		budget = max(0, min(budget, a.cfg.MaxToolCalls-st.toolCalls))
	}
	st.toolCalls += budget
	if err := in.gate(ctx); err != nil {
		// The model's calls get results, so that the stored history stays valid.
		a.closeCalls(ctx, *in, msg.ToolCalls, emitSafe)
		return true, a.canceledOr(ctx, err)
	}
	verdicts, err := a.approve(ctx, *in, t, msg.ToolCalls, budget)
	if err != nil {
		if !handedOver(ctx) {
			a.closeCalls(ctx, *in, msg.ToolCalls, emitSafe)
		}
		return true, err
	}
	if err := a.runTools(ctx, *in, msg.ToolCalls, budget, t.allowedNames(), verdicts, emitSafe); err != nil {
		return true, err
	}
	if ctx.Err() != nil {
		return true, canceled()
	}
	return false, nil
}

// maxIterations ends a loop that reached MaxIterations without an answer: it stores and
// announces an answer that says so.
//
//go:noinline
func (a *Agent) maxIterations(ctx context.Context, in *Input, t *turn, res *Result) (*Result, error) {
	emitSafe := t.emit
	text := MaxIterationsText(a.cfg.MaxIterations)
	msg := &parley.Message{
		ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(text),
		RunID: in.RunID, Model: t.model, CreatedAt: a.now(),
	}
	// A streaming client shows text from chunks; the record that follows replaces them.
	emitSafe(parley.Event{Type: parley.EventChunk, Content: text})
	if a.storeWithEnd(*in, msg) {
		res.Final, res.FinishReason = msg, parley.FinishMaxIterations
		return res, nil
	}
	if err := a.store(ctx, in.SessionID, msg); err != nil {
		return res, err
	}
	res.Final = msg
	emitSafe(parley.Event{Type: parley.EventRecord, Message: msg})
	res.FinishReason = parley.FinishMaxIterations
	return res, nil
}

// systemPrompt is SystemPrompt with what the session adds to it.
func (a *Agent) systemPrompt(ctx context.Context, sessionID string, sess *parley.Session) (string, error) {
	if a.cfg.SessionPrompt == nil {
		return a.cfg.SystemPrompt, nil
	}
	extra, err := a.cfg.SessionPrompt(ctx, sessionID, sess)
	if err != nil || extra == "" {
		return a.cfg.SystemPrompt, err
	}
	if a.cfg.SystemPrompt == "" {
		return extra, nil
	}
	return a.cfg.SystemPrompt + "\n\n" + extra, nil
}

// storeWithEnd gives msg, the run's answer, to be stored with the run's end (StoreWithEnd), and
// reports whether it was taken. The history is told of it once stored, as store tells it.
func (a *Agent) storeWithEnd(in Input, msg *parley.Message) bool {
	if in.StoreWithEnd == nil && in.Run == nil {
		return false
	}
	scrubNUL(msg)
	var stored func(*parley.Message)
	if h, ok := a.cfg.History.(appender); ok {
		stored = func(m *parley.Message) { h.Appended(in.SessionID, m) }
	}
	if in.StoreWithEnd != nil {
		return in.StoreWithEnd(msg, stored)
	}
	return in.Run.StoreWithEnd(msg, stored)
}

func (in *Input) gate(ctx context.Context) error {
	switch {
	case in.Gate != nil:
		return in.Gate(ctx)
	case in.Run != nil:
		return in.Run.Gate(ctx)
	}
	return nil
}

func (in *Input) begun() error {
	switch {
	case in.Begun != nil:
		return in.Begun()
	case in.Run != nil:
		return in.Run.Begun()
	}
	return nil
}

// canAwaitApproval reports whether the run can wait for approvals (awaitApproval).
func (in *Input) canAwaitApproval() bool { return in.AwaitApproval != nil || in.Run != nil }

func (in *Input) awaitApproval(ctx context.Context, until time.Time, check func(context.Context) (bool, error)) error {
	if in.AwaitApproval != nil {
		return in.AwaitApproval(ctx, until, check)
	}
	return in.Run.AwaitApproval(ctx, until, check)
}

// closeCalls stores a "not run" result for each call, for a run that stops before its tools ran.
func (a *Agent) closeCalls(ctx context.Context, in Input, calls []parley.ToolCall, emit func(parley.Event)) {
	for _, call := range calls {
		msg := failedResult(call, "error: not run: the run was stopped before this tool call", in.RunID, a.now())
		if a.store(ctx, in.SessionID, msg) == nil {
			emit(parley.Event{Type: parley.EventToolResult, Message: msg})
		}
	}
}

// callModel streams one model call, emitting text and reasoning deltas as they arrive, and returns
// the assembled response and the model that answered it (another than req.Model when a router
// fell back), and the time from the call's start to its first output (text, reasoning or a tool
// call; 0 if none came). On error it also returns what had arrived.
//
// Its frame stays under the model's read for the whole answer (see loop): what the call keeps
// is in a modelStream, and each event is handled by took.
func (a *Agent) callModel(ctx context.Context, prov parley.Provider, req *parley.ChatRequest, emit func(parley.Event)) (*parley.Response, string, time.Duration, error) {
	s, err := a.openModel(ctx, prov, req, emit)
	if err != nil {
		return nil, req.Model, 0, err
	}
	defer s.close()
	for {
		ev, err := s.stream.Next()
		if err != nil {
			s.err = err
			return s.end()
		}
		s.took(ev)
	}
}

// modelStream is what callModel keeps of a model call while its answer streams.
type modelStream struct {
	a          *Agent
	ctx        context.Context // the run's
	callCtx    context.Context // the call's: ctx with ModelTimeout
	cancel     context.CancelFunc
	stream     parley.Stream
	emit       func(parley.Event)
	answeredBy string
	start      time.Time
	ttft       time.Duration
	err        error // what ended the stream: io.EOF at the answer's end
	b          parley.ResponseBuilder
}

// openModel starts the model call: its time bound, then the provider's stream. On error nothing
// is left open.
//
//go:noinline
func (a *Agent) openModel(ctx context.Context, prov parley.Provider, req *parley.ChatRequest, emit func(parley.Event)) (*modelStream, error) {
	s := &modelStream{a: a, ctx: ctx, callCtx: ctx, emit: emit, answeredBy: req.Model, start: time.Now()}
	if a.cfg.ModelTimeout > 0 {
		s.callCtx, s.cancel = context.WithTimeout(ctx, a.cfg.ModelTimeout)
	}
	stream, err := prov.Stream(s.callCtx, req)
	if err != nil {
		err = s.fail(err)
		if s.cancel != nil {
			s.cancel()
		}
		return nil, err
	}
	s.stream = stream
	if mr, ok := stream.(parley.ModelReporter); ok && mr.Model() != "" {
		s.answeredBy = mr.Model()
	}
	return s, nil
}

// fail is the error a failed call returns. A call cut by ModelTimeout (and not by the run's own
// end) is a timeout, whatever error the provider made of it.
func (s *modelStream) fail(err error) error {
	if s.ctx.Err() == nil && errors.Is(s.callCtx.Err(), context.DeadlineExceeded) {
		return parley.WrapError(parley.ECTimeout, err, fmt.Sprintf("the model call took longer than %s", s.a.cfg.ModelTimeout))
	}
	return upstream(err)
}

// took folds one event of the answer into the response, and emits its text or reasoning.
//
//go:noinline
func (s *modelStream) took(ev parley.StreamEvent) {
	s.b.Add(ev)
	if s.ttft == 0 && (ev.Type == parley.StreamContent || ev.Type == parley.StreamReasoning || ev.Type == parley.StreamToolCall || ev.Type == parley.StreamThinking) {
		s.ttft = max(time.Since(s.start), time.Nanosecond)
	}
	switch ev.Type {
	case parley.StreamContent:
		if ev.Content != "" {
			s.emit(parley.Event{Type: parley.EventChunk, Content: ev.Content})
		}
	case parley.StreamReasoning:
		if ev.Reasoning != "" {
			s.emit(parley.Event{Type: parley.EventReasoning, Content: ev.Reasoning})
		}
	}
}

// end is what callModel returns once the stream ended: io.EOF at the answer's end.
//
//go:noinline
func (s *modelStream) end() (*parley.Response, string, time.Duration, error) {
	if errors.Is(s.err, io.EOF) {
		return s.b.Response(), s.answeredBy, s.ttft, nil
	}
	return s.b.Response(), s.answeredBy, s.ttft, s.fail(s.err)
}

// close closes the stream, then ends the call's time bound.
func (s *modelStream) close() {
	s.stream.Close()
	if s.cancel != nil {
		s.cancel()
	}
}

// assistant builds the assistant message for a model response.
func (a *Agent) assistant(in Input, model string, resp *parley.Response, latency time.Duration) *parley.Message {
	msg := &parley.Message{
		ID: parley.NewID(), Role: parley.RoleAssistant, Reasoning: resp.Reasoning, ThinkingBlocks: resp.ThinkingBlocks,
		RunID: in.RunID, Model: model, LatencyMS: latencyMS(latency), Usage: resp.Usage, CreatedAt: a.now(),
	}
	if resp.Content != "" || len(resp.ToolCalls) == 0 {
		msg.Content = parley.Text(resp.Content)
	}
	seen := map[string]bool{}
	for _, c := range resp.ToolCalls {
		// A call without an id (some OpenAI-compatible servers) or with a repeated one gets a fresh
		// id, so that its result can be matched to it.
		if c.ID == "" || seen[c.ID] {
			c.ID = "call_" + parley.NewID()
		}
		seen[c.ID] = true
		c.Type = "function"
		msg.ToolCalls = append(msg.ToolCalls, c)
	}
	return msg
}

// runTools runs the first budget calls in parallel, at most MaxParallelTools at a time, storing
// each result as a tool message as soon as it is ready; the calls past the budget get an error
// result without running. It returns only a storage error; tool failures are results.
//
// verdicts (package approval, by call id) refuse calls or give them the arguments a person
// edited; the stored assistant message keeps the calls as the model made them.
func (a *Agent) runTools(ctx context.Context, in Input, calls []parley.ToolCall, budget int, allowed map[string]bool, verdicts map[string]verdict, emit func(parley.Event)) error {
	ctx = tools.WithRun(ctx, tools.RunInfo{SessionID: in.SessionID, RunID: in.RunID, User: in.User, Emit: emit})
	sem := make(chan struct{}, a.cfg.MaxParallelTools)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	for i := range calls {
		call := calls[i]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			emit(parley.Event{Type: parley.EventToolCall, ToolCall: &call})
			var out tools.Outcome
			run := i < budget
			v, judged := verdicts[call.ID]
			if run && judged && v.refusal != "" {
				run = false
				out = tools.Outcome{Content: parley.Text(v.refusal)}
			}
			exec := call
			if v.edited {
				exec.Function.Arguments = v.args
			}
			if run {
				// The ledger says the call started before it does: a crash from here on leaves it
				// in doubt, and only a tool that may run twice is run again (Resume).
				if err := a.mark(ctx, in, call, parley.ToolCallStarted); err != nil {
					a.cfg.Log.ErrorContext(ctx, "tool call not recorded", "call", call.ID, "err", err)
					run = false
					out = tools.Outcome{Content: parley.Text("error: not run: the call could not be recorded before it ran; try again")}
				} else {
					tctx, span := a.startToolSpan(ctx, in, exec)
					out = a.cfg.Tools.Call(tctx, exec, allowed)
					a.endToolSpan(span, out)
					if v.edited {
						out.Content = prepend(out.Content, editedNote(v.args))
					}
				}
			} else if !judged || v.refusal == "" {
				out = tools.Outcome{Content: parley.Text(fmt.Sprintf("error: not run: this request may make at most %d tool calls; answer with what you have", a.cfg.MaxToolCalls))}
			}
			ok := out.Success
			msg := &parley.Message{
				ID: parley.NewID(), Role: parley.RoleTool, Content: out.Content, Name: call.Function.Name,
				ToolCallID: call.ID, RunID: in.RunID, LatencyMS: latencyMS(out.Latency),
				Success: &ok, ResourceID: out.ResourceID, Server: out.Server, CreatedAt: a.now(),
			}
			if err := a.store(ctx, in.SessionID, msg); err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
				return
			}
			if run {
				// Its result is stored: the call never runs again. Should this write fail, the
				// stored result still answers the call.
				if err := a.mark(ctx, in, call, parley.ToolCallDone); err != nil {
					a.cfg.Log.WarnContext(ctx, "tool call not marked done", "call", call.ID, "err", err)
				}
			}
			emit(parley.Event{Type: parley.EventToolResult, Message: msg})
		}()
	}
	wg.Wait()
	return firstErr
}

// mark writes the call's state to the ledger, even after ctx was cancelled.
func (a *Agent) mark(ctx context.Context, in Input, call parley.ToolCall, state string) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	return a.cfg.Store.MarkToolCall(wctx, in.SessionID, in.RunID, call.ID, call.Function.Name, state, a.now())
}

// store appends msg durably. It still writes after ctx was cancelled (bounded by storeTimeout),
// so that an aborted run leaves a complete record of what it did.
func (a *Agent) store(ctx context.Context, sessionID string, msg *parley.Message) error {
	scrubNUL(msg)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := a.cfg.Store.AppendMessages(wctx, sessionID, msg); err != nil {
		return fmt.Errorf("storing %s message: %w", msg.Role, err)
	}
	if h, ok := a.cfg.History.(appender); ok {
		// The next read of the history (the next model call, the session's next chat) need not
		// bring in what was just written.
		h.Appended(sessionID, msg)
	}
	return nil
}

// appender is a History told of the messages stored (historycache.Cache).
type appender interface {
	Appended(sessionID string, msgs ...*parley.Message)
}

// scrubNUL replaces NUL characters, which no store accepts (PostgreSQL cannot hold them), by
// U+FFFD in what a model or a tool produced, so that a stray byte of binary output cannot fail a run.
func scrubNUL(m *parley.Message) {
	fix := func(s *string) {
		if strings.IndexByte(*s, 0) >= 0 {
			*s = strings.ReplaceAll(*s, "\x00", "\uFFFD")
		}
	}
	if m.Content.IsParts() {
		parts := m.Content.Parts()
		for i := range parts {
			fix(&parts[i].Text)
		}
	} else if !m.Content.IsNull() {
		if t := m.Content.String(); strings.IndexByte(t, 0) >= 0 {
			fix(&t)
			m.Content = parley.Text(t)
		}
	}
	fix(&m.Reasoning)
	// A signed block cannot be edited without breaking its signature: one holding a NUL is dropped.
	kept := m.ThinkingBlocks[:0]
	for _, b := range m.ThinkingBlocks {
		if strings.IndexByte(b.Thinking, 0) < 0 && strings.IndexByte(b.Signature, 0) < 0 && strings.IndexByte(b.Data, 0) < 0 {
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	m.ThinkingBlocks = kept
	for i := range m.ToolCalls {
		fix(&m.ToolCalls[i].Function.Arguments)
		fix(&m.ToolCalls[i].Function.Name)
	}
}

// latencyMS is a measured duration in whole milliseconds, rounded up: a call that took any time
// at all reports at least 1 (latency_ms is left out of the JSON only when nothing was measured,
// as for a tool call that was not run).
func latencyMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (a *Agent) now() time.Time { return a.cfg.Now().UTC().Truncate(time.Microsecond) }

func (a *Agent) canceledOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return canceled()
	}
	return err
}

// keepPartial stores what a model call that ended with code streamed before it ended, as the
// assistant message of the turn, and returns it (nil when the store refused it). The turn is
// marked failed with code, except for a stopped call (ECCanceled) that produced text: that text is
// the answer the user chose to keep.
func (a *Agent) keepPartial(ctx context.Context, in Input, answeredBy string, resp *parley.Response, latency time.Duration, code parley.ErrorCode) *parley.Message {
	partial := &parley.Response{}
	if resp != nil {
		partial.Content, partial.Reasoning, partial.Usage = resp.Content, resp.Reasoning, resp.Usage
	}
	msg := a.assistant(in, answeredBy, partial, latency)
	if code != parley.ECCanceled || partial.Content == "" {
		msg.Error = code
	}
	if err := a.store(ctx, in.SessionID, msg); err != nil {
		a.cfg.Log.ErrorContext(ctx, "the turn's partial answer was not stored", "session", in.SessionID, "run", in.RunID, "err", err)
		return nil
	}
	return msg
}

func canceled() error { return parley.Errorf(parley.ECCanceled, "the run was cancelled") }

// upstream makes sure a provider failure reaches the client as a provider error, never as an
// internal one with details.
func upstream(err error) error {
	var pe *parley.Error
	if errors.As(err, &pe) {
		return err
	}
	return parley.WrapError(parley.ECUpstream, err, "the model provider failed")
}
