// Package runs owns the server's runs. A run belongs to the server, not to the request that started
// it: its context derives from the manager's, its events go to a bus.Log that any number of clients
// read, and it goes on when every client has left.
package runs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/bus"
	"github.com/parleyhq/parley/redact"
)

// Func is a run's body. It emits events (Type and payload only; the manager stamps Seq, RunID and
// SessionID) and returns how the run finished. A non-nil error becomes an error event.
type Func func(ctx context.Context, emit func(parley.Event)) (finish string, err error)

// Options configure a Manager.
type Options struct {
	Retain    time.Duration // how long a finished run's log stays readable (default 5m)
	MaxEvents int           // bound of each run's log (default bus.DefaultMaxEvents)
	Now       func() time.Time
	Log       *slog.Logger
	// MaxActive is the server's budget of concurrent runs (seed 003 §1's API throttle): Begin
	// refuses a run beyond it with ErrOverloaded. 0 means no budget.
	MaxActive int
}

// Manager starts, tracks and stops runs. One run at a time per session.
type Manager struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closing   bool
	runs      map[string]*Run // by run id: active and recently finished
	active    map[string]*Run // by session id
	lastOfSes map[string]*Run // the latest run of each session

	afterDone func() // tests: called between a run's done event and its end
}

// NewManager returns a Manager whose runs live until Shutdown.
func NewManager(opts Options) *Manager {
	if opts.Retain <= 0 {
		opts.Retain = 5 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		opts: opts, ctx: ctx, cancel: cancel,
		runs: map[string]*Run{}, active: map[string]*Run{}, lastOfSes: map[string]*Run{},
	}
}

// Run is one execution of the agent loop for a session.
type Run struct {
	ID        string
	SessionID string
	Model     string
	StartedAt time.Time
	Log       *bus.Log

	m       *Manager
	ctx     context.Context
	cancel  context.CancelFunc
	started bool
	done    chan struct{}

	mu       sync.Mutex
	finish   string
	err      error
	endedAt  time.Time
	released bool
}

// ErrBusy is returned by Begin when the session already has an active run.
var ErrBusy = parley.Errorf(parley.ECConflict, "a run is already active in this session")

// ErrClosing is returned by Begin while the manager shuts down.
var ErrClosing = parley.Errorf(parley.ECUnavailable, "the server is shutting down")

// ErrOverloaded is returned by Begin when the budget of concurrent runs is spent.
var ErrOverloaded = &parley.Error{Code: parley.ECUnavailable, Message: "the server is busy: too many runs at once, try again shortly", RetryAfter: 5 * time.Second}

// Full reports whether the budget of concurrent runs is spent, so that a request can be refused
// before any work is done for it. Begin makes the binding check.
func (m *Manager) Full() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opts.MaxActive > 0 && len(m.active) >= m.opts.MaxActive
}

// Begin claims the session for a new run and returns it, not yet started: the caller prepares (for
// example stores the user's message) and then calls Go, or Release to give the session back.
func (m *Manager) Begin(sessionID, model string) (*Run, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, ErrClosing
	}
	if _, busy := m.active[sessionID]; busy {
		return nil, ErrBusy
	}
	if m.opts.MaxActive > 0 && len(m.active) >= m.opts.MaxActive {
		return nil, ErrOverloaded
	}
	m.pruneLocked()
	ctx, cancel := context.WithCancel(m.ctx)
	r := &Run{
		ID: parley.NewID(), SessionID: sessionID, Model: model, StartedAt: m.opts.Now(),
		Log: bus.NewLog(m.opts.MaxEvents), m: m, ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	m.runs[r.ID] = r
	m.active[sessionID] = r
	m.lastOfSes[sessionID] = r
	return r, nil
}

// Release gives back a run that was begun but never started.
func (r *Run) Release() {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.started || r.released {
		return
	}
	r.released = true
	r.cancel()
	delete(r.m.runs, r.ID)
	if r.m.active[r.SessionID] == r {
		delete(r.m.active, r.SessionID)
	}
	if r.m.lastOfSes[r.SessionID] == r {
		delete(r.m.lastOfSes, r.SessionID)
	}
	r.Log.Close()
	close(r.done)
}

// Go starts the run's body in a goroutine owned by the manager. The first event is EventStart and
// the last is EventDone; an error from fn produces an EventError just before EventDone.
func (r *Run) Go(fn Func) {
	m := r.m
	m.mu.Lock()
	if r.started || r.released {
		m.mu.Unlock()
		return
	}
	r.started = true
	m.wg.Add(1)
	m.mu.Unlock()

	emit := func(ev parley.Event) {
		ev.RunID, ev.SessionID = r.ID, r.SessionID
		r.Log.Append(ev)
	}
	emit(parley.Event{Type: parley.EventStart, Model: r.Model})
	go func() {
		defer m.wg.Done()
		finish, err := r.safeCall(fn, emit)
		if err != nil {
			if parley.CodeOf(err) == parley.ECCanceled || errors.Is(err, context.Canceled) {
				finish = parley.FinishAborted
			} else {
				if finish == "" {
					finish = parley.FinishError
				}
				m.opts.Log.Error("run failed", "run", r.ID, "session", r.SessionID, "err", err)
				emit(parley.Event{Type: parley.EventError, Error: &parley.ErrorBody{Code: parley.CodeOf(err), Message: redact.String(parley.MessageOf(err))}})
			}
		}
		// The session is free before the done event goes out: a client that sends its next
		// message as soon as it sees done must not be told a run is still active.
		m.mu.Lock()
		if m.active[r.SessionID] == r {
			delete(m.active, r.SessionID)
		}
		m.mu.Unlock()
		emit(parley.Event{Type: parley.EventDone, FinishReason: finish})
		if m.afterDone != nil {
			m.afterDone()
		}
		r.end(finish, err)
	}()
}

// safeCall runs fn and turns a panic into an internal error, so one bad run cannot take the
// server down.
func (r *Run) safeCall(fn Func, emit func(parley.Event)) (finish string, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.m.opts.Log.Error("run panicked", "run", r.ID, "panic", p)
			finish, err = parley.FinishError, parley.Errorf(parley.ECInternal, "internal error")
		}
	}()
	return fn(r.ctx, emit)
}

func (r *Run) end(finish string, err error) {
	r.mu.Lock()
	r.finish, r.err, r.endedAt = finish, err, r.m.opts.Now()
	r.mu.Unlock()
	r.cancel()
	r.Log.Close()
	r.m.mu.Lock()
	if r.m.active[r.SessionID] == r {
		delete(r.m.active, r.SessionID)
	}
	r.m.mu.Unlock()
	close(r.done)
}

// Abort cancels the run; it ends with FinishAborted once its body has stored what it had.
func (r *Run) Abort() { r.cancel() }

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Result returns how the run finished ("" while it runs) and its error.
func (r *Run) Result() (finish string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finish, r.err
}

// Get returns an active or recently finished run by id.
func (m *Manager) Get(runID string) (*Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[runID]
	return r, ok
}

// Active returns the session's active run, if any.
func (m *Manager) Active(sessionID string) (*Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.active[sessionID]
	return r, ok
}

// Latest returns the session's most recent run still held in memory, active or finished.
func (m *Manager) Latest(sessionID string) (*Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.lastOfSes[sessionID]
	return r, ok
}

// ActiveCount returns the number of runs in progress.
func (m *Manager) ActiveCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.active)
}

// pruneLocked forgets finished runs older than Retain.
func (m *Manager) pruneLocked() {
	cutoff := m.opts.Now().Add(-m.opts.Retain)
	for id, r := range m.runs {
		r.mu.Lock()
		old := !r.endedAt.IsZero() && r.endedAt.Before(cutoff)
		r.mu.Unlock()
		if old {
			delete(m.runs, id)
			if m.lastOfSes[r.SessionID] == r {
				delete(m.lastOfSes, r.SessionID)
			}
		}
	}
}

// Shutdown stops accepting runs, lets active runs finish until ctx ends, then aborts the rest and
// waits for them to store what they had. It returns ctx's error if runs had to be aborted.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	idle := make(chan struct{})
	go func() { m.wg.Wait(); close(idle) }()
	select {
	case <-idle:
		m.cancel()
		return nil
	case <-ctx.Done():
	}
	m.cancel()
	select {
	case <-idle:
	case <-time.After(abortWait):
		m.opts.Log.Error("runs did not end after abort", "active", m.ActiveCount())
	}
	return ctx.Err()
}

// abortWait bounds how long Shutdown waits for aborted runs to store what they had.
const abortWait = 15 * time.Second
