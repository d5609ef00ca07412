// Package runs owns the server's runs. A run belongs to the server, not to the request that started
// it: its context derives from the manager's, its events go to its session's stream (package
// stream), which any number of clients read, and it goes on when every client has left. runs keeps
// the lifecycle of runs, pause, leases and control; the stream numbers, keeps, stores, relays and
// fans out their events.
package runs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/deadline"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/stream"
)

// Func is a run's body. It emits events (Type and payload only; the manager stamps Seq, RunID and
// SessionID) and returns how the run finished. A non-nil error becomes an error event.
type Func func(ctx context.Context, emit func(parley.Event)) (finish string, err error)

// Options configure a Manager.
type Options struct {
	Retain time.Duration // how long a finished run stays known (Get, Latest; default 5m)
	// MaxEvents and MaxBytes bound each session's ring of recent events (defaults
	// stream.DefaultRingEvents and stream.DefaultRingBytes); older events are read from Events.
	MaxEvents int
	MaxBytes  int
	// BacklogBytes is the budget for the events all runs hold waiting for Events, shared among
	// the runs writing at once (stream.Options.BacklogBytes; default
	// stream.DefaultBacklogBytes).
	BacklogBytes int
	Now          func() time.Time
	Log          *slog.Logger
	// MaxActive is the server's budget of concurrent runs (seed 003 §1's API throttle): Begin
	// refuses a run beyond it with ErrOverloaded. 0 means no budget.
	MaxActive int
	// Events numbers each session's events and keeps them for resuming after a run has left
	// memory. Nil: numbers are kept in memory and events are not stored.
	Events parley.EventStore
	// PauseTimeout bounds how long a run stays paused; then it is aborted (default 10m).
	PauseTimeout time.Duration
	// FlushEvery is how long events wait to be written to Events, so that a stream of small
	// chunks costs a few writes a second (default 100ms); a run's first events wait ten times
	// as long, so that a short run's events are all written with its end (one write).
	FlushEvery time.Duration
	// Runs keeps a durable record of each run, leased to Instance, so that one run per session
	// holds across every instance sharing the store and a run outlives its process (Start). Nil:
	// runs live in memory only.
	Runs parley.RunStore
	// Instance names this process among those sharing Runs; it must be unique among them and
	// stable across restarts, so that a restarted process takes its runs back at once.
	Instance string
	// Lease is how long a run stays this instance's without renewal; renewed every third of it
	// (default 30s). Another instance takes a run over once its lease has ended.
	Lease time.Duration
	// Relay carries runs' events to the other instances and theirs here (package relay, over
	// Redis), so that a client of any instance follows any run live. Nil: one instance.
	Relay Relay
	// SendControl delivers a control action (abort, pause, resume) to the instance running the
	// session's run; it returns the run's state, or the owner's refusal as an error. Nil: control
	// reaches only this instance's runs.
	SendControl func(ctx context.Context, instance, sessionID, runID, action string) (state string, err error)
	// Metrics counts the runs this instance starts and finishes; nil counts nothing.
	Metrics Metrics
	// ApprovalPoll is how often a run waiting for approval reads the store (AwaitApproval;
	// default DefaultApprovalPoll).
	ApprovalPoll time.Duration
}

// Metrics records runs as they start and finish, and what their streams report (readers that fall
// behind, store and relay batches).
type Metrics interface {
	RunStarted()
	RunFinished(reason string) // reason: parley.Finish*
	stream.Metrics
}

// Relay carries a session's events between instances.
type Relay = stream.Relay

// Spec is what a run is begun for.
type Spec struct {
	Session       string
	Model         string
	Owner         string   // who the run acts for
	SelectedTools []string // nil offers every tool
	// NewSession, if set, is Session, created with the run's record, and Messages are stored
	// with it (each given the run's id): one durable write in all, when the store can
	// (OneWrite). Without it, Begin refuses both.
	NewSession *parley.Session
	Messages   []*parley.Message
	// Leaf, if set, is a message of Session that becomes its active leaf as the run begins, so
	// that the run's answer follows it (a regenerated answer, a sibling of the old one). When
	// the store can (OneWrite), it is set in the write of the run's record (RunBegin.Leaf), so
	// that no crash leaves the run without it. Otherwise Leaves sets it, in a second write after
	// the record's; without Leaves, Begin refuses it. A message not of the session fails Begin
	// with ErrNotFound, and the run is not begun.
	Leaf   string
	Leaves LeafSetter
}

// LeafSetter sets a session's active leaf (parley.BranchStore's SetLeaf).
type LeafSetter interface {
	SetLeaf(ctx context.Context, sessionID, messageID string) error
}

// seqBlock is how many sequence numbers a run reserves at a time.
const seqBlock = stream.DefaultBlock

// storeTimeout bounds each write of events and sequence numbers.
const storeTimeout = 10 * time.Second

// storeCtx is the context of a run's beginning's or end's write: ctx's values (nil: none),
// not its cancellation (a client that leaves does not undo a write under way), and a bound of
// storeTimeout, which may end up to 1/64 later. Its deadline shares a timer and a channel with
// the other writes of the moment (internal/deadline): a chat makes two of these, and a
// context.WithTimeout each was a timer set and stopped, a callback and a channel.
func (m *Manager) storeCtx(ctx context.Context) context.Context {
	return m.slots.Detached(ctx, storeTimeout)
}

// Manager starts, tracks and stops runs. One run at a time per session.
type Manager struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the runs
	bg     sync.WaitGroup // Start's lease keeper and its taking back of runs
	// adopting counts the runs being taken over: begun, not yet started (takeOver).
	adopting sync.WaitGroup
	start    sync.Once

	// streams carries the sessions' events: numbering, ring, store, relay and readers.
	streams *stream.Hub
	// slots bound the writes of runs' beginnings and ends (storeCtx).
	slots deadline.Slots

	mu        sync.Mutex
	closing   bool
	runs      map[string]*Run // by run id: active and recently finished
	active    map[string]*Run // by session id
	claimed   map[string]bool // sessions whose run is being begun
	lastOfSes map[string]*Run // the latest run of each session
	// finished holds the ended runs still in runs, in the order they ended (so by endedAt):
	// pruning forgets from its front, never scanning the runs retained.
	finished []*Run

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
	if opts.PauseTimeout <= 0 {
		opts.PauseTimeout = 10 * time.Minute
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 100 * time.Millisecond
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.ApprovalPoll <= 0 {
		opts.ApprovalPoll = DefaultApprovalPoll
	}
	if opts.Instance == "" {
		opts.Instance = parley.NewID()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		opts: opts, ctx: ctx, cancel: cancel,
		runs: map[string]*Run{}, active: map[string]*Run{}, claimed: map[string]bool{}, lastOfSes: map[string]*Run{},
	}
	var metrics stream.Metrics
	if opts.Metrics != nil {
		metrics = opts.Metrics
	}
	m.streams = stream.New(stream.Options{Store: opts.Events, Relay: opts.Relay, RemoteRun: m.remoteRun,
		RingEvents: opts.MaxEvents, RingBytes: opts.MaxBytes, BacklogBytes: opts.BacklogBytes, Block: seqBlock, FlushEvery: opts.FlushEvery,
		Log: opts.Log, Metrics: metrics})
	return m
}

// Run is one execution of the agent loop for a session.
type Run struct {
	ID        string
	SessionID string
	Model     string
	StartedAt time.Time
	// Recovered: this run was taken over from a process that died; its first event is a status
	// RunRecovered rather than a start.
	Recovered bool

	m       *Manager
	ctx     context.Context
	logOnce sync.Once
	logger  *slog.Logger      // Options.Log with the run's run_id and session_id: see log
	parent  trace.SpanContext // the span of the request that began the run, if any
	started bool
	done    chan struct{}

	// begun, for a run started while its beginning was being written (Launch), is closed once
	// that write has committed or failed (beginErr); nil for a run begun before it started.
	begun    chan struct{}
	beginErr error
	exited   chan struct{} // Launch: closed when the body of a run whose beginning failed returns

	// cancelCause cancels ctx with a cause: parley.ErrHandedOver leaves the run to a takeover.
	cancelCause context.CancelCauseFunc

	emitMu sync.Mutex     // one event at a time, whoever emits it
	w      *stream.Writer // the run's events in its session's stream
	ended  bool           // the done event is out: nothing more is appended
	// early holds what the body of a launched run emitted before its beginning was durable
	// (emitBegun, at most maxEarly events), until Launch appends it; earlyState says whether
	// that happened (under emitMu).
	early      []parley.Event
	earlyState int8
	// ending is set before the run's record is ended in the store: a lease renewal that finds
	// the record ended from then on is no takeover.
	ending atomic.Bool

	mu       sync.Mutex
	finish   string
	err      error
	endedAt  time.Time
	released bool
	paused   bool
	pausedAt time.Time
	resumed  chan struct{} // closed when a pause ends
	awaiting bool          // in AwaitApproval
	wake     chan struct{} // a decision on an approval was stored (AwaitApproval); buffered 1
	// final is the run's last message, held to be stored with its end (StoreWithEnd), and
	// finalStored what is told once it is.
	final       *parley.Message
	finalStored func(*parley.Message)
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
// example stores the user's message) and then calls Go, or Release to give the session back. With
// Options.Runs the run's record is stored first; a session running on any instance is ErrBusy.
// When the store is a parley.RunBeginner (OneWrite), the event numbers, the record and the spec's
// new session and messages are one write (BeginRun), and the run's end with the numbers it did
// not use another (FinishRun).
func (m *Manager) Begin(ctx context.Context, spec Spec) (*Run, error) {
	rb := m.beginner()
	if rb == nil && (spec.NewSession != nil || len(spec.Messages) > 0) {
		return nil, parley.Errorf(parley.ECInternal, "runs: this store cannot begin a run with its session and messages")
	}
	if rb == nil && spec.Leaf != "" && spec.Leaves == nil {
		return nil, parley.Errorf(parley.ECInternal, "runs: this store cannot begin a run with its leaf")
	}
	if spec.NewSession != nil && spec.NewSession.ID != spec.Session {
		return nil, parley.Errorf(parley.ECInternal, "runs: the new session is not the run's")
	}
	if err := m.claim(spec.Session, true); err != nil {
		return nil, err
	}
	id := parley.NewID()
	var w *stream.Writer
	if rb != nil {
		// The session (if new), the event numbers, the run's record and its messages: one write.
		rec := m.record(id, spec)
		for _, msg := range spec.Messages {
			msg.RunID = id
		}
		first, err := rb.BeginRun(m.storeCtx(ctx), &parley.RunBegin{NewSession: spec.NewSession, SessionID: spec.Session, Leaf: spec.Leaf, Reserve: seqBlock,
			Run: rec, Messages: spec.Messages})
		if err != nil {
			m.unclaim(spec.Session)
			if parley.CodeOf(err) == parley.ECConflict {
				return nil, ErrBusy
			}
			return nil, err
		}
		w = m.streams.OpenReserved(spec.Session, first, seqBlock)
	} else {
		// Reserved outside the lock: with a store this is a write.
		var err error
		w, err = m.streams.Open(ctx, spec.Session)
		if err != nil {
			m.unclaim(spec.Session)
			return nil, err
		}
		first := w.FirstSeq()
		if m.opts.Runs != nil {
			now := m.opts.Now()
			rec := &parley.RunRecord{ID: id, SessionID: spec.Session, Owner: spec.Owner, Model: spec.Model, SelectedTools: spec.SelectedTools,
				Instance: m.opts.Instance, LeaseUntil: now.Add(m.opts.Lease), FirstSeq: first, CreatedAt: now}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
			err := m.opts.Runs.CreateRun(sctx, rec)
			cancel()
			if err != nil {
				m.unclaim(spec.Session)
				w.Abandon()
				w.Drop()
				if parley.CodeOf(err) == parley.ECConflict {
					return nil, ErrBusy
				}
				return nil, err
			}
		}
		if spec.Leaf != "" {
			// A second write, after the record's: a crash between the two leaves the run with
			// the old leaf. Only a store that is no parley.RunBeginner takes this path.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
			err := spec.Leaves.SetLeaf(sctx, spec.Session, spec.Leaf)
			cancel()
			if err != nil {
				m.unclaim(spec.Session)
				w.Abandon()
				w.Drop()
				if m.opts.Runs != nil {
					m.deleteRecord(id)
				}
				return nil, err
			}
		}
	}
	r, err := m.open(id, spec, w)
	if err == nil {
		// The run's span is a child of the request's (it outlives the request, not the trace).
		r.parent = trace.SpanContextFromContext(ctx)
	}
	if err != nil {
		w.Abandon()
		w.Drop()
		if m.opts.Runs != nil {
			m.deleteRecord(id)
		}
	}
	return r, err
}

// Launch begins a run as Begin does with a store that writes a run's beginning in one write
// (OneWrite), and starts its body while that write is under way, so that the body's first work
// (the model call) overlaps the write's commit. body is given the run (its id, Gate, Begun) and
// returns the run's Func. Nothing of the run reaches a reader before the write is durable: its
// first event (start) is appended once it has committed, and the body's emits wait for it. Launch
// returns once the write has committed. If it fails, the run's context is cancelled, the body's
// events are dropped, Launch waits for the body to return and returns the error: the body must
// store nothing before Begun reports the write durable. The events then (the question the run
// answers) follow start at once, as Go's do: both are in the stream when Launch returns, so a
// client that starts reading then gets them together.
func (m *Manager) Launch(ctx context.Context, spec Spec, body func(r *Run) Func, then ...parley.Event) (*Run, error) {
	rb := m.beginner()
	if rb == nil {
		return nil, parley.Errorf(parley.ECInternal, "runs: this store cannot begin a run in one write")
	}
	if spec.NewSession != nil && spec.NewSession.ID != spec.Session {
		return nil, parley.Errorf(parley.ECInternal, "runs: the new session is not the run's")
	}
	if err := m.claim(spec.Session, true); err != nil {
		return nil, err
	}
	id := parley.NewID()
	rec := m.record(id, spec)
	for _, msg := range spec.Messages {
		msg.RunID = id
	}
	r := m.newRun(id, spec)
	r.parent = trace.SpanContextFromContext(ctx)
	r.begun, r.exited = make(chan struct{}), make(chan struct{})
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		m.unclaim(spec.Session)
		r.cancel()
		return nil, ErrClosing
	}
	r.started = true
	m.wg.Add(1)
	m.mu.Unlock()
	go r.run(body(r), r.emitBegun)

	first, err := rb.BeginRun(m.storeCtx(ctx), &parley.RunBegin{NewSession: spec.NewSession, SessionID: spec.Session, Leaf: spec.Leaf, Reserve: seqBlock,
		Run: rec, Messages: spec.Messages})
	if err != nil {
		m.unclaim(spec.Session)
		if parley.CodeOf(err) == parley.ECConflict {
			err = ErrBusy
		}
	} else {
		w := m.streams.OpenReserved(spec.Session, first, seqBlock)
		if err = m.register(r, w); err != nil {
			w.Abandon()
			w.Drop()
			m.deleteRecord(id)
		}
	}
	if err != nil {
		r.beginErr = err
		r.emitMu.Lock()
		r.early, r.earlyState = nil, earlyDropped
		r.emitMu.Unlock()
		r.cancelCause(err)
		close(r.begun)
		<-r.exited
		close(r.done)
		return nil, err
	}
	r.announce(then...) // before the body's events
	// What the body emitted meanwhile (the model's first chunks, as often as not) goes in now,
	// on this goroutine: it is in the stream when the caller subscribes, without the body's
	// goroutine being woken first.
	r.emitMu.Lock()
	for _, ev := range r.early {
		r.appendLocked(ev)
	}
	r.early, r.earlyState = nil, earlyAppended
	r.emitMu.Unlock()
	close(r.begun)
	return r, nil
}

// earlyState: what became of the events a launched run's body emitted before its beginning was
// durable.
const (
	earlyKept     int8 = iota // the write is under way: they are kept in Run.early
	earlyAppended             // the write committed; Launch appended them after the start
	earlyDropped              // the write failed: they are dropped, and so is what follows
)

// maxEarly bounds the events a launched run's body may emit while its beginning is being
// written; beyond them it waits for the write.
const maxEarly = 64

// record is the durable record of run id, begun for spec.
func (m *Manager) record(id string, spec Spec) *parley.RunRecord {
	now := m.opts.Now()
	return &parley.RunRecord{ID: id, SessionID: spec.Session, Owner: spec.Owner, Model: spec.Model, SelectedTools: spec.SelectedTools,
		Instance: m.opts.Instance, LeaseUntil: now.Add(m.opts.Lease), CreatedAt: now}
}

// emitBegun is emit for the body of a run started before its beginning was durable (Launch).
// While the write is under way it keeps the event (up to maxEarly of them) and returns, so that
// the body goes on reading its model's stream; Launch appends what was kept once the write has
// committed. Past maxEarly it waits for the write. Nothing is emitted if the write failed.
func (r *Run) emitBegun(ev parley.Event) {
	r.emitMu.Lock()
	switch {
	case r.earlyState == earlyKept && len(r.early) < maxEarly:
		if r.early == nil {
			r.early = make([]parley.Event, 0, 4)
		}
		r.early = append(r.early, ev)
		r.emitMu.Unlock()
		return
	case r.earlyState == earlyAppended:
		if !r.ended {
			r.appendLocked(ev)
		}
		r.emitMu.Unlock()
		return
	}
	r.emitMu.Unlock()
	<-r.begun
	if r.beginErr != nil {
		return
	}
	r.emit(ev)
}

// Begun waits until the run's beginning (its record, its session and messages) is durable and
// returns the error of that write: a run whose beginning failed must store nothing. It returns
// nil at once for a run begun before it started (Begin).
func (r *Run) Begun() error {
	if r.begun == nil {
		return nil
	}
	<-r.begun
	return r.beginErr
}

// OneWrite reports whether Begin stores a run's new session and messages with its record in
// one write (Spec.NewSession, Spec.Messages), and a run's end with its unused event numbers.
func (m *Manager) OneWrite() bool { return m.beginner() != nil }

// beginner is the store that writes a run's beginning and end each in one transaction: Runs,
// when it is a parley.RunBeginner and also the store of the events' numbers.
func (m *Manager) beginner() parley.RunBeginner {
	if m.opts.Events == nil || m.opts.Runs == nil {
		return nil
	}
	rb, ok := m.opts.Runs.(parley.RunBeginner)
	if !ok || any(rb) != any(m.opts.Events) {
		return nil
	}
	return rb
}

// claim reserves the session for a run being begun; budget applies MaxActive.
func (m *Manager) claim(sessionID string, budget bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return ErrClosing
	}
	if _, busy := m.active[sessionID]; busy || m.claimed[sessionID] {
		return ErrBusy
	}
	if budget && m.opts.MaxActive > 0 && len(m.active)+len(m.claimed) >= m.opts.MaxActive {
		return ErrOverloaded
	}
	m.claimed[sessionID] = true
	m.pruneLocked()
	return nil
}

func (m *Manager) unclaim(sessionID string) {
	m.mu.Lock()
	delete(m.claimed, sessionID)
	m.mu.Unlock()
}

// open makes a run of the claimed session active, its events written by w.
func (m *Manager) open(id string, spec Spec, w *stream.Writer) (*Run, error) {
	r := m.newRun(id, spec)
	if err := m.register(r, w); err != nil {
		return nil, err
	}
	return r, nil
}

// newRun returns a run of the claimed session, not yet among the manager's runs (register).
func (m *Manager) newRun(id string, spec Spec) *Run {
	rctx, cancelCause := context.WithCancelCause(m.ctx)
	return &Run{
		ID: id, SessionID: spec.Session, Model: spec.Model, StartedAt: m.opts.Now(),
		m: m, ctx: rctx, cancelCause: cancelCause, done: make(chan struct{}),
		wake: make(chan struct{}, 1),
	}
}

// cancel ends the run's context (context.Canceled).
func (r *Run) cancel() { r.cancelCause(nil) }

// register makes r, of a claimed session, active, its events written by w.
func (m *Manager) register(r *Run, w *stream.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.claimed, r.SessionID)
	if m.closing {
		return ErrClosing
	}
	r.w = w
	m.runs[r.ID] = r
	m.active[r.SessionID] = r
	m.lastOfSes[r.SessionID] = r
	return nil
}

// log is the run's logger, made when the run first logs: most runs log nothing, and a logger with
// attributes of its own costs a dozen allocations to make.
func (r *Run) log() *slog.Logger {
	r.logOnce.Do(func() { r.logger = r.m.opts.Log.With("run_id", r.ID, "session_id", r.SessionID) })
	return r.logger
}

// FirstSeq is the sequence number of the run's first event: its readers start after FirstSeq()-1.
func (r *Run) FirstSeq() int64 { return r.w.FirstSeq() }

// LastSeq is the sequence number of the run's last event so far (FirstSeq()-1 before the first).
func (r *Run) LastSeq() int64 {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	return r.w.Next() - 1
}

// deleteRecord deletes the record of a run that never started.
func (m *Manager) deleteRecord(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := m.opts.Runs.DeleteRun(ctx, id); err != nil {
		// The session stays busy until the record's lease ends and another pass takes it over.
		m.opts.Log.Error("could not delete the record of a run never started", "run", id, "err", err)
	}
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
	r.m.mu.Unlock()
	r.w.Abandon()
	r.w.Drop()
	if r.m.opts.Runs != nil {
		r.m.deleteRecord(r.ID)
	}
	r.m.mu.Lock()
	delete(r.m.runs, r.ID)
	if r.m.active[r.SessionID] == r {
		delete(r.m.active, r.SessionID)
	}
	if r.m.lastOfSes[r.SessionID] == r {
		delete(r.m.lastOfSes, r.SessionID)
	}
	close(r.done)
}

// Go starts the run's body in a goroutine owned by the manager. The first event is EventStart and
// the last is EventDone; an error from fn produces an EventError just before EventDone. The
// events then (the question the run answers) follow EventStart at once, before Go returns: a
// client that starts reading then finds them together.
func (r *Run) Go(fn Func, then ...parley.Event) {
	m := r.m
	m.mu.Lock()
	if r.started || r.released {
		m.mu.Unlock()
		return
	}
	r.started = true
	m.wg.Add(1)
	m.mu.Unlock()

	r.announce(then...)
	go r.run(fn, r.emit)
}

// announce appends the run's first event, then the events then, and counts the run started.
func (r *Run) announce(then ...parley.Event) {
	if r.Recovered {
		r.emit(parley.Event{Type: parley.EventStatus, State: parley.RunRecovered, Model: r.Model})
	} else {
		r.emit(parley.Event{Type: parley.EventStart, Model: r.Model})
	}
	for _, ev := range then {
		r.emit(ev)
	}
	if r.m.opts.Metrics != nil {
		r.m.opts.Metrics.RunStarted()
	}
}

// run is the goroutine of a started run: its body (which emits with emit), then its end.
//
// Its frame stays under the body for the whole run (under a streamed answer, the model's read),
// so it keeps only what the body's call needs; the end is afterBody's work. A run's stack comes back
// to 8 KiB after a collection only if, at rest, it uses less than a quarter of 16 KiB less the
// 800 bytes the runtime keeps free (issue 25: memory per active stream).
func (r *Run) run(fn Func, emit func(parley.Event)) {
	defer r.m.wg.Done()
	// Every record logged with the run's context carries its ids; its span is the parent of
	// the model and tool call spans.
	ctx, span := r.startSpan()
	finish, err := r.safeCall(ctx, fn, emit)
	r.afterBody(span, finish, err)
}

// afterBody is what run does once the body returned finish and err: the run's error and done events,
// then its end.
//
//go:noinline
func (r *Run) afterBody(span trace.Span, finish string, err error) {
	m := r.m
	if r.begun != nil {
		<-r.begun
		if r.beginErr != nil {
			// Nothing of the run was stored, nothing of it reached a reader: it leaves no end.
			endSpan(span, "", r.beginErr)
			close(r.exited)
			return
		}
	}
	if errors.Is(context.Cause(r.ctx), parley.ErrHandedOver) {
		// Left running in its record for the instance that takes it over: no end here.
		endSpan(span, "handed_over", nil)
		if serr := r.storeFinal(); serr != nil {
			r.log().Error("the run's answer was not stored", "err", serr)
		}
		r.log().Info("run left to be taken over", "err", err)
		r.leave()
		return
	}
	if err != nil {
		// The body failed after it gave its answer to be stored with the end: stored first.
		if serr := r.storeFinal(); serr != nil {
			r.log().Error("the run's answer was not stored", "err", serr)
		}
		if parley.CodeOf(err) == parley.ECCanceled || errors.Is(err, context.Canceled) {
			finish = parley.FinishAborted
		} else {
			if finish == "" {
				finish = parley.FinishError
			}
			r.log().Error("run failed", "err", err)
			r.emit(parley.Event{Type: parley.EventError, Error: &parley.ErrorBody{Code: parley.CodeOf(err), Message: redact.String(parley.MessageOf(err)),
				RetryAfter: parley.RetryAfterSeconds(err)}})
		}
	}
	finish, err = r.emitDone(finish, err, func(finish string, err error) { endSpan(span, finish, err) })
	if m.afterDone != nil {
		m.afterDone()
	}
	r.end(finish, err)
}

// endAttempts is how many times the end of a run is written when the store is too slow to take it
// within storeTimeout: an overloaded store slows the end of a run down rather than leave its record
// running (which another instance would take for a crash).
const endAttempts = 3

// recordEnd writes the end of the run with write, trying again while the store times out. A
// conflict on a later attempt means an earlier one committed after all (or the run was taken
// over meanwhile): either way, this instance is done with the record. It returns the error it
// logged, or nil.
func (r *Run) recordEnd(write func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := write(r.m.storeCtx(nil))
		switch {
		case err == nil:
			return nil
		case attempt > 1 && parley.CodeOf(err) == parley.ECConflict:
			r.log().Warn("the end of a run was already recorded, or the run was taken over", "err", err)
			return nil
		case errors.Is(err, context.DeadlineExceeded) && attempt < endAttempts:
			r.log().Warn("the store is slow to record the end of a run; trying again", "attempt", attempt, "err", err)
		default:
			r.log().Error("could not record the end of a run", "err", err)
			return err
		}
	}
}

// messageStore is what a run needs of the store to keep a message on its own.
type messageStore interface {
	AppendMessages(ctx context.Context, sessionID string, msgs ...*parley.Message) error
}

// StoreWithEnd takes msg, the run's last message (the answer after which its body returns), to
// be stored with the run's end in one write (parley.RunFinish) instead of one of its own: the
// run announces it (a record event) once it is stored, just before done. It reports false when
// the store cannot (OneWrite is false) or the run already holds one: the caller then stores msg
// and announces it itself. A body that fails or is handed over after it gave its answer has it
// stored on its own first. stored, if set, is told of msg (numbered) once it is stored, before
// the run's done event goes out.
func (r *Run) StoreWithEnd(msg *parley.Message, stored func(*parley.Message)) bool {
	if r.m.beginner() == nil {
		return false
	}
	if _, ok := r.m.opts.Runs.(messageStore); !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.final != nil || !r.endedAt.IsZero() {
		return false
	}
	r.final, r.finalStored = msg, stored
	return true
}

// takeFinal returns the message held for the run's end, if any, and forgets it.
func (r *Run) takeFinal() *parley.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := r.final
	r.final = nil
	return msg
}

// tellStored tells the run's body that msg, its answer held for the end, is stored.
func (r *Run) tellStored(msg *parley.Message) {
	r.mu.Lock()
	stored := r.finalStored
	r.finalStored = nil
	r.mu.Unlock()
	if stored != nil {
		stored(msg)
	}
}

// storeFinal stores the message held for the run's end on its own, and announces it.
func (r *Run) storeFinal() error {
	msg := r.takeFinal()
	if msg == nil {
		return nil
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	return r.storeFinalLocked(msg)
}

// storeFinalLocked stores msg on its own and announces it; with the emit lock held.
func (r *Run) storeFinalLocked(msg *parley.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	err := r.m.opts.Runs.(messageStore).AppendMessages(ctx, r.SessionID, msg)
	cancel()
	if err != nil {
		return fmt.Errorf("storing %s message: %w", msg.Role, err)
	}
	r.tellStored(msg)
	r.appendLocked(parley.Event{Type: parley.EventRecord, Message: msg})
	return nil
}

// emitDone appends the run's last event and returns how the run finished (which changes only
// when its answer, held for the end, could not be stored). Under the emit lock, so that no late
// event (a pause status) slips in: the numbers the run will not use go back first, then the
// session is freed, here and in the run's record (a client that sends its next message as soon
// as it sees done, to any instance, must not be told a run is still active, and the next run
// must go on from done's number + 1), then done goes out.
//
// With a store that writes a run's end in one transaction (OneWrite), that transaction holds
// the run's answer (StoreWithEnd), every event of the run not stored yet, its record and done
// events, the numbers given back and the run's end: one write after the model answered. The
// record and done events reach the session's readers once it committed.
func (r *Run) emitDone(finish string, err error, ended func(finish string, err error)) (string, error) {
	m := r.m
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	r.ending.Store(true)
	free := func(finish string, err error) {
		// Before done goes out: a client that saw done finds the run counted and its span ended.
		if m.opts.Metrics != nil {
			m.opts.Metrics.RunFinished(finish)
		}
		ended(finish, err)
		m.mu.Lock()
		if m.active[r.SessionID] == r {
			delete(m.active, r.SessionID)
		}
		m.mu.Unlock()
	}
	final := r.takeFinal()
	if rb := m.beginner(); rb != nil { // all in one write
		tail := make([]parley.Event, 0, 2) // Finish keeps it: the events of the frames it appends
		end := parley.RunFinish{SessionID: r.SessionID, RunID: r.ID, Instance: m.opts.Instance, Finish: finish, At: m.opts.Now()}
		if final != nil {
			end.Messages = []*parley.Message{final}
			tail = append(tail, parley.Event{Type: parley.EventRecord, Message: final, RunID: r.ID, SessionID: r.SessionID})
		}
		tail = append(tail, parley.Event{Type: parley.EventDone, FinishReason: finish, RunID: r.ID, SessionID: r.SessionID})
		stamped, werr := r.w.Finish(tail, func(evs []parley.EncodedEvent) error {
			end.Events, end.Last, end.Limit = evs, evs[len(evs)-1].Seq, r.w.Limit()
			if eerr := r.recordEnd(func(ctx context.Context) error { return rb.FinishRun(ctx, end) }); eerr != nil && parley.CodeOf(eerr) != parley.ECConflict {
				return eerr // nothing was stored
			}
			if final != nil {
				r.tellStored(final)
			}
			free(finish, err)
			return nil
		})
		if werr == nil {
			r.w.GaveBack(stamped[len(stamped)-1].Seq)
			r.ended = true
			return finish, err
		}
		// Nothing of the end was stored: one write after another, as a store that cannot.
		r.log().Warn("could not store the end of a run in one write; storing it piece by piece", "err", werr)
		if final != nil {
			if serr := r.storeFinalLocked(final); serr != nil {
				r.log().Error("run failed", "err", serr)
				finish, err = parley.FinishError, serr
				r.appendLocked(parley.Event{Type: parley.EventError, Error: &parley.ErrorBody{Code: parley.CodeOf(serr), Message: redact.String(parley.MessageOf(serr))}})
			}
		}
		last := r.w.Next() // done's number
		r.w.GiveBack(last)
		at := m.opts.Now()
		r.recordEnd(func(ctx context.Context) error { return m.opts.Runs.EndRun(ctx, r.ID, m.opts.Instance, finish, at) })
	} else {
		last := r.w.Next() // done's number
		r.w.GiveBack(last)
		if m.opts.Runs != nil { // the session is free on every instance before done goes out
			at := m.opts.Now()
			r.recordEnd(func(ctx context.Context) error {
				return m.opts.Runs.EndRun(ctx, r.ID, m.opts.Instance, finish, at)
			})
		}
	}
	free(finish, err)
	r.ended = true
	r.w.Append(parley.Event{Type: parley.EventDone, FinishReason: finish, RunID: r.ID, SessionID: r.SessionID})
	return finish, err
}

// emit stamps ev with the run's ids and appends it to the session's stream, which numbers it.
func (r *Run) emit(ev parley.Event) {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	if r.ended { // a late status (a pause as the run ended) after done: done stays last
		return
	}
	r.appendLocked(ev)
}

// appendLocked is emit with the emit lock held.
func (r *Run) appendLocked(ev parley.Event) {
	ev.RunID, ev.SessionID = r.ID, r.SessionID
	r.w.Append(ev)
}

// safeCall runs fn and turns a panic into an internal error, so one bad run cannot take the
// server down.
func (r *Run) safeCall(ctx context.Context, fn Func, emit func(parley.Event)) (finish string, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log().Error("run panicked", "panic", p)
			finish, err = parley.FinishError, parley.Errorf(parley.ECInternal, "internal error")
		}
	}()
	return fn(ctx, emit)
}

func (r *Run) end(finish string, err error) {
	r.mu.Lock()
	r.finish, r.err, r.endedAt = finish, err, r.m.opts.Now()
	r.mu.Unlock()
	r.cancel()
	r.w.Close() // the store and the relay have every event
	if r.m.opts.Events != nil {
		r.w.Drop() // readers that come later read the store
	}
	r.m.mu.Lock()
	if r.m.active[r.SessionID] == r {
		delete(r.m.active, r.SessionID)
	}
	r.m.finished = append(r.m.finished, r)
	r.m.mu.Unlock()
	close(r.done)
}

// Abort cancels the run; it ends with FinishAborted once its body has stored what it had.
func (r *Run) Abort() { r.cancel() }

// ErrEnded is returned by Pause and Resume when the run has already ended.
var ErrEnded = parley.Errorf(parley.ECConflict, "the run has already ended")

// Pause asks the run to start no new step: the model call or the batch of tool calls under way
// finishes and streams as usual, and the next one waits in Gate until Resume, Abort, or the
// pause timeout, which aborts the run. Pausing a paused run changes nothing.
func (r *Run) Pause() error {
	r.mu.Lock()
	if !r.endedAt.IsZero() || r.ctx.Err() != nil {
		r.mu.Unlock()
		return ErrEnded
	}
	if r.paused {
		r.mu.Unlock()
		return nil
	}
	r.paused, r.pausedAt, r.resumed = true, r.m.opts.Now(), make(chan struct{})
	r.mu.Unlock()
	r.emit(parley.Event{Type: parley.EventStatus, State: parley.RunPaused})
	return nil
}

// Resume ends a pause. Resuming a run that is not paused changes nothing.
func (r *Run) Resume() error {
	r.mu.Lock()
	if !r.endedAt.IsZero() || r.ctx.Err() != nil {
		r.mu.Unlock()
		return ErrEnded
	}
	if !r.paused {
		r.mu.Unlock()
		return nil
	}
	r.paused = false
	resumed := r.resumed
	r.mu.Unlock()
	// Announced before the run may go on, so that its next events come after this one.
	r.emit(parley.Event{Type: parley.EventStatus, State: parley.RunResumed})
	close(resumed)
	return nil
}

// Paused reports whether the run is paused.
func (r *Run) Paused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused
}

// Gate is where a run's body waits while the run is paused; it is called before each step. It
// returns ctx's error if the run is aborted meanwhile, and aborts the run when the pause lasts
// longer than the pause timeout.
func (r *Run) Gate(ctx context.Context) error {
	for {
		r.mu.Lock()
		if !r.paused {
			r.mu.Unlock()
			return ctx.Err()
		}
		resumed, left := r.resumed, r.m.opts.PauseTimeout-r.m.opts.Now().Sub(r.pausedAt)
		r.mu.Unlock()
		t := time.NewTimer(max(left, 0))
		select {
		case <-resumed: // paused again meanwhile? the loop looks
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			r.emit(parley.Event{Type: parley.EventError, Error: &parley.ErrorBody{Code: parley.ECTimeout,
				Message: fmt.Sprintf("the run was paused for longer than %s and was stopped", r.m.opts.PauseTimeout)}})
			r.cancel()
			return parley.Errorf(parley.ECCanceled, "the run was stopped after a long pause")
		}
	}
}

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

// pruneLocked forgets finished runs older than Retain, oldest first: it stops at the first run
// that ended within Retain, so each claim costs what it forgets, not what is retained.
func (m *Manager) pruneLocked() {
	cutoff := m.opts.Now().Add(-m.opts.Retain)
	n := 0
	for ; n < len(m.finished); n++ {
		r := m.finished[n]
		r.mu.Lock()
		old := r.endedAt.Before(cutoff)
		r.mu.Unlock()
		if !old {
			break
		}
		if m.opts.Events == nil {
			r.w.Drop() // without a store, the ring was the run's only copy
		}
		if m.runs[r.ID] == r {
			delete(m.runs, r.ID)
		}
		if m.lastOfSes[r.SessionID] == r {
			delete(m.lastOfSes, r.SessionID)
		}
	}
	if n > 0 {
		clear(m.finished[:n])
		m.finished = m.finished[n:]
	}
}

// Shutdown stops accepting runs, lets active runs finish until ctx ends, then aborts the rest and
// waits for them to store what they had. It returns ctx's error if runs had to be aborted. Runs
// waiting for approval (Options.Runs set) are not waited for: they are handed over at once
// (handOverAwaiting).
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	m.adopting.Wait() // a run being taken over is started (or given up) before the runs are waited for
	m.handOverAwaiting()
	idle := make(chan struct{})
	go func() { m.wg.Wait(); close(idle) }()
	select {
	case <-idle:
		m.cancel()
		m.bg.Wait()
		return nil
	case <-ctx.Done():
	}
	m.cancel()
	select {
	case <-idle:
	case <-time.After(abortWait):
		m.opts.Log.Error("runs did not end after abort", "active", m.ActiveCount())
	}
	m.bg.Wait()
	return ctx.Err()
}

// abortWait bounds how long Shutdown waits for aborted runs to store what they had.
const abortWait = 15 * time.Second
