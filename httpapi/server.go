// Package httpapi is Parley's HTTP interface: JSON under /api/v1 and run events over SSE.
// NewServer returns one http.Handler; every route is listed in routes.go, and every error goes
// through the one error-to-status map in errors.go.
package httpapi

import (
	"context"
	"github.com/parleyhq/parley/approval"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/artifact"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/httpapi/openaiapi"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/tools"
)

// ModelInfo describes one model a client may name.
type ModelInfo struct {
	ID        string      `json:"id"`       // "provider/model"; "provider/*" when the provider takes any model name
	Provider  string      `json:"provider"` // the configured provider's name
	Kind      string      `json:"kind"`     // its wire format: openai, anthropic, gemini, ollama or mock
	Default   bool        `json:"default,omitempty"`
	Breaker   string      `json:"breaker"` // the provider endpoint's circuit breaker: closed, open or half_open
	Fallbacks []string    `json:"fallbacks,omitempty"`
	Price     *ModelPrice `json:"price,omitempty"`
}

// ModelPrice is a model's price in US dollars per million tokens.
type ModelPrice struct {
	Input       float64 `json:"input"`
	CachedInput float64 `json:"cached_input"`
	Output      float64 `json:"output"`
}

// ToolInfo is a tool as GET /api/v1/tools lists it: as the model sees it, with the MCP server
// that runs it and that server's state.
type ToolInfo struct {
	parley.ToolSpec
	Server string `json:"server,omitempty"` // empty for built-in tools
	Health string `json:"health,omitempty"` // the server's state: starting, ready, reconnecting, down or stopped
	// Breaker is the tool's own circuit breaker: closed, open (calls refused, the model is told)
	// or half_open.
	Breaker string `json:"breaker"`
	// Stats are the tool's execution metrics since the server started.
	Stats *tools.Stats `json:"stats,omitempty"`
}

// ServerInfo is one configured MCP server's health.
type ServerInfo struct {
	Name      string    `json:"name"`
	Transport string    `json:"transport"` // stdio, http or sse
	State     string    `json:"state"`     // starting, ready, reconnecting, down, stopped or disabled
	Breaker   string    `json:"breaker"`   // closed, open or half_open
	Tools     int       `json:"tools"`
	Restarts  int       `json:"restarts"` // sessions that ended and were started again
	Since     time.Time `json:"since"`    // when it entered its state
}

// Deps are what the handlers need. Store, Chat and Runs are required.
type Deps struct {
	Store parley.Store
	Chat  *chat.Service
	Runs  *runs.Manager
	// Approvals answers tool approvals (issue 23); nil: no call waits for one, and the
	// approvals routes find none.
	Approvals *approval.Service
	// Files serves the files API and collects the files of deleted sessions; nil: the files
	// routes answer 404.
	Files *files.Service
	// Tools lists the tools a client may select and the MCP servers behind them; nil lists none.
	Tools func() ([]ToolInfo, []ServerInfo)
	// Models lists the models a client may name.
	Models func() []ModelInfo
	// Auth checks API keys and guest tokens. Nil: single-user mode, where every caller is
	// "local", with admin rights (for a server on a loopback address).
	Auth *auth.Authenticator
	// Guests turns on guest mode: POST /api/v1/auth/guest gives anyone a guest token, valid for
	// GuestTTL (default 7 days), with its own sessions and the guest rate limit.
	Guests   bool
	GuestTTL time.Duration
	// Limiter, when set, limits each identity's requests: UserRate for users with a key,
	// GuestRate for guests and for requests without valid credentials (counted by client address).
	Limiter   limit.Limiter
	UserRate  limit.Rate
	GuestRate limit.Rate
	// RealIPHeader names the header a reverse proxy sets to the client's address (such as
	// X-Forwarded-For); empty: the peer address is the client's.
	RealIPHeader string
	// CORSOrigins are the origins browsers may call the API from ("*": any). A state-changing
	// request from a browser on another origin is refused.
	CORSOrigins []string
	// Ready reports whether the server can take traffic (store reachable, not shutting down).
	Ready func(ctx context.Context) error
	Log   *slog.Logger
	// MaxBodyBytes bounds request bodies (default 8 MiB).
	MaxBodyBytes int64
	// BodyBudget bounds the request body bytes being read and decoded at once, all requests
	// together (default 4 × MaxBodyBytes). A request waits up to BodyWait (default 5s) for its
	// share, then gets 503 + Retry-After.
	BodyBudget int64
	BodyWait   time.Duration
	// BodyTimeout bounds the time to receive a request's body (default 60s).
	BodyTimeout time.Duration
	// Heartbeat is the idle interval between SSE keep-alive comments (default 15s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a streaming client; a client that cannot take an event in
	// this time is dropped (default 10s). It can reconnect and resume.
	WriteTimeout time.Duration
	// MaxStreamsPerUser bounds each user's open session streams (SSE) and WebSockets, on this
	// instance (default 32; negative: no bound).
	MaxStreamsPerUser int
	// StreamIdle closes a stream on which nothing but heartbeats passed for this long (default
	// 15m); StreamLifetime closes any stream after this long (default 24h). The client resumes.
	StreamIdle     time.Duration
	StreamLifetime time.Duration
	// Metrics records each request and each open stream; nil records nothing.
	Metrics Metrics
	// MetricsHandler, when set, is served on GET /metrics to admin identities (cmd/parley sets it
	// when no separate --metrics-addr listener serves it).
	MetricsHandler http.Handler
	// AccessLog logs a line for each request answered (method, route pattern, status, duration,
	// bytes, user, request id) at info level.
	AccessLog bool
	// OpenAI answers the OpenAI-compatible routes under /v1 (package openaiapi). Nil: a backend
	// on Chat alone, which answers stateful requests (on a session) only.
	OpenAI *openaiapi.Backend
	// Lifetime ends when the server shuts down (the BaseContext of its http.Server): the
	// WebSockets, which outlive their request's handler, then close with 1001. Nil: they end
	// only on their own.
	Lifetime context.Context
	// GiveBack, when set, takes back the connection of a streamed chat taken over from net/http
	// (streamSession) once its response has ended whole, for the HTTP server to serve the
	// client's next request on it (GiveBackListener.GiveBack); false: it was not taken, and the
	// connection is closed. Nil: the connection closes after the response.
	GiveBack func(net.Conn) bool
	// AuthRecheck is how often an open stream (SSE or WebSocket) checks that its key is still
	// valid, through Auth's cache (default 5s); a revoked or expired key ends it.
	AuthRecheck time.Duration
	// Artifacts, when set, serves the artifacts of sessions (GET /api/v1/sessions/{id}/artifacts,
	// GET /api/v1/artifacts/{id}) and their pages, reached by URLs ArtifactURLs signs.
	Artifacts    parley.ArtifactStore
	ArtifactURLs *artifact.Signer
	// SearchCosts, when set, adds the caller's web search costs to GET /api/v1/usage.
	SearchCosts parley.SearchCostStore
}

// Metrics is what the API reports to the metrics package.
type Metrics interface {
	// Request records an answered request: route is the mux's pattern ("" when none matched).
	Request(route, method string, status int, d time.Duration)
	// StreamOpen records an open stream of kind "sse" or "websocket"; StreamClose, called once,
	// records its end.
	StreamOpen(kind string)
	StreamClose(kind string)
}

type server struct {
	Deps
	mux       *http.ServeMux
	slots     streamSlots
	bodies    *bodyBudget
	wsOrigins []string // origins (host patterns) whose pages may open a WebSocket
	pages     pageCache
	idle      *idlePoller // watches the connections of idle streams (idlepoll.go)
	detached  detachedStreams
	sessions  sessionFlights // session reads shared by the stream and WebSocket connects that ask at once
}

// NewServer returns the API handler.
func NewServer(d Deps) http.Handler {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = 8 << 20
	}
	if d.BodyBudget <= 0 {
		d.BodyBudget = 4 * d.MaxBodyBytes
	}
	d.BodyBudget = max(d.BodyBudget, d.MaxBodyBytes)
	if d.BodyWait <= 0 {
		d.BodyWait = 5 * time.Second
	}
	if d.BodyTimeout <= 0 {
		d.BodyTimeout = 60 * time.Second
	}
	if d.Heartbeat <= 0 {
		d.Heartbeat = 15 * time.Second
	}
	if d.WriteTimeout <= 0 {
		d.WriteTimeout = 10 * time.Second
	}
	if d.GuestTTL <= 0 {
		d.GuestTTL = 7 * 24 * time.Hour
	}
	if d.MaxStreamsPerUser == 0 {
		d.MaxStreamsPerUser = 32
	}
	if d.StreamIdle <= 0 {
		d.StreamIdle = 15 * time.Minute
	}
	if d.AuthRecheck <= 0 {
		d.AuthRecheck = 5 * time.Second
	}
	if d.StreamLifetime <= 0 {
		d.StreamLifetime = 24 * time.Hour
	}
	s := &server{Deps: d, mux: http.NewServeMux(), slots: streamSlots{byUser: map[string]int{}}, bodies: newBodyBudget(d.BodyBudget), idle: newIdlePoller()}
	for _, o := range d.CORSOrigins {
		if o == "*" {
			s.wsOrigins = append(s.wsOrigins, "*")
		} else if u, err := url.Parse(o); err == nil && u.Host != "" {
			s.wsOrigins = append(s.wsOrigins, u.Host)
		}
	}
	s.routes()
	return s.observe(s.recoverer(s.cors(s.mux)))
}

// recoverer turns a handler panic into a sanitized 500 and a log line.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.Log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "request_id", w.Header().Get("X-Request-Id"), "panic", p)
				writeError(w, parley.Errorf(parley.ECInternal, "handler panicked"))
			}
		}()
		// A malformed query string would otherwise be dropped silently by URL.Query, and a bad
		// cursor or limit would quietly become the first page.
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			writeError(w, parley.Errorf(parley.ECInvalid, "query string: %v (parameters such as cursor must be URL-encoded)", err))
			return
		}
		next.ServeHTTP(w, r)
	})
}
