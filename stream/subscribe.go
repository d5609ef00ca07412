package stream

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	parley "github.com/parleyhq/parley"
)

// relayPoll is how often a session's feeder reads the relay and the store without a notification.
const relayPoll = 2 * time.Second

// retryAfter is how long a reader whose store read failed waits before reading again.
const retryAfter = time.Second

// closedChan is always ready.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Subscription is one reader of a session's stream. Its consumer (one goroutine) waits on Ready
// and calls Next; Close ends it.
type Subscription struct {
	h *Hub
	s *session

	// Only the consumer touches these; Ready reads them under s.mu.
	after   int64 // the Seq of the last event handed out
	placed  bool  // false: joined before any run was seen; starts at the first run's
	inRing  bool  // the last Next read the ring
	behind  bool  // fell behind the ring (for the metrics)
	idle    bool  // read the store and the relay to their end at generation idleGen
	idleGen int64
	closed  bool
	buf     []*Frame // the last batch handed out, reused
}

// Subscribe returns a reader of the session's events after seq `after` (Join: from the first
// event of the run in progress here or on another instance, or from the next run), each once, in
// order. The caller must Close it.
func (h *Hub) Subscribe(ctx context.Context, sessionID string, after int64) *Subscription {
	s := h.get(sessionID)
	h.mu.Lock()
	s.subs++
	var feed func()
	if s.subs == 1 && h.opts.Relay != nil {
		feed = s.feederLocked()
	}
	h.mu.Unlock()
	if feed != nil {
		go feed()
	}
	sub := &Subscription{h: h, s: s, after: after, placed: after >= 0}
	s.mu.Lock()
	if after < 0 {
		switch {
		case s.active > 0:
			sub.after, sub.placed = s.active-1, true
		case s.from != Join:
			sub.after, sub.placed = s.last, true // after the latest run seen: the next one
		}
	}
	if sub.placed || h.opts.RemoteRun == nil {
		s.addReaderLocked(sub)
	}
	s.mu.Unlock()
	if !sub.placed && h.opts.RemoteRun != nil {
		first := h.opts.RemoteRun(ctx, sessionID)
		s.mu.Lock()
		if first > 0 {
			sub.after, sub.placed = first-1, true
		}
		s.addReaderLocked(sub)
		s.mu.Unlock()
	}
	return sub
}

// After returns the session's events after seq `after` (Join: as Subscribe), in order, until ctx
// ends (the error ctx's) or the consumer stops; a failed read ends it with its error.
func (h *Hub) After(ctx context.Context, sessionID string, after int64) iter.Seq2[*Frame, error] {
	return func(yield func(*Frame, error) bool) {
		sub := h.Subscribe(ctx, sessionID, after)
		defer sub.Close()
		for {
			select {
			case <-sub.Ready():
			case <-ctx.Done():
				yield(nil, ctx.Err())
				return
			}
			frames, err := sub.Next(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, f := range frames {
				if !yield(f, nil) {
					return
				}
			}
		}
	}
}

// addReaderLocked counts sub among the session's readers: the ring keeps what it has not read.
// Call with s.mu held.
func (s *session) addReaderLocked(sub *Subscription) {
	if s.readers == nil {
		s.readers = map[*Subscription]struct{}{}
	}
	s.readers[sub] = struct{}{}
}

// Ready is ready when Next may have frames. Call it again after each Next: the channel it
// returns serves one wait.
func (sub *Subscription) Ready() <-chan struct{} {
	s := sub.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return sub.readyLocked()
}

// Notify calls fn once when Ready would be ready: at once (from this goroutine) when it is, or
// at the session's next change, from the goroutine making it (fn must not block, nor call
// back into the subscription). A consumer parks with it instead of holding a goroutine on Ready.
func (sub *Subscription) Notify(fn func()) {
	s := sub.s
	s.mu.Lock()
	if sub.closed {
		s.mu.Unlock()
		return
	}
	if sub.readyLocked() != closedChan {
		if s.notify == nil {
			s.notify = map[*Subscription]func(){}
		}
		s.notify[sub] = fn
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	fn()
}

func (sub *Subscription) readyLocked() <-chan struct{} {
	s := sub.s
	switch {
	case sub.closed:
		return s.waitLocked()
	case !sub.placed:
		if s.joinFrom != Join {
			return closedChan
		}
		return s.waitLocked()
	case s.from != Join && sub.after >= s.from:
		if s.last > sub.after {
			return closedChan
		}
		return s.waitLocked()
	case sub.idle && sub.idleGen == s.gen:
		return s.waitLocked() // read everything there was; waits for news
	default:
		return closedChan // behind: reads the store next
	}
}

// Next returns the next frames, in order, possibly none. A reader behind the ring reads its next
// batch from the store, then the relay, here (within the store's timeout; ctx's end does not cut
// the read short, since on PostgreSQL a query cancelled mid-flight costs its connection). The
// frames are valid until the next call.
func (sub *Subscription) Next(ctx context.Context) ([]*Frame, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, h := sub.s, sub.h
	s.mu.Lock()
	if sub.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("stream: subscription closed")
	}
	if !sub.placed {
		if s.joinFrom == Join {
			s.mu.Unlock()
			return nil, nil
		}
		sub.after, sub.placed = s.joinFrom, true
	}
	if s.from != Join && sub.after >= s.from {
		i := s.ring.after(sub.after)
		n := min(s.ring.n-i, 2*readBatch)
		clear(sub.buf)
		// Grown to the batch at once, not by append's doubling from one frame: a chat's stream
		// reads its start, then its answer's chunks together, then its end.
		sub.buf = slices.Grow(sub.buf[:0], n)
		for j := range n {
			sub.buf = append(sub.buf, s.ring.at(i+j))
		}
		if n > 0 {
			sub.after = sub.buf[n-1].Seq
		}
		sub.idle = false
		caughtUp := sub.behind
		sub.inRing, sub.behind = true, false
		s.mu.Unlock()
		if caughtUp && h.opts.Metrics != nil {
			h.opts.Metrics.SubscriberCaughtUp()
		}
		return sub.buf, nil
	}
	// Behind the ring (or no ring yet): read on our own.
	detached := sub.inRing
	if detached {
		sub.inRing, sub.behind = false, true
	}
	mark, gen := s.from, s.gen
	s.mu.Unlock()
	if detached && h.opts.Metrics != nil {
		h.opts.Metrics.SubscriberDetached()
	}
	evs, err := h.read(ctx, s.id, sub.after)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The store failed: logged, and read again a moment later (or on news).
		h.opts.Log.Warn("reading a session's stored events failed; trying again", "session", s.id, "err", err)
		s.mu.Lock()
		sub.idle, sub.idleGen = true, s.gen
		s.mu.Unlock()
		time.AfterFunc(retryAfter, func() {
			s.mu.Lock()
			s.wakeLocked()
			s.mu.Unlock()
		})
		return nil, nil
	}
	if len(evs) > 0 {
		clear(sub.buf)
		sub.buf = append(sub.buf[:0], h.encode(evs)...)
		s.mu.Lock() // the ring's trimming reads where its readers are
		sub.after = evs[len(evs)-1].Seq
		sub.idle = false
		s.mu.Unlock()
		return sub.buf, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mark != Join && sub.after < mark {
		// Nothing stored between here and the ring: those events are gone (past the store's
		// retention) or never were (numbers a crashed process had reserved).
		sub.after = mark
		return nil, nil
	}
	sub.idle, sub.idleGen = true, gen
	return nil, nil
}

// Close ends the subscription; the last one of a session stops its feeder.
func (sub *Subscription) Close() {
	s, h := sub.s, sub.h
	s.mu.Lock()
	if sub.closed {
		s.mu.Unlock()
		return
	}
	sub.closed = true
	clear(sub.buf)
	sub.buf = nil
	delete(s.notify, sub)
	delete(s.readers, sub)
	s.mu.Unlock()
	h.mu.Lock()
	s.subs--
	var stop context.CancelFunc
	var done chan struct{}
	if s.subs == 0 && s.feedCancel != nil {
		stop, done = s.feedCancel, s.feedDone
		s.feedCancel, s.feedDone = nil, nil
	}
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	h.put(s)
}

// readCtx returns the context of one read of the store or the relay: bounded by the store's
// timeout but not cancelled with ctx (see Next).
func readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// read returns up to readBatch of the session's events after `after`: from the store, or when it
// holds none, from the relay (a run of another instance, whose events the store may not have
// yet). A failed relay read is logged and gives nothing: the store has the events later.
func (h *Hub) read(ctx context.Context, sessionID string, after int64) ([]parley.Event, error) {
	if h.opts.Store != nil {
		rctx, cancel := readCtx(ctx)
		evs, err := h.opts.Store.ListEvents(rctx, sessionID, after, readBatch)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("reading stored events: %w", err)
		}
		if len(evs) > 0 {
			return evs, nil
		}
	}
	if h.opts.Relay != nil {
		rctx, cancel := readCtx(ctx)
		evs, err := h.opts.Relay.Range(rctx, sessionID, after, readBatch)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			h.opts.Log.Warn("could not read relayed events", "session", sessionID, "err", err)
			return nil, nil
		}
		return evs, nil
	}
	return nil, nil
}

// feederLocked returns the body of the goroutine that brings the relay's events of a run on
// another instance into the session's ring, for its readers here. Its subscriptions own it: the
// last to close stops it and waits for it. Call with h.mu held.
func (s *session) feederLocked() func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.feedCancel, s.feedDone = cancel, done
	return func() {
		defer close(done)
		tick, stop := s.h.opts.Relay.Watch(s.id)
		defer stop()
		poll := time.NewTicker(relayPoll)
		defer poll.Stop()
		for {
			notified := false
			select {
			case <-tick:
				notified = true
			case <-poll.C:
			case <-ctx.Done():
				return
			}
			s.pull(ctx, notified)
		}
	}
}

// pull brings the events of a run on another instance that the relay (or, for a gap, the store)
// holds after the ring's last into the ring. It does nothing while a run of this instance writes
// the session. Without a run in sight, a notification (something was published: a run too short
// to be seen running) wakes the session's readers, which look themselves; a poll does not, so
// that idle readers do not read the store every poll.
func (s *session) pull(ctx context.Context, notified bool) {
	h := s.h
	s.mu.Lock()
	local, from, tail := s.w != nil, s.from, s.last
	s.mu.Unlock()
	if local {
		return
	}
	if from == Join {
		first := int64(0)
		if h.opts.RemoteRun != nil {
			first = h.opts.RemoteRun(ctx, s.id)
		}
		if first == 0 {
			if notified {
				s.mu.Lock()
				s.wakeLocked()
				s.mu.Unlock()
			}
			return
		}
		s.mu.Lock()
		if s.from == Join && s.w == nil {
			s.from, s.last, s.active = first-1, first-1, first
			if s.joinFrom == Join {
				s.joinFrom = first - 1
			}
		}
		s.wakeLocked()
		tail = s.last
		s.mu.Unlock()
	}
	for range 64 { // bounded: the next tick goes on
		rctx, cancel := readCtx(ctx)
		evs, err := h.opts.Relay.Range(rctx, s.id, tail, readBatch)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				h.opts.Log.Warn("could not read relayed events", "session", s.id, "err", err)
			}
			return
		}
		if h.opts.Store != nil && (len(evs) == 0 || evs[0].Seq > tail+1) {
			// What the relay lacks (it missed a publish, or its window starts later) the store
			// may have.
			rctx, cancel := readCtx(ctx)
			stored, err := h.opts.Store.ListEvents(rctx, s.id, tail, readBatch)
			cancel()
			if err == nil && len(stored) > 0 && (len(evs) == 0 || stored[0].Seq < evs[0].Seq) {
				evs = stored
			}
		}
		if len(evs) == 0 || ctx.Err() != nil {
			return
		}
		frames := h.encode(evs)
		s.mu.Lock()
		if s.w != nil {
			s.mu.Unlock()
			return
		}
		for _, f := range frames {
			if f.Seq <= s.last {
				continue
			}
			s.pushLocked(f)
			switch {
			case f.Type == parley.EventDone:
				s.active = 0
			case s.active == 0 && (f.Type == parley.EventStart || (f.Type == parley.EventStatus && f.state() == parley.RunRecovered)):
				s.active = f.Seq
			}
		}
		s.trimLocked()
		s.wakeLocked()
		tail = s.last
		s.mu.Unlock()
		if len(evs) < readBatch {
			return
		}
	}
}
