// Package llmtest is a fake model server that speaks the OpenAI Chat Completions wire format as
// the real API does: JSON answers, and SSE chunks ending in "data: [DONE]" with tool-call
// arguments split across chunks, parallel tool calls and usage in the last chunk. Tests script it
// turn by turn (text, reasoning, tool calls, HTTP errors, cut streams, delays); with no script it
// answers from a small deterministic "demo brain" that calls the calculator and clock tools, which
// is what `parley serve` uses offline and `parley mockllm` serves for benchmarks.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
)

// Limits that keep a misbehaving client from costing much.
const (
	maxBody     = 32 << 20 // request bytes
	maxRecorded = 10_000   // requests kept by Requests
)

// Server is the fake upstream. It is an http.Handler and safe for concurrent use.
type Server struct {
	tokenDelay   time.Duration
	chunkSize    int
	fillerChunks int // > 0: unscripted answers are this many content chunks of filler text
	model        string
	clock        func() time.Time

	mu    sync.Mutex
	queue []Turn
	reqs  []Request
	seq   atomic.Int64
}

// Option configures a Server.
type Option func(*Server)

// WithTokenDelay makes the server wait d between streamed chunks.
func WithTokenDelay(d time.Duration) Option { return func(s *Server) { s.tokenDelay = d } }

// WithChunkSize sets how many characters of content each streamed chunk carries (default 4).
func WithChunkSize(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.chunkSize = n
		}
	}
}

// WithChunks makes every unscripted request answered with n content chunks of chunk-size
// characters of filler text and no tool call, instead of the demo brain's answer: a stream of a
// known length for benchmarks.
func WithChunks(n int) Option { return func(s *Server) { s.fillerChunks = max(n, 0) } }

// WithModel sets the model name answered when a request names none (default "mock").
func WithModel(name string) Option { return func(s *Server) { s.model = name } }

// NewServer returns a server with an empty script.
func NewServer(opts ...Option) *Server {
	s := &Server{chunkSize: 4, model: "mock", clock: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Turn scripts the answer to one chat-completion request.
type Turn struct {
	Content   string
	Reasoning string
	ToolCalls []parley.ToolCall
	// FinishReason defaults to "tool_calls" when there are tool calls and "stop" otherwise.
	FinishReason string
	// Usage defaults to an estimate from the request and answer sizes.
	Usage *parley.Usage
	// Status, when set, answers with this HTTP status and an OpenAI error body instead.
	Status       int
	RetryAfter   string // the Retry-After header sent with Status
	ErrorMessage string
	// CutAfter, when set, drops the connection after this many streamed chunks, without [DONE].
	CutAfter int
	// Delay between streamed chunks, overriding the server's token delay.
	Delay time.Duration
}

// Enqueue appends turns to the script; each chat-completion request consumes the next one. With
// the script empty the demo brain answers.
func (s *Server) Enqueue(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, turns...)
}

// Request is a chat-completion request as the server received it.
type Request struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	Messages     []parley.Message
	Tools        []parley.ToolSpec
	ToolChoice   string
	Raw          json.RawMessage
}

// Requests returns the chat-completion requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Reset empties the script and the request record.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue, s.reqs = nil, nil
}

func (s *Server) next(r Request) (Turn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) < maxRecorded {
		s.reqs = append(s.reqs, r)
	}
	if len(s.queue) == 0 {
		return Turn{}, false
	}
	t := s.queue[0]
	s.queue = s.queue[1:]
	return t, true
}

// ServeHTTP serves each vendor's chat endpoint: OpenAI's POST /v1/chat/completions (or
// /chat/completions) and GET /v1/models, Anthropic's POST /v1/messages, Gemini's POST
// /v1beta/models/{model}:generateContent and :streamGenerateContent?alt=sse, and Ollama's POST
// /api/chat. One script serves them all.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var wf wireFormat
	switch p := r.URL.Path; {
	case p == "/v1/chat/completions" || p == "/chat/completions":
		wf = openaiWire{}
	case p == "/v1/messages":
		wf = anthropicWire{}
	case strings.HasPrefix(p, "/v1beta/models/") && (strings.HasSuffix(p, ":streamGenerateContent") || strings.HasSuffix(p, ":generateContent")):
		wf = geminiWire{}
	case p == "/api/chat":
		wf = ollamaWire{}
	case p == "/v1/models" || p == "/models":
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
			{"id": s.model, "object": "model", "created": 1700000000, "owned_by": "parley"},
		}})
		return
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		wf.writeError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	s.chat(w, r, wf)
}

// wireFormat is one vendor's side of the fake: how it reads a request and writes an answer.
type wireFormat interface {
	// decode parses and checks a request as the vendor's API does, into OpenAI-format messages.
	decode(r *http.Request, body []byte) (*Request, error)
	// writeError answers with status in the vendor's error shape.
	writeError(w http.ResponseWriter, status int, msg string)
	// frames returns the streamed answer: each frame is written whole, then flushed.
	frames(s *Server, c completion, req *Request, t Turn) []string
	// full returns the non-streamed answer.
	full(s *Server, c completion, req *Request, t Turn) any
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, wf wireFormat) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		wf.writeError(w, http.StatusBadRequest, "could not read the request body")
		return
	}
	if len(body) > maxBody {
		wf.writeError(w, http.StatusRequestEntityTooLarge, "request too large")
		return
	}
	req, err := wf.decode(r, body)
	if err != nil {
		wf.writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	turn, scripted := s.next(*req)
	if !scripted {
		if s.fillerChunks > 0 {
			turn = Turn{Content: filler(s.fillerChunks * s.chunkSize)}
		} else {
			turn = demo(req)
		}
	}
	if turn.Status != 0 {
		if turn.RetryAfter != "" {
			w.Header().Set("Retry-After", turn.RetryAfter)
		}
		msg := turn.ErrorMessage
		if msg == "" {
			msg = http.StatusText(turn.Status)
		}
		wf.writeError(w, turn.Status, msg)
		return
	}
	if turn.FinishReason == "" {
		turn.FinishReason = "stop"
		if len(turn.ToolCalls) > 0 {
			turn.FinishReason = "tool_calls"
		}
	}
	if turn.Usage == nil {
		turn.Usage = estimate(body, turn)
	}
	model := req.Model
	if model == "" {
		model = s.model
	}
	c := completion{id: strconv.FormatInt(s.clock().UnixNano(), 36) + strconv.FormatInt(s.seq.Add(1), 36),
		created: s.clock().Unix(), model: model, n: s.seq.Load()}
	if req.Stream {
		if ct, ok := wf.(interface{ contentType() string }); ok {
			w.Header().Set("Content-Type", ct.contentType())
		}
		s.stream(w, r, wf.frames(s, c, req, turn), turn)
		return
	}
	writeJSON(w, http.StatusOK, wf.full(s, c, req, turn))
}

// filler returns n characters of text, words and spaces.
func filler(n int) string {
	const words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
	var b strings.Builder
	b.Grow(n)
	for b.Len() < n {
		b.WriteString(words[:min(len(words), n-b.Len())])
	}
	return b.String()
}

// estimate counts about four characters per token, as OpenAI's rule of thumb does.
func estimate(body []byte, t Turn) *parley.Usage {
	out := len(t.Content) + len(t.Reasoning)
	for _, c := range t.ToolCalls {
		out += len(c.Function.Name) + len(c.Function.Arguments)
	}
	u := &parley.Usage{PromptTokens: int64(len(body)/4 + 1), CompletionTokens: int64(out/4 + 1)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers in OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c any
	if code != "" {
		c = code
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}
