package runs

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
)

// Broadcast. Every client of a session reads the same events, so a session with subscribers on
// this instance gets one hub: a goroutine that follows the session once (Follow), encodes each
// event to JSON once, and appends it to each subscriber's bounded queue. The hub never waits on a
// subscriber: one whose queue is full is detached, drains what it has, reads what it missed on its
// own (memory, store, relay: Follow's sources) and joins the hub again once it has caught up. A
// subscriber joining behind the hub (resuming from an older event) does the same.

// Frame is one event of a session's stream with its JSON encoding (the SSE event's data), made
// once and shared by every subscriber: read it, never change it.
type Frame struct {
	parley.Event
	JSON []byte
}

const (
	// hubRing and hubRingBytes bound the latest frames a hub keeps for subscribers that join it
	// a little behind (a catch-up read racing the live run).
	hubRing      = 1024
	hubRingBytes = 4 << 20
	// subQueue and subQueueBytes bound the frames waiting for one subscriber; a subscriber that
	// falls further behind is detached and catches up on its own.
	subQueue      = 1024
	subQueueBytes = 8 << 20
	// hubRetry is how long a hub waits before following again after a failed read.
	hubRetry = time.Second
)

// hub follows one session for its subscribers on this instance. Its goroutine is owned by its
// subscriptions: the last one to close stops it and waits for it.
type hub struct {
	m       *Manager
	session string
	cancel  context.CancelFunc
	done    chan struct{}
	refs    int // open subscriptions, under m.mu

	mu sync.Mutex
	// pos is the Seq of the last event pushed (Join before the first); from is the Seq after
	// which the ring holds every pushed event (Join while nothing has been pushed to a hub that
	// started at Join, which pushes from the first run it finds).
	pos, from int64
	ring      []*Frame
	ringBytes int                        // the JSON the ring holds
	subs      map[*Subscription]struct{} // the attached subscriptions
}

// Subscription is one client's view of a session's stream, from Subscribe. Its consumer (one
// goroutine) waits on Ready and calls Next; Close ends it.
type Subscription struct {
	m       *Manager
	h       *hub
	session string
	ready   chan struct{} // capacity 1: Next may have something

	after int64 // the Seq of the last event handed out; only the consumer touches it

	mu       sync.Mutex
	queue    []*Frame // pushed by the hub, not yet handed out
	queued   int      // the JSON bytes in queue
	spare    []*Frame // the queue handed out last time, reused
	attached bool
	closed   bool
	detached bool // detached by the hub and not attached again yet
}

// Subscribe returns a subscription to the session's events after seq `after` (Join: from the
// active run's first event, or the next run's), in order, each once, as Follow gives them. The
// subscription lives until Close, which the caller must call.
func (m *Manager) Subscribe(ctx context.Context, sessionID string, after int64) *Subscription {
	// A new hub starts where the session is now (its join point), not at this subscriber's
	// point, which may lie far back in the store: that is the subscriber's to read.
	start := after
	if after < 0 {
		after = m.joinPoint(ctx, sessionID)
		start = after
	} else {
		m.mu.Lock()
		h := m.hubs[sessionID]
		m.mu.Unlock()
		if h == nil {
			if now := m.joinPoint(ctx, sessionID); now == Join || now > after {
				start = now
			}
		}
	}
	s := &Subscription{m: m, session: sessionID, after: after, ready: make(chan struct{}, 1)}
	m.mu.Lock()
	h := m.hubs[sessionID]
	if h == nil {
		hctx, cancel := context.WithCancel(m.ctx)
		h = &hub{m: m, session: sessionID, cancel: cancel, done: make(chan struct{}),
			pos: start, from: start, subs: map[*Subscription]struct{}{}}
		m.hubs[sessionID] = h
		go h.run(hctx, start)
	}
	h.refs++
	s.h = h
	m.mu.Unlock()
	h.attach(s, false, 0)
	s.signal() // the consumer's first Next: the ring's frames, or the first catch-up read
	return s
}

// Ready is signalled when Next may have frames.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

func (s *Subscription) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Next returns the frames that have come since the last call, in order, possibly none. A
// subscription catching up reads its next batch here (within the store's timeout), and signals
// Ready again while it has more to read. The frames are valid until the next call.
func (s *Subscription) Next(ctx context.Context) ([]*Frame, error) {
	s.mu.Lock()
	q := s.queue
	s.queue, s.spare, s.queued = s.spare[:0], q, 0
	attached := s.attached
	s.mu.Unlock()

	out := q[:0]
	for _, f := range q {
		if f.Seq > s.after {
			out = append(out, f)
			s.after = f.Seq
		}
	}
	clear(q[len(out):]) // let the frames handed out before go
	if attached || len(out) > 0 {
		if !attached {
			s.signal() // drained what the hub pushed before detaching: catch up next
		}
		return out, nil
	}
	return s.catchUp(ctx)
}

// catchUp reads the next batch after s.after on the subscription's own, then joins the hub if it
// has caught up with it.
func (s *Subscription) catchUp(ctx context.Context) ([]*Frame, error) {
	h := s.h
	h.mu.Lock()
	mark := h.from
	h.mu.Unlock()
	var out []*Frame
	next, moved, err := s.m.step(ctx, s.session, s.after, false, func(evs []parley.Event) error {
		out = append(out, s.m.encode(evs)...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.after = next
	if !h.attach(s, !moved, mark) {
		s.signal() // more to read
	}
	return out, nil
}

// Close ends the subscription; the last one of a hub stops it and waits for its goroutine.
func (s *Subscription) Close() {
	h := s.h
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed, s.attached, s.queue, s.spare = true, false, nil, nil
	s.mu.Unlock()

	m := s.m
	m.mu.Lock()
	h.refs--
	last := h.refs == 0
	if last && m.hubs[s.session] == h {
		delete(m.hubs, s.session)
	}
	m.mu.Unlock()
	if last {
		h.cancel()
		<-h.done
	}
}

// attach joins s to the hub when the hub will push every event after s.after that s has not had:
// s is at or after the ring's start, or s has read everything there is (caughtUp) and the hub has
// dropped nothing from its ring since s took mark (what the ring lacks, s could not read either:
// events past the store's retention). It hands s the ring's frames after s.after.
func (h *hub) attach(s *Subscription, caughtUp bool, mark int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case s.after < 0: // the next run: whatever the hub pushes from now
		if h.pos >= 0 {
			s.after = h.pos
		}
	case h.from >= 0 && s.after >= h.from:
	case caughtUp && (h.from < 0 || h.from == mark):
	default:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true
	}
	s.attached = true
	if s.detached {
		s.detached = false
		if mt := h.m.opts.Metrics; mt != nil {
			mt.SubscriberCaughtUp()
		}
	}
	for _, f := range h.ring {
		if f.Seq > s.after {
			s.queue = append(s.queue, f)
			s.queued += len(f.JSON)
		}
	}
	if len(s.queue) > 0 {
		s.signal()
	}
	h.subs[s] = struct{}{}
	return true
}

// run follows the session until the last subscription closes, pushing each batch to the
// subscribers. A failed read (the store) is logged and followed again from where it stopped.
func (h *hub) run(ctx context.Context, start int64) {
	defer close(h.done)
	for {
		err := h.m.Follow(ctx, h.session, start, h.push)
		if ctx.Err() != nil {
			return
		}
		h.m.opts.Log.Warn("following a session for its subscribers failed; trying again", "session", h.session, "err", err)
		select {
		case <-time.After(hubRetry):
		case <-ctx.Done():
			return
		}
		h.mu.Lock()
		start = h.pos
		h.mu.Unlock()
	}
}

// push hands a batch to every attached subscriber; one whose queue would overflow is detached.
func (h *hub) push(evs []parley.Event) error {
	frames := h.m.encode(evs)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.from < 0 {
		h.from = evs[0].Seq - 1
	}
	h.pos = evs[len(evs)-1].Seq
	h.ring = append(h.ring, frames...)
	size := 0
	for _, f := range frames {
		size += len(f.JSON)
	}
	h.ringBytes += size
	over := 0
	for over < len(h.ring) && (len(h.ring)-over > hubRing || h.ringBytes > hubRingBytes) {
		h.ringBytes -= len(h.ring[over].JSON)
		h.from = h.ring[over].Seq
		over++
	}
	if over > 0 {
		clear(h.ring[:over])
		h.ring = h.ring[over:]
	}
	for s := range h.subs {
		if !s.deliver(frames, size) {
			delete(h.subs, s)
		}
	}
	return nil
}

// deliver queues frames (size bytes of JSON) for the subscriber and signals it; it reports false,
// detaching it, when they would overflow its queue.
func (s *Subscription) deliver(frames []*Frame, size int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue)+len(frames) > subQueue || s.queued+size > subQueueBytes {
		s.attached, s.detached = false, true
		if mt := s.m.opts.Metrics; mt != nil {
			mt.SubscriberDetached()
		}
	} else {
		s.queue = append(s.queue, frames...)
		s.queued += size
	}
	s.signal()
	return s.attached
}

// encode makes the frames of a batch. An event that cannot be encoded (a bug) is logged and left
// out: no client could read it.
func (m *Manager) encode(evs []parley.Event) []*Frame {
	frames := make([]*Frame, 0, len(evs))
	for i := range evs {
		b, err := json.Marshal(&evs[i])
		if err != nil {
			m.opts.Log.Error("could not encode an event", "session", evs[i].SessionID, "seq", evs[i].Seq, "err", err)
			continue
		}
		frames = append(frames, &Frame{Event: evs[i], JSON: b})
	}
	return frames
}
