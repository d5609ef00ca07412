package openaiapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/chat"
)

// SessionHeader names the session of a stateful request.
const SessionHeader = "X-Parley-Session"

// Backend answers the OpenAI-compatible routes. Chat is required; the rest may be nil, and then
// the kind of request that needs it is refused with a 400 that says so.
type Backend struct {
	// Chat starts the turns of stateful requests, and lends its checks (model names, Parley's
	// tools, the message size) to every request.
	Chat *chat.Service
	// Agent runs stateless requests, each on a copy that keeps the conversation in memory.
	Agent *agent.Agent
	// Resolve maps a model name to its provider, for gateway requests.
	Resolve func(model string) (parley.Provider, string, error)
	// ModelTimeout bounds one model call of a gateway request (0: only the request's own end).
	ModelTimeout time.Duration
	// Metrics records the model calls of gateway requests (those of Parley's loop are the
	// agent's); nil records nothing.
	Metrics agent.Metrics
	// Models lists the models GET /v1/models shows.
	Models func() []Model
	// MaxInline bounds the stateless and gateway requests served at once (they run in their
	// request, outside the run manager's budget); past it: 503 + Retry-After. Default 64.
	MaxInline int
	// Heartbeat is how long a stream of Parley's loop (stateless or stateful) may be quiet before
	// a keep-alive comment is sent (default 15s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write of a stream (default 10s): a client that cannot take a chunk
	// in time is dropped.
	WriteTimeout time.Duration
	// Fail writes an error response in OpenAI's shape with WriteError: httpapi sets it, with
	// its one map of error codes to statuses and its log of 5xx answers. Required.
	Fail func(http.ResponseWriter, error)
	Now  func() time.Time
	Log  *slog.Logger

	once   sync.Once
	inline chan struct{}
}

func (b *Backend) init() {
	b.once.Do(func() {
		if b.MaxInline <= 0 {
			b.MaxInline = 64
		}
		b.inline = make(chan struct{}, b.MaxInline)
		if b.WriteTimeout <= 0 {
			b.WriteTimeout = 10 * time.Second
		}
		if b.Heartbeat <= 0 {
			b.Heartbeat = 15 * time.Second
		}
		if b.Now == nil {
			b.Now = time.Now
		}
		if b.Log == nil {
			b.Log = slog.New(slog.DiscardHandler)
		}
	})
}

// Error writes err in OpenAI's shape with its status.
func (b *Backend) Error(w http.ResponseWriter, err error) {
	b.Fail(w, err)
}

// ListModels is GET /v1/models.
func (b *Backend) ListModels(w http.ResponseWriter, r *http.Request) {
	list := ModelList{Object: "list", Data: []Model{}}
	if b.Models != nil {
		list.Data = append(list.Data, b.Models()...)
	}
	writeJSON(w, http.StatusOK, list)
}

// Complete is POST /v1/chat/completions for owner, with req decoded and checked (Check).
func (b *Backend) Complete(w http.ResponseWriter, r *http.Request, owner string, req *ChatRequest) {
	b.init()
	session := req.session
	if h := strings.TrimSpace(r.Header.Get(SessionHeader)); h != "" {
		if session != "" && session != h {
			b.Error(w, parley.Errorf(parley.ECInvalid, "%s: differs from the session the body names", SessionHeader))
			return
		}
		session = h
	}
	switch {
	case session != "":
		if len(req.Tools) > 0 {
			b.Error(w, parley.Errorf(parley.ECInvalid, "tools: a request on a Parley session runs Parley's tools; client-side tools are for requests without a session"))
			return
		}
		b.stateful(w, r, owner, req, session)
	case len(req.Tools) > 0:
		b.gateway(w, r, req)
	default:
		b.stateless(w, r, owner, req)
	}
}

// takeInline takes one of the slots of requests that run in their handler.
func (b *Backend) takeInline() (func(), error) {
	select {
	case b.inline <- struct{}{}:
		return func() { <-b.inline }, nil
	default:
		return nil, &parley.Error{Code: parley.ECUnavailable, RetryAfter: time.Second,
			Message: "too many requests without a session are running; try again shortly"}
	}
}

// stateful makes the request's last user message a turn of the session and answers with its run.
func (b *Backend) stateful(w http.ResponseWriter, r *http.Request, owner string, req *ChatRequest, session string) {
	if uuid.Validate(session) != nil {
		b.Error(w, parley.Errorf(parley.ECNotFound, "session %q not found", truncate(session, 80)))
		return
	}
	cr, err := req.turn(session)
	if err != nil {
		b.Error(w, err)
		return
	}
	st, err := b.Chat.Send(r.Context(), owner, cr)
	if err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			err = parley.Errorf(parley.ECNotFound, "session %q not found", session)
		}
		b.Error(w, err)
		return
	}
	w.Header().Set(SessionHeader, st.Session.ID)
	w.Header().Set("X-Parley-Run", st.Run.ID)
	out := b.newResponder(w, req, "chatcmpl-"+st.Run.ID, st.Run.Model)
	out.info = Info{SessionID: st.Session.ID, RunID: st.Run.ID}
	// The session's stream from the run's first event to its done event. While the run is quiet
	// for Heartbeat (a slow tool, a paused run), a stream gets a keep-alive comment, which the
	// SDKs skip.
	sub := b.Chat.Runs.Subscribe(r.Context(), st.Session.ID, st.Run.FirstSeq()-1)
	defer sub.Close()
	heartbeat := time.NewTimer(b.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-sub.Ready():
		case <-heartbeat.C:
			if out.stream {
				out.start()
				out.comment("ping")
				if out.failed() {
					return
				}
			}
			heartbeat.Reset(b.Heartbeat)
			continue
		case <-r.Context().Done():
			return // the client left: the run goes on
		}
		frames, err := sub.Next(r.Context())
		if err != nil {
			return // the client left: the run goes on
		}
		done := false
		for _, f := range frames {
			out.event(f.Event())
			done = done || f.Type == parley.EventDone
			if done {
				break
			}
		}
		if out.failed() {
			return
		}
		if done {
			break
		}
		if len(frames) > 0 {
			heartbeat.Reset(b.Heartbeat)
		}
	}
	out.end(nil)
}

// stateless runs Parley's agent loop on the request's messages, held in memory.
func (b *Backend) stateless(w http.ResponseWriter, r *http.Request, owner string, req *ChatRequest) {
	if b.Agent == nil {
		b.Error(w, parley.Errorf(parley.ECInvalid, "messages: requests without a session need tools on this server"))
		return
	}
	last := req.Messages[len(req.Messages)-1].Role
	if last != "user" && last != "tool" {
		b.Error(w, parley.Errorf(parley.ECInvalid, "messages[%d].role: the last message must be the user's (or a tool's result)", len(req.Messages)-1))
		return
	}
	release, err := b.takeInline()
	if err != nil {
		b.Error(w, err)
		return
	}
	defer release()
	id := parley.NewID()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := b.newResponder(w, req, "chatcmpl-"+id, req.Model)
	out.onWriteError = cancel
	in := agent.Input{SessionID: id, RunID: id, Model: req.Model, User: owner}
	if req.Parley != nil {
		in.SelectedTools = req.Parley.Tools
	}
	// The loop runs in its own goroutine, owned by this handler, which waits for it on every
	// path; its events come through a bounded queue (a slow client holds the loop back, within
	// WriteTimeout per write), so that this goroutine alone writes, and can send keep-alives
	// while the loop is quiet (a slow model, a long tool call).
	type ended struct {
		res *agent.Result
		err error
	}
	events := make(chan parley.Event, 64)
	done := make(chan ended, 1)
	ag := b.Agent.WithStore(newMemConversation(id, req.messages()))
	go func() {
		res, err := ag.Run(ctx, in, func(ev parley.Event) {
			select {
			case events <- ev:
			case <-ctx.Done():
			}
		})
		done <- ended{res, err}
	}()
	quiet := time.NewTimer(b.Heartbeat)
	defer quiet.Stop()
	for {
		select {
		case ev := <-events:
			out.event(ev)
			quiet.Reset(b.Heartbeat)
		case <-quiet.C:
			if out.stream {
				out.start()
				out.comment("ping")
			}
			quiet.Reset(b.Heartbeat)
		case e := <-done:
			// Every event was queued before Run returned.
			for len(events) > 0 {
				out.event(<-events)
			}
			if e.res != nil {
				out.info.FinishReason = e.res.FinishReason
			}
			out.end(e.err)
			return
		}
	}
}

// gateway sends the request to the model as it is and returns its answer, tool calls included.
func (b *Backend) gateway(w http.ResponseWriter, r *http.Request, req *ChatRequest) {
	if b.Resolve == nil {
		b.Error(w, parley.Errorf(parley.ECInvalid, "tools: client-side tools are not available on this server"))
		return
	}
	release, err := b.takeInline()
	if err != nil {
		b.Error(w, err)
		return
	}
	defer release()
	prov, name, err := b.Resolve(req.Model)
	if err != nil {
		b.Error(w, err)
		return
	}
	creq := &parley.ChatRequest{Model: name, Messages: req.messages(), ToolChoice: req.toolChoice, Temperature: req.Temperature, MaxTokens: req.MaxTokens}
	if req.MaxCompletionTokens > 0 {
		creq.MaxTokens = req.MaxCompletionTokens
	}
	for _, t := range req.Tools {
		params := t.Function.Parameters
		if len(params) == 0 {
			params = []byte(`{"type":"object","properties":{}}`)
		}
		creq.Tools = append(creq.Tools, parley.ToolSpec{Name: t.Function.Name, Description: t.Function.Description, Parameters: params})
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if b.ModelTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, b.ModelTimeout)
		defer cancel()
	}
	began := time.Now()
	var ttft time.Duration
	failed := true
	var whole parley.ResponseBuilder
	defer func() {
		if b.Metrics != nil {
			b.Metrics.ModelCall(req.Model, failed, time.Since(began), ttft, whole.Response().Usage)
		}
	}()
	stream, err := prov.Stream(ctx, creq)
	if err != nil {
		b.Error(w, err)
		return
	}
	defer stream.Close()
	out := b.newResponder(w, req, "chatcmpl-"+parley.NewID(), req.Model)
	out.onWriteError = cancel
	out.gateway = true
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.end(err)
			return
		}
		whole.Add(ev)
		if ttft == 0 && (ev.Type == parley.StreamContent || ev.Type == parley.StreamReasoning || ev.Type == parley.StreamToolCall) {
			ttft = time.Since(began)
		}
		if mr, ok := stream.(parley.ModelReporter); ok && mr.Model() != "" {
			out.model = mr.Model()
		}
		switch ev.Type {
		case parley.StreamContent:
			out.text(ev.Content)
		case parley.StreamReasoning:
			out.reasoning(ev.Reasoning)
		case parley.StreamToolCall:
			if d := ev.ToolCall; d != nil {
				td := ToolCallDelta{Index: d.Index, ID: d.ID, Function: FunctionDelta{Name: d.Name, Arguments: d.Arguments}}
				if d.ID != "" || d.Name != "" {
					td.Type = "function"
				}
				out.toolDelta(td)
			}
		case parley.StreamUsage:
			if ev.Usage != nil {
				out.usage.Add(*ev.Usage)
			}
		}
		if out.failed() {
			return
		}
	}
	failed = false
	resp := whole.Response()
	out.final = &OutMessage{Role: "assistant", ToolCalls: resp.ToolCalls, Reasoning: resp.Reasoning}
	if resp.Content != "" || len(resp.ToolCalls) == 0 {
		out.final.Content = &resp.Content
	}
	out.finish = resp.FinishReason
	if len(resp.ToolCalls) > 0 {
		out.finish = "tool_calls"
	}
	out.end(nil)
}
