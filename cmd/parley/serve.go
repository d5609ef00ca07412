package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/httpapi/openaiapi"
	"github.com/parleyhq/parley/metrics"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/historycache"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/tools/builtin"
	guardpkg "github.com/parleyhq/parley/tools/guard"
	"github.com/parleyhq/parley/workspace"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return serve(ctx, args, getenv, stdout, stderr, net.Listen)
}

// serve is runServe with the way it listens injected (tests make a later step fail). Every
// resource it takes is released on every return path, in the reverse order: the HTTP server, the
// runs (and their lease keeper), the relay, the MCP servers, the sweeper, the guard, and the
// store last, so that nothing that writes to the store outlives it.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer,
	listen func(network, addr string) (net.Listener, error)) error {
	var c config
	fs := flagSet("serve", stderr, "Runs the Parley server. Each flag may also be given as the environment variable\nPARLEY_<FLAG> (upper case, - as _) or as a key of the config file.\n\n"+tracingHelp)
	serveFlags(fs, &c)
	if err := parsed(fs, parseConfig(fs, args, getenv, c.fileSections()), stdout); err != nil {
		return err
	}
	// The conventional provider variables, when Parley's own are not set.
	for _, v := range []struct {
		dst *string
		env string
	}{{&c.OpenAIAPIKey, "OPENAI_API_KEY"}, {&c.OpenAIBaseURL, "OPENAI_BASE_URL"}, {&c.AnthropicAPIKey, "ANTHROPIC_API_KEY"}, {&c.GeminiAPIKey, "GEMINI_API_KEY"},
		{&c.TavilyAPIKey, "TAVILY_API_KEY"}, {&c.BraveAPIKey, "BRAVE_API_KEY"}} {
		if *v.dst == "" {
			*v.dst = getenv(v.env)
		}
	}
	if err := c.validate(); err != nil {
		return err
	}
	log, err := newLogger(stderr, c.LogLevel, c.LogFormat)
	if err != nil {
		return err
	}
	instance := c.instanceID()
	// Flushed last (deferred first): the spans of the runs stopped at shutdown go out too.
	stopTracing, err := startTracing(ctx, getenv, instance, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	store, err := openDatabase(ctx, c.DB, c.DatabaseURL, c.Migrate)
	if err != nil {
		return err
	}
	defer store.Close()
	if c.DatabaseURL == "" {
		// The operator's own setting, not a secret: logged as it is (redact.Safe).
		log.Info("database", "store", "sqlite", "db", redact.Safe(c.DB))
	} else {
		log.Info("database", "store", store.Name) // the URL without its password, redacted further
	}
	// A run killed between its tool calls and their results left those calls open: answer them
	// before any new run starts, so that every stored history is a valid OpenAI history again.
	if n, err := agent.CloseInterruptedCalls(ctx, store, time.Now); err != nil {
		return fmt.Errorf("closing interrupted tool calls: %w", err)
	} else if n > 0 {
		log.Warn("closed tool calls of interrupted runs", "tool_messages", n)
	}

	blobs, err := openBlobs(ctx, &c, getenv, log)
	if err != nil {
		return err
	}
	fileSvc := files.New(files.Config{Store: store, Blobs: blobs, MaxFileBytes: c.MaxFileBytes, Quota: c.FileQuota,
		TextBudget: c.AttachTextBytes, MaxInline: c.AttachInlineBytes, Log: log})
	// Blobs whose files went with a session deleted in a crash's window, or whose collection a
	// crash interrupted, are collected before the first upload.
	if n, err := fileSvc.Sweep(ctx); err != nil {
		log.Warn("collecting unreferenced blobs", "err", err)
	} else if n > 0 {
		log.Info("collected unreferenced blobs", "blobs", n)
	}

	guard, err := newGuard(ctx, &c, store, log)
	if err != nil {
		return err
	}
	defer guard.close()
	defer sweeper(ctx, store, c.EventRetention, c.ApprovalRetention, log)()
	met := metrics.New()
	reg := tools.NewRegistry(tools.WithTimeout(c.ToolTimeout), tools.WithLogger(log), tools.WithObserver(met.ToolCall),
		tools.WithBreakers(c.ToolBreakerFails, c.ToolBreakerCool, time.Now),
		tools.WithGuard(tools.Guard{
			Limits:    guardpkg.Limits{MaxString: c.ToolMaxString, MaxDepth: c.ToolMaxDepth},
			Injection: c.InjectionGuard,
			Quotas:    guard.limiter, UserRate: guard.toolUserRate, ToolRate: guard.toolRate,
		}))
	if err := builtin.Register(reg, time.Now); err != nil {
		return err
	}
	if err := builtin.RegisterWorkspace(reg, store, time.Now); err != nil {
		return err
	}
	// The executor tools are built-in too: registered before the MCP servers', whose tools of the
	// same names are then left out (and logged).
	models, err := newRouter(&c, getenv, log)
	if err != nil {
		return err
	}
	execs, err := registerExecutors(&c.executorConfig, reg, store.Store, models.Resolve, fileSvc, getenv, log)
	if err != nil {
		return err
	}
	mcpServers, err := startMCP(ctx, &c, reg, log)
	if err != nil {
		return err
	}
	// Stopped after the runs that may call them; stdio servers' processes end with it. Once:
	// a signal stops them before the HTTP server, every other way out here.
	stopMCP := sync.OnceFunc(func() { mcpServers.Close() })
	defer stopMCP()

	peers := newCluster(guard.redis, instance, log, met.RelayLag)
	runOpts := runOptions(&c, store, instance, log, met)
	peers.wire(&runOpts)
	runMgr := runs.NewManager(runOpts)
	peers.start(runMgr)
	// Stopped after the runs (deferred calls run last first), so that their last events reach
	// the other instances.
	defer peers.stop()
	// The runs stop before anything they use (deferred calls run last first), on every path: a
	// run still going on is given the grace, then aborted, and its end is stored.
	// Once: a signal stops them while their clients still watch, every other way out here.
	stopRuns := sync.OnceFunc(func() {
		gctx, cancel := context.WithTimeout(context.Background(), c.ShutdownGrace)
		defer cancel()
		if err := runMgr.Shutdown(gctx); err != nil {
			log.Warn("active runs were aborted at shutdown", "err", err)
		}
	})
	defer stopRuns()
	toolPolicy, _ := approval.Parse(c.ToolPolicy) // checked with the flags
	approvals := &approval.Resolver{Server: toolPolicy, Default: c.ToolPolicyDefault, Store: store,
		Hints: func(tool string) approval.Hints {
			ro, d := reg.Hints(tool)
			return approval.Hints{ReadOnly: ro, Destructive: d}
		}}
	// The agent reads sessions' histories through it; the chat service tells it of the messages
	// it stores, so that they are not read back.
	history := historycache.New(store, int64(c.HistoryCacheMB)<<20)
	ag := agent.New(agent.Config{
		Approvals:         approvals,
		ApprovalTimeout:   c.ApprovalTimeout,
		Store:             store,
		History:           history,
		Resolve:           models.Resolve,
		ModelTimeout:      c.ProviderTimeout,
		Tools:             reg,
		MaxIterations:     c.MaxIterations,
		MaxParallelTools:  c.MaxParallelTools,
		MaxToolCalls:      c.MaxToolCalls,
		ToolHistoryRounds: c.ToolHistoryRounds,
		SystemPrompt:      c.SystemPrompt,
		TraceContent:      c.TraceContent,
		Attachments:       fileSvc,
		SessionPrompt: func(ctx context.Context, sessionID string, sess *parley.Session) (string, error) {
			if sess != nil {
				return workspace.PromptForSession(ctx, store, sess, c.MemoryPromptTokens)
			}
			return workspace.PromptFor(ctx, store, sessionID, c.MemoryPromptTokens)
		},
		Metrics: met,
		Log:     log,
	})
	svc := &chat.Service{
		Store:        store,
		Runs:         runMgr,
		Agent:        ag,
		ResolveModel: func(m string) (string, error) { _, full, err := models.Resolve(m); return full, err },
		CheckTools:   func(sel []string) error { _, err := reg.Specs(sel); return err },
		DefaultModel: models.Default(),
		MaxMessage:   c.MaxMessageChars,
		Recovery:     ag,
		Files:        fileSvc,
		History:      history,
	}
	maxStreams := c.MaxStreams
	if maxStreams == 0 {
		maxStreams = -1 // the flag's "no bound" is Deps' negative (its 0 is the default)
	}
	met.AddBreakers(func() []metrics.Breaker {
		ts, ss := toolInfos(reg, mcpServers)
		return breakerStates(modelInfos(models), ts, ss)
	})
	var closing atomic.Bool
	// /metrics is served on its own listener when --metrics-addr names one, else on the API's,
	// for admin identities only.
	var metricsOnAPI http.Handler
	if c.MetricsAddr == "" {
		metricsOnAPI = met.Handler()
	}
	// The WebSockets, which outlive their handlers, end with this, cancelled with baseCtx below.
	streamsCtx, endStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer endStreams()
	// A streamed chat's connection taken over from net/http goes back to the HTTP server through
	// its listener (gl, set below, before anything is served) once the chat's response has ended.
	var gl *httpapi.GiveBackListener
	handler := httpapi.NewServer(httpapi.Deps{
		GiveBack:     func(c net.Conn) bool { return gl.GiveBack(c) },
		Lifetime:     streamsCtx,
		Auth:         guard.auth,
		Guests:       c.Guests,
		GuestTTL:     c.GuestTTL,
		Limiter:      guard.limiter,
		UserRate:     guard.userRate,
		GuestRate:    guard.guestRate,
		RealIPHeader: c.RealIPHeader,
		CORSOrigins:  c.corsOrigins(),
		Store:        store,
		Chat:         svc,
		Runs:         runMgr,
		Approvals:    &approval.Service{Store: store, CheckArgs: reg.CheckArgs, Notify: runMgr.NotifyApproval},
		Files:        fileSvc,
		Tools:        func() ([]httpapi.ToolInfo, []httpapi.ServerInfo) { return toolInfos(reg, mcpServers) },
		Models:       func() []httpapi.ModelInfo { return modelInfos(models) },
		Ready: func(ctx context.Context) error {
			if closing.Load() {
				return errors.New("shutting down")
			}
			return store.Ping(ctx)
		},
		Log:               log,
		MaxBodyBytes:      c.MaxBodyBytes,
		BodyBudget:        c.BodyBudget,
		BodyTimeout:       c.BodyTimeout,
		AuthRecheck:       c.AuthRecheck,
		Heartbeat:         c.Heartbeat,
		WriteTimeout:      c.WriteTimeout,
		MaxStreamsPerUser: maxStreams,
		StreamIdle:        c.StreamIdle,
		StreamLifetime:    c.StreamLifetime,
		Metrics:           met,
		MetricsHandler:    metricsOnAPI,
		AccessLog:         c.AccessLog,
		OpenAI: &openaiapi.Backend{Agent: ag, Resolve: models.Resolve, ModelTimeout: c.ProviderTimeout,
			MaxInline: c.MaxRuns, Metrics: met},
		Artifacts:    execs.artifacts,
		ArtifactURLs: execs.signer,
		SearchCosts:  execs.costs,
	})

	// Listening comes before any run is taken back: an address in use touches no run.
	ln, err := listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	ln = httpapi.LimitConnsPerAddr(ln, c.MaxConnsPerAddr, log)
	// Plain HTTP only (no TLS is served here): a connection given back is read as it was.
	gl = httpapi.ListenGiveBack(ln)
	ln = gl
	stopMetrics := func() {}
	if c.MetricsAddr != "" {
		mln, err := listen("tcp", c.MetricsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		stopMetrics = serveMetrics(mln, met.Handler(), log)
		log.Info("metrics listening", "addr", mln.Addr().String())
	}
	defer stopMetrics()
	if c.PprofAddr != "" {
		pln, err := listen("tcp", c.PprofAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("pprof listener: %w", err)
		}
		defer servePprof(pln, log)()
		log.Info("pprof listening", "addr", pln.Addr().String())
	}
	// Streams end when baseCtx is cancelled, which happens before Shutdown: Shutdown does not
	// interrupt active connections, so without this a long SSE stream would hold it up.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	context.AfterFunc(baseCtx, endStreams)
	srv := &http.Server{
		Handler:           handler,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// The socket takes connections from here on; they are served once Serve starts, after Start.
	log.Info("listening", "addr", ln.Addr().String(), "instance", instance, "default_model", models.Default(), "version", version)
	// Runs this instance left running before it restarted go on now, in the background (the
	// server serves meanwhile); runs of instances that stopped go on here once their lease ends.
	// Before Serve: no run is begun before the manager knows when it started.
	runMgr.Start(svc.Recover)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	// stopHTTP ends the streams and stops the HTTP server. Both ways out below call it before
	// the deferred releases: at once when serving failed, after the runs' grace on a signal (so
	// that clients watch the runs to their end).
	stopHTTP := func() error {
		cancelBase()
		shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelShut()
		if err := srv.Shutdown(shutCtx); err != nil {
			log.Warn("http shutdown", "err", err)
		}
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}

	select {
	case err := <-serveErr:
		serveErr <- err // for stopHTTP
		closing.Store(true)
		if herr := stopHTTP(); herr != nil {
			err = herr
		}
		log.Error("the HTTP server failed: stopping", "err", err)
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "active_runs", runMgr.ActiveCount(), "grace", c.ShutdownGrace)
	closing.Store(true)
	// The runs get their grace while their clients still watch them; then the streams end.
	stopRuns()
	stopMCP()
	if err := stopHTTP(); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// servePprof serves Go's profiles under /debug/pprof/ on ln until the returned stop is called. It
// turns on the mutex and block profiles (a sample of 1 in 100 contention events, and blocking
// events of 10 µs or more), which cost a little on every lock and channel wait while it runs.
func servePprof(ln net.Listener, log *slog.Logger) (stop func()) {
	runtime.SetMutexProfileFraction(100)
	runtime.SetBlockProfileRate(10_000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("the pprof listener failed", "err", err)
		}
	}()
	return sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
	})
}

// serveMetrics serves GET /metrics (and nothing else) on ln until the returned stop is called.
func serveMetrics(ln net.Listener, h http.Handler, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("the metrics listener failed", "err", err)
		}
	}()
	return sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-done
	})
}

// breakerStates lists the breakers of the provider endpoints (one per provider, whichever of its
// models lists it), the tools and the MCP servers, for the metrics.
func breakerStates(ms []httpapi.ModelInfo, ts []httpapi.ToolInfo, ss []httpapi.ServerInfo) []metrics.Breaker {
	var out []metrics.Breaker
	for _, m := range ms {
		out = append(out, metrics.Breaker{Kind: "provider", Name: m.Provider, State: m.Breaker})
	}
	for _, t := range ts {
		out = append(out, metrics.Breaker{Kind: "tool", Name: t.Name, State: t.Breaker})
	}
	for _, s := range ss {
		out = append(out, metrics.Breaker{Kind: "mcp_server", Name: s.Name, State: s.Breaker})
	}
	return out
}

// runOptions are the options of the run manager. Its stores are the opened store itself, not
// the database that wraps it: the manager asks the store what else it can do (a
// parley.RunBeginner writes a run's beginning and its end in one transaction each), and the
// wrapper answers only for the methods of parley.Store.
func runOptions(c *config, store *database, instance string, log *slog.Logger, met *metrics.Metrics) runs.Options {
	return runs.Options{Retain: c.RunRetain, Log: log, MaxActive: c.MaxRuns, Events: store.Store, PauseTimeout: c.PauseTimeout,
		Runs: store.Store, Instance: instance, Lease: c.RunLease, Metrics: met, ApprovalPoll: c.ApprovalPoll, MaxBytes: c.StreamRingBytes,
		BacklogBytes: c.StreamBacklogBytes}
}
