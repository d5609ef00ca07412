package mcp

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/parleyhq/parley/breaker"
)

// State is where a supervised server stands.
type State string

// The states of a server.
const (
	StateStarting     State = "starting"     // the first start is under way
	StateReady        State = "ready"        // connected, tools listed
	StateReconnecting State = "reconnecting" // it died or failed to start; a restart is due after a backoff
	StateDown         State = "down"         // its breaker is open: no start until the cooldown ends
	StateStopped      State = "stopped"      // Run returned
	StateDisabled     State = "disabled"     // disabled in the configuration; never started
)

// Health is a server's state as GET /api/v1/tools reports it.
type Health struct {
	Server    string    `json:"server"`
	Transport string    `json:"transport"`
	State     State     `json:"state"`
	Breaker   string    `json:"breaker"`
	Tools     int       `json:"tools"`
	Restarts  int       `json:"restarts"`             // sessions that ended and were started again
	Since     time.Time `json:"since"`                // when it entered State
	LastError string    `json:"last_error,omitempty"` // why the last start failed or the session ended
}

// Health reports the server's state.
func (s *Server) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Health{Server: s.name, Transport: s.cfg.Transport(), State: s.state, Breaker: string(s.breaker.State()),
		Tools: len(s.tools), Restarts: s.restarts, Since: s.since, LastError: s.lastErr}
}

func (s *Server) setState(st State, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st != s.state {
		s.state, s.since = st, s.opts.Now()
	}
	if err != nil {
		s.lastErr = err.Error()
	}
}

// Started is closed once Run's first start has succeeded or failed.
func (s *Server) Started() <-chan struct{} { return s.started }

// Run keeps the server up until ctx ends, then stops it. It starts the server; when the session
// ends (the process died, the connection broke) or a start fails, it starts it again after an
// exponential backoff with jitter. Failed starts in a row open the server's breaker, which holds
// off starts for its cooldown and then lets one trial start decide. A session that ends within
// RetryMax of its start counts toward the backoff, so a server that crashes at once is not
// restarted in a tight loop. Run returns after the server's process has been stopped.
func (s *Server) Run(ctx context.Context) {
	var once sync.Once
	started := func() { once.Do(func() { close(s.started) }) }
	defer started()
	defer func() {
		s.Close()
		s.setState(StateStopped, nil)
	}()
	failures := 0 // failed starts and short-lived sessions in a row
	everReady := false
	for ctx.Err() == nil {
		if failures > 0 && !sleep(ctx, s.backoff(failures)) {
			return
		}
		done, wait, ok := s.breaker.Allow()
		if !ok {
			s.setState(StateDown, nil)
			s.opts.Logger.Warn("mcp server held off by its breaker", "server", s.name, "retry_in", wait)
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.startTimeout(everReady))
		err := s.Connect(cctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				done(breaker.Ignore)
				return
			}
			done(breaker.Failure)
			failures++
			s.setState(StateReconnecting, err)
			s.opts.Logger.Warn("mcp server failed to start", "server", s.name, "err", err, "failures", failures)
			started()
			continue
		}
		done(breaker.Success)
		everReady = true
		s.setState(StateReady, nil)
		s.opts.Logger.Info("mcp server ready", "server", s.name, "tools", len(s.Tools()), "pid", s.PID())
		started()
		up := s.opts.Now()
		if !s.serve(ctx) {
			return
		}
		if s.opts.Now().Sub(up) < s.opts.RetryMax {
			failures++
		} else {
			failures = 1
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		s.setState(StateReconnecting, errSessionEnded)
		s.opts.Logger.Warn("mcp server session ended; restarting", "server", s.name)
	}
}

// startTimeout is the time limit of a start: StartTimeout, or, until the first successful start of
// a server that a package runner may first download, the longer InstallTimeout.
func (s *Server) startTimeout(everReady bool) time.Duration {
	if !everReady && s.cfg.Installs() {
		return max(s.opts.StartTimeout, s.opts.InstallTimeout)
	}
	return s.opts.StartTimeout
}

type sessionEnded struct{}

func (sessionEnded) Error() string {
	return "the session ended (the server exited or the connection broke)"
}

var errSessionEnded error = sessionEnded{}

// serve waits while the current session lives, refreshing the tool list when the server says it
// changed. It reports false when ctx ended (the session is then closed).
func (s *Server) serve(ctx context.Context) bool {
	s.mu.Lock()
	session := s.session
	s.mu.Unlock()
	if session == nil {
		return ctx.Err() == nil
	}
	ended := make(chan struct{})
	go func() { // owned: serve waits for it on every path
		session.Wait()
		close(ended)
	}()
	for {
		select {
		case <-ended:
			s.drop(session) // stops what is left of the process and reaps it
			return ctx.Err() == nil
		case <-s.refresh:
			rctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
			if err := s.Refresh(rctx); err != nil {
				s.opts.Logger.Warn("mcp tool list refresh failed", "server", s.name, "err", err)
			}
			cancel()
		case <-ctx.Done():
			s.drop(session)
			<-ended
			return false
		}
	}
}

// backoff is the wait before the n-th restart in a row (n >= 1): RetryBase doubled per restart up
// to RetryMax, of which a random half to whole is taken.
func (s *Server) backoff(n int) time.Duration {
	return breaker.Backoff(s.opts.RetryBase, s.opts.RetryMax, n, rand.Float64())
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Manager runs a set of configured servers and keeps their tools in a sink (the tool registry).
type Manager struct {
	servers []*Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Start starts every enabled server in cfgs under supervision and waits, at most until ctx ends,
// until each has had its first start. A server that fails to start does not fail Start: it is
// retried in the background and its health says why. sink receives a server's tools whenever
// they are listed; it must not block.
func Start(ctx context.Context, cfgs map[string]ServerConfig, opts Options, sink func(server string, tools []*Tool)) *Manager {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{cancel: cancel}
	names := make([]string, 0, len(cfgs))
	for name := range cfgs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		o := opts
		var srv *Server
		o.OnToolsChanged = func() {
			if sink != nil {
				sink(srv.name, srv.Tools())
			}
		}
		srv = New(name, cfgs[name], o)
		m.servers = append(m.servers, srv)
		if srv.cfg.Disabled {
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			srv.Run(runCtx)
		}()
	}
	// Wait for the first starts, at most StartTimeout in all: a server that takes longer (its
	// package being downloaded) goes on starting in the background, and its tools are added when
	// it is ready.
	wait := opts.StartTimeout
	if wait <= 0 {
		wait = DefaultStartTimeout
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	waiting := true
	for _, srv := range m.servers {
		if srv.cfg.Disabled {
			continue
		}
		if waiting {
			select {
			case <-srv.Started():
				continue
			case <-timer.C:
				waiting = false
			case <-ctx.Done():
				return m
			}
		}
		select {
		case <-srv.Started():
		default:
			msg := "mcp server still starting; Parley goes on without its tools and adds them when it is ready"
			if srv.cfg.Installs() {
				msg = "mcp server still starting (a first start through " + filepath.Base(srv.cfg.Command) +
					" may download it); Parley goes on without its tools and adds them when it is ready"
			}
			srv.opts.Logger.Warn(msg, "server", srv.name, "waited", wait, "start_limit", srv.startTimeout(false))
		}
	}
	return m
}

// Servers returns the managed servers, sorted by name.
func (m *Manager) Servers() []*Server { return append([]*Server(nil), m.servers...) }

// Health reports every server, sorted by name.
func (m *Manager) Health() []Health {
	out := make([]Health, len(m.servers))
	for i, s := range m.servers {
		out[i] = s.Health()
	}
	return out
}

// Close stops every server and waits until their processes are gone.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}
