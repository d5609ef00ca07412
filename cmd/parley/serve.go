package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/historycache"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/tools/builtin"
	guardpkg "github.com/parleyhq/parley/tools/guard"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c config
	fs := flagSet("serve", stderr, "Runs the Parley server.")
	serveFlags(fs, &c)
	if err := parseConfig(fs, args, getenv, c.fileSections()); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
		}
		return err
	}
	// The conventional provider variables, when Parley's own are not set.
	for _, v := range []struct {
		dst *string
		env string
	}{{&c.OpenAIAPIKey, "OPENAI_API_KEY"}, {&c.OpenAIBaseURL, "OPENAI_BASE_URL"}, {&c.AnthropicAPIKey, "ANTHROPIC_API_KEY"}, {&c.GeminiAPIKey, "GEMINI_API_KEY"}} {
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

	store, err := openDatabase(ctx, c.DB, c.DatabaseURL, c.Migrate)
	if err != nil {
		return err
	}
	defer store.Close()
	log.Info("database", "store", store.Name)
	// A run killed between its tool calls and their results left those calls open: answer them
	// before any new run starts, so that every stored history is a valid OpenAI history again.
	if n, err := agent.CloseInterruptedCalls(ctx, store, time.Now); err != nil {
		return fmt.Errorf("closing interrupted tool calls: %w", err)
	} else if n > 0 {
		log.Warn("closed tool calls of interrupted runs", "tool_messages", n)
	}

	guard, err := newGuard(ctx, &c, store, log)
	if err != nil {
		return err
	}
	defer guard.close()
	defer sweeper(ctx, store, c.EventRetention, log)()
	reg := tools.NewRegistry(tools.WithTimeout(c.ToolTimeout), tools.WithLogger(log),
		tools.WithBreakers(c.ToolBreakerFails, c.ToolBreakerCool, time.Now),
		tools.WithGuard(tools.Guard{
			Limits:    guardpkg.Limits{MaxString: c.ToolMaxString, MaxDepth: c.ToolMaxDepth},
			Injection: c.InjectionGuard,
			Quotas:    guard.limiter, UserRate: guard.toolUserRate, ToolRate: guard.toolRate,
		}))
	if err := builtin.Register(reg, time.Now); err != nil {
		return err
	}
	mcpServers, err := startMCP(ctx, &c, reg, log)
	if err != nil {
		return err
	}
	// Stopped after the runs that may call them; stdio servers' processes end with it.
	defer mcpServers.Close()

	models, err := newRouter(&c, getenv, log)
	if err != nil {
		return err
	}

	instance := c.instanceID()
	peers := newCluster(guard.redis, instance, log)
	runOpts := runs.Options{Retain: c.RunRetain, Log: log, MaxActive: c.MaxRuns, Events: store, PauseTimeout: c.PauseTimeout,
		Runs: store, Instance: instance, Lease: c.RunLease}
	peers.wire(&runOpts)
	runMgr := runs.NewManager(runOpts)
	peers.start(runMgr)
	// Stopped after the runs (deferred calls run last first), so that their last events reach
	// the other instances.
	defer peers.stop()
	ag := agent.New(agent.Config{
		Store:             store,
		History:           historycache.New(store, int64(c.HistoryCacheMB)<<20),
		Resolve:           models.Resolve,
		ModelTimeout:      c.ProviderTimeout,
		Tools:             reg,
		MaxIterations:     c.MaxIterations,
		MaxParallelTools:  c.MaxParallelTools,
		MaxToolCalls:      c.MaxToolCalls,
		ToolHistoryRounds: c.ToolHistoryRounds,
		SystemPrompt:      c.SystemPrompt,
		Log:               log,
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
	}
	// Runs this instance left running before it restarted go on now; runs of instances that
	// stopped go on here once their lease ends.
	runMgr.Start(svc.Recover)
	maxStreams := c.MaxStreams
	if maxStreams == 0 {
		maxStreams = -1 // the flag's "no bound" is Deps' negative (its 0 is the default)
	}
	var closing atomic.Bool
	handler := httpapi.NewServer(httpapi.Deps{
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
	})

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	ln = httpapi.LimitConnsPerAddr(ln, c.MaxConnsPerAddr, log)
	// Streams end when baseCtx is cancelled, which happens before Shutdown: Shutdown does not
	// interrupt active connections, so without this a long SSE stream would hold it up.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           handler,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "instance", instance, "db", c.DB, "default_model", models.Default(), "version", version)

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "active_runs", runMgr.ActiveCount(), "grace", c.ShutdownGrace)
	closing.Store(true)
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), c.ShutdownGrace)
	defer cancelGrace()
	if err := runMgr.Shutdown(graceCtx); err != nil {
		log.Warn("active runs were aborted at shutdown", "err", err)
	}
	mcpServers.Close()
	cancelBase()
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	if err := srv.Shutdown(shutCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}
