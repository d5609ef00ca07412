package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
)

// One pump moves a session's stream to a client, whatever the transport: SSE (the native stream),
// the AI SDK UI message stream (SSE too) and the WebSocket. The pump waits on the subscription, the
// heartbeat, the idle deadline, the credentials' recheck and the stream's lifetime; the transport
// encodes the frames (their JSON is made once per event, shared by every client) and says what a
// client is told when its stream ends.
//
// An SSE stream's pump runs in its request's goroutine (run). A WebSocket's runs in a goroutine of
// its own only while it has work (start): after wsPark with nothing to do it parks, holding no
// goroutine, and the subscription, a timer for its next deadline, the connection's reader or the
// end of its context start it again.

// transport writes a subscription's frames to one client.
type transport interface {
	// frames writes a batch, or gathers it to be sent by flush; end: the stream is over after it
	// (a done event it waited for), and what it gathered goes out with the response's end.
	frames(fs []*stream.Frame) (end bool, err error)
	// flush sends what frames gathered. The pump calls it when no more frames are ready, before
	// it waits: events ready together go out in one write.
	flush() error
	// heartbeat keeps the connection alive while nothing else is written.
	heartbeat() error
	// failed tells the client its stream ended because reading it failed.
	failed(err error)
	// revoked tells the client its credentials are no longer valid; the stream then ends.
	revoked(err error)
	// idle tells the client the stream was quiet for StreamIdle; the stream then ends.
	idle()
	// lifetime tells the client the stream was open for StreamLifetime; the stream then ends.
	lifetime()
}

// follow is a session for a pump to start following, from the event after seq `after`.
type follow struct {
	sessionID string
	after     int64
}

// pump is one client's stream. The WebSocket's own inputs (replies to the client's frames, the
// session its first message created, its activity) come in through the optional channels, each
// send followed by kick; an SSE stream leaves them nil.
type pump struct {
	s   *server
	r   *http.Request // the request: its credentials are checked again while the stream is open
	t   transport
	sub *stream.Subscription // nil until there is a session (a WebSocket before its first message)

	heartbeat time.Duration // 0: none (the WebSocket pings on its own)
	park      time.Duration // 0: never parks (run)
	// lifetime, if set, ends the stream after this long as the end of its context's deadline
	// would, without a timer and a context of its own (a detached SSE stream's).
	lifetime time.Duration
	// ownKick: whoever ends the pump's context kicks the pump too (start registers no
	// context.AfterFunc for it: one less context and callback per idle stream).
	ownKick bool
	// detachAt, if set, is when a pump that runs in its request's goroutine (run) hands its
	// stream to detacher, at its first flush from then on: run then returns errDetached, the
	// subscription still open, for the stream to go on without the handler (continueDetached).
	detachAt time.Time
	detacher interface{ takeOver() bool }
	// secret and secretErr, where r is nil, are what bearer read of the request: a stream that
	// outlives its handler keeps them rather than a request.
	secret    string
	secretErr error

	replies  <-chan []byte
	reply    func(b []byte) error
	sessions <-chan follow
	activity <-chan struct{}
	// hold, while set, keeps the pump from reading the subscription: the WebSocket's reader is
	// handling a frame whose reply must go out before the events it may cause (a run's). Whoever
	// clears it sends on activity and kicks the pump.
	hold *atomic.Bool

	// onEnd is called once, in the pump's goroutine, with why it stopped (start only).
	onEnd func(err error)
	done  chan struct{} // closed after onEnd (start only; not made with noDone)
	// noDone: no one waits for done (one channel less per idle stream).
	noDone bool

	// Owned by the goroutine running the loop (handed over under mu).
	ctx                                       context.Context
	idleAt, recheckAt, beatAt, parkAt, lifeAt time.Time
	timer                                     *time.Timer
	armed                                     time.Time // when timer fires; zero: not armed
	gathered                                  bool      // the transport may hold bytes for flush (an SSE head too)
	// lazyUntil, when set, is how long what the transport gathered may wait for what follows:
	// it is only usage events (usageWait).
	lazyUntil time.Time

	mu      sync.Mutex
	started bool        // start was called: before, a kick does nothing (the loop will look anyway)
	running bool        // a goroutine runs the loop
	kicked  bool        // something happened while it ran
	dueOnly bool        // the parked pump was started by its deadline alone: it parks again at once
	ended   bool        //
	wake    *time.Timer // while parked: the next deadline
	stopCtx func() bool // the context.AfterFunc that kicks the pump when its context ends
}

// subscribe makes the pump read the session after seq `after`.
func (p *pump) subscribe(ctx context.Context, sessionID string, after int64) {
	p.sub = p.s.Runs.Subscribe(ctx, sessionID, after)
}

func (p *pump) init(ctx context.Context) {
	now := time.Now()
	p.ctx = ctx
	p.idleAt = now.Add(p.s.StreamIdle)
	if p.s.Auth != nil {
		p.recheckAt = now.Add(p.s.AuthRecheck)
	}
	if p.heartbeat > 0 {
		p.beatAt = now.Add(p.heartbeat)
	}
	p.parkAt = now.Add(p.park)
	if p.lifetime > 0 {
		p.lifeAt = now.Add(p.lifetime)
	}
	p.gathered = true
}

// run pumps in the calling goroutine until ctx ends, the transport ends the stream, a write
// fails, or the stream is idle, revoked or past its lifetime. It returns why it stopped (nil: the
// transport ended it, or ctx ended), and closes the subscription.
func (p *pump) run(ctx context.Context) error {
	p.init(ctx)
	p.park = 0
	err := p.loop()
	if err == errDetached {
		return err // the subscription and deadlines go on with the stream (continueDetached)
	}
	p.stop()
	return err
}

// continueDetached goes on, in goroutines of the pump's own as start's, with a pump whose run
// returned errDetached: its subscription and deadlines are kept; ctx is the stream's own now,
// ended by whoever ends the stream, who kicks the pump too (ownKick); it parks after park with
// nothing to do.
func (p *pump) continueDetached(ctx context.Context, park time.Duration) {
	p.ctx, p.park, p.lazyUntil = ctx, park, time.Time{}
	p.ownKick, p.noDone = true, true
	p.mu.Lock()
	p.started, p.running = true, true
	p.stopCtx = func() bool { return false }
	p.mu.Unlock()
	go p.resume()
}

// start pumps in goroutines of the pump's own, parking when idle, until it stops as run does;
// then onEnd, then done is closed.
func (p *pump) start(ctx context.Context) {
	p.begin(ctx)
	go p.resume()
}

// startHere is start with the pump's first work done in the calling goroutine (a handler about
// to return): a stream that parks at once then costs no goroutine, nor its stack, of its own.
func (p *pump) startHere(ctx context.Context) {
	p.begin(ctx)
	p.resume()
}

// begin readies the pump to be started: the first resume runs it.
func (p *pump) begin(ctx context.Context) {
	p.init(ctx)
	if !p.noDone {
		p.done = make(chan struct{})
	}
	p.mu.Lock()
	p.started = true
	p.running = true
	// Its first work done (an SSE stream's head, a catch-up, a WebSocket's connected status), the
	// pump parks at once, as one started by a deadline does, rather than after wsPark: idle
	// connections opened together would otherwise each hold a goroutine and its stack for that
	// long, whose stacks, freed, stay resident until the runtime returns them.
	p.dueOnly = true
	if p.ownKick {
		p.stopCtx = func() bool { return false }
	} else {
		p.stopCtx = context.AfterFunc(ctx, p.kick)
	}
	p.mu.Unlock()
}

// kick starts the parked pump again, or tells the running one to look again before it parks.
func (p *pump) kick() { p.restart(false) }

// kickDue starts the parked pump at its next deadline (a heartbeat, the recheck of its
// credentials, its idle end): once that is done it parks again at once, rather than after
// wsPark.
func (p *pump) kickDue() { p.restart(true) }

// restart is kick (dueOnly false) and kickDue (dueOnly true).
func (p *pump) restart(dueOnly bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || !p.started {
		return
	}
	if p.running {
		p.kicked = true
		return
	}
	p.running = true
	p.dueOnly = dueOnly
	go p.resume()
}

func (p *pump) resume() {
	p.parkAt = time.Now()
	if !p.dueOnly {
		p.parkAt = p.parkAt.Add(p.park)
	}
	err, ended := p.loopOrPark()
	if !ended {
		return // parked
	}
	p.mu.Lock()
	p.ended = true
	if p.wake != nil {
		p.wake.Stop()
	}
	p.mu.Unlock()
	p.stopCtx()
	p.stop()
	p.onEnd(err)
	if p.done != nil {
		close(p.done)
	}
}

func (p *pump) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.sub != nil {
		p.sub.Close()
	}
}

func (p *pump) loop() error {
	err, _ := p.loopOrPark()
	return err
}

// loopOrPark pumps until the stream ends (ended) or, with park set, the pump has parked.
func (p *pump) loopOrPark() (err error, ended bool) {
	s, ctx := p.s, p.ctx
	for {
		now := time.Now()
		if err, end := p.due(now); end {
			return err, true
		}
		next := p.next()
		// A pump due to park with nothing to do (its first work or a deadline's done, nothing
		// ready) flushes what it gathered and parks here, as the wait below would at once:
		// without a timer of its own, nor a wait on its context, whose Done channel would be
		// made for it and kept for the stream's life. Whatever comes next starts it again
		// (tryPark).
		if p.park > 0 && !now.Before(p.parkAt) && p.nothingReady() && ctx.Err() == nil {
			if p.gathered {
				p.gathered = false
				if err := p.t.flush(); err != nil {
					return errClientGone{err}, true
				}
			}
			if p.tryPark() {
				return nil, false
			}
		}
		if p.park > 0 && p.parkAt.Before(next) {
			next = p.parkAt
		}
		if !p.lazyUntil.IsZero() && p.lazyUntil.Before(next) {
			next = p.lazyUntil
		}
		// Deadlines only move later (activity), so an armed timer that fires earlier than needed
		// is re-armed then: the timer is not reset for every batch.
		switch {
		case p.timer == nil:
			p.timer, p.armed = time.NewTimer(next.Sub(now)), next
		case p.armed.IsZero() || next.Before(p.armed):
			p.timer.Reset(next.Sub(now))
			p.armed = next
		}
		// A reply waiting goes before the events: it answers a frame the client sent before
		// whatever the events that follow may be the effects of.
		select {
		case b := <-p.replies:
			if err := p.reply(b); err != nil {
				return errClientGone{err}, true
			}
			p.parkAt = time.Now().Add(p.park)
			continue
		default:
		}
		var ready <-chan struct{}
		if p.sub != nil && !p.held() {
			ready = p.sub.Ready()
		}
		if p.gathered {
			// What the transport gathered goes out once no more frames are ready, before the
			// pump waits: a run's events made at the same moment (the chunks a model sent in
			// one read), and an SSE response's head with the first of them, share one write.
			// Usage events alone wait for what follows them, for usageWait at most.
			select {
			case <-ready:
			default:
				if p.lazyUntil.IsZero() || !now.Before(p.lazyUntil) {
					p.gathered, p.lazyUntil = false, time.Time{}
					if err := p.t.flush(); err != nil {
						return errClientGone{err}, true
					}
					// All that was written is out: the stream can be handed over here.
					if !p.detachAt.IsZero() && !now.Before(p.detachAt) {
						p.detachAt = time.Time{}
						if p.detacher.takeOver() {
							return errDetached, true
						}
					}
				}
			}
		}
		select {
		case <-ready:
			if p.held() {
				continue // held since Ready: its release wakes the pump (activity)
			}
			frames, err := p.sub.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.t.failed(err)
					return err, true
				}
				return nil, true
			}
			if len(frames) == 0 {
				continue
			}
			was := p.gathered
			end, err := p.t.frames(frames)
			if err != nil {
				return errClientGone{err}, true
			}
			p.gathered = true
			if end {
				return nil, true
			}
			now = time.Now()
			switch {
			case p.park == 0 && !was && onlyUsage(frames):
				p.lazyUntil = now.Add(usageWait)
			case !onlyUsage(frames):
				p.lazyUntil = time.Time{}
			}
			p.idleAt, p.parkAt = now.Add(s.StreamIdle), now.Add(p.park)
		case b := <-p.replies:
			if err := p.reply(b); err != nil {
				return errClientGone{err}, true
			}
			p.parkAt = time.Now().Add(p.park)
		case f := <-p.sessions:
			if p.sub == nil {
				p.subscribe(ctx, f.sessionID, f.after)
			}
			p.parkAt = time.Now().Add(p.park)
		case <-p.activity:
			now = time.Now()
			p.idleAt, p.parkAt = now.Add(s.StreamIdle), now.Add(p.park)
		case <-p.timer.C:
			p.armed = time.Time{}
			// A context that ended before start could take a kick (a WebSocket shut down as it
			// opened) is seen by the loop (the case above), not parked past.
			if p.park > 0 && ctx.Err() == nil && !time.Now().Before(p.parkAt) && p.tryPark() {
				return nil, false
			}
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) { // not the client's leaving, nor a shutdown
				p.t.lifetime()
			}
			return nil, true
		}
	}
}

// usageWait is how long a pump that runs in its request's goroutine (an SSE stream) holds a
// batch of usage events alone, without writing it, for what follows: a usage event ends a model
// call and its message's record comes once that is stored, a store write later, so that both
// go out in one write rather than two. Whatever else is gathered meanwhile ends the wait; so
// does the stream's end, whose last write carries it. A parked pump (a WebSocket, a detached SSE
// stream) does not wait.
const usageWait = 100 * time.Millisecond

// onlyUsage reports whether every frame of fs is a usage event.
func onlyUsage(fs []*stream.Frame) bool {
	for _, f := range fs {
		if f.Type != parley.EventUsage {
			return false
		}
	}
	return len(fs) > 0
}

// due does what is due at now: the end of the lifetime, the idle end, the credentials' recheck,
// the heartbeat.
func (p *pump) due(now time.Time) (err error, end bool) {
	if !p.lifeAt.IsZero() && !now.Before(p.lifeAt) {
		p.t.lifetime()
		return nil, true
	}
	if !now.Before(p.idleAt) {
		p.t.idle()
		return errIdle, true
	}
	if !p.recheckAt.IsZero() && !now.Before(p.recheckAt) {
		p.recheckAt = now.Add(p.s.AuthRecheck)
		secret, err := p.secret, p.secretErr
		if p.r != nil {
			secret, err = bearer(p.r)
		}
		if err := p.s.stillValidSecret(p.ctx, secret, err); err != nil {
			p.t.revoked(err)
			return errRevoked, true
		}
	}
	if !p.beatAt.IsZero() && !now.Before(p.beatAt) {
		p.beatAt = now.Add(p.heartbeat)
		if err := p.t.heartbeat(); err != nil {
			return errClientGone{err}, true
		}
	}
	return nil, false
}

// next returns the pump's next deadline.
func (p *pump) next() time.Time {
	next := p.idleAt
	if !p.lifeAt.IsZero() && p.lifeAt.Before(next) {
		next = p.lifeAt
	}
	if !p.recheckAt.IsZero() && p.recheckAt.Before(next) {
		next = p.recheckAt
	}
	if !p.beatAt.IsZero() && p.beatAt.Before(next) {
		next = p.beatAt
	}
	return next
}

// nothingReady reports whether the pump has nothing to do but flush before it waits: no frame,
// reply, session or activity waiting. (A look, not a wait: what comes after it
// kicks the pump, as it does a pump parked from the wait.)
func (p *pump) nothingReady() bool {
	if len(p.replies) > 0 || len(p.sessions) > 0 || len(p.activity) > 0 {
		return false
	}
	if p.sub == nil || p.held() {
		return true
	}
	select {
	case <-p.sub.Ready():
		return false
	default:
		return true
	}
}

// tryPark gives back the pump's goroutine unless something happened meanwhile: the subscription,
// a timer at the next deadline, the context's end and the reader (kick) start it again.
func (p *pump) tryPark() bool {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil // a parked pump holds only the timer that wakes it
	}
	p.armed = time.Time{}
	if p.sub != nil && !p.held() { // a held pump is kicked by its release
		p.sub.Notify(p.kick)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d := time.Until(p.next())
	if p.wake == nil {
		p.wake = time.AfterFunc(d, p.kickDue)
	} else {
		p.wake.Reset(d)
	}
	if p.kicked {
		p.kicked = false
		p.parkAt = time.Now().Add(p.park)
		return false
	}
	p.running = false
	return true
}

// held reports whether the pump's reads of the subscription are held (hold).
func (p *pump) held() bool { return p.hold != nil && p.hold.Load() }

// Why a pump stopped.
type errClientGone struct{ err error }

func (e errClientGone) Error() string { return "client gone: " + e.err.Error() }
func (e errClientGone) Unwrap() error { return e.err }

var (
	// errDetached: the stream was handed over (detachAt); it goes on without the handler.
	errDetached = errorString("detached")
	errIdle     = errorString("idle timeout")
	errRevoked  = errorString("credentials no longer valid")
)

type errorString string

func (e errorString) Error() string { return string(e) }
