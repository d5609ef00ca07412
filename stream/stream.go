// Package stream carries each session's stream of run events from the run that produces them to
// the store, to the other instances (a relay) and to any number of readers on this instance.
//
// A producer (a run) opens a Writer on its session, appends events and closes it; the Writer
// numbers the events (reserving sequence numbers in blocks, so that a restart never gives a number
// twice), encodes each to JSON once, keeps the latest in the session's ring, writes them to the
// store in batches and publishes them to the relay. A reader subscribes after a sequence number
// and gets every later event once, in order: from the ring when it holds them, otherwise (it fell
// behind the ring, or joined late) from the store, then the relay, until it reaches the ring again.
//
// The ring is bounded in events and in bytes, so a run's memory does not grow with its answer; it
// never drops an event the store has not taken (a producer that outruns the store waits for it
// once the ring holds its bounds of such events, up to a time bound), so a reader that falls
// behind can always catch up from the store. The events waiting for the store count against the
// ring's bounds: they are the ring's frames, not a queue beside it. Within its bounds the ring
// keeps only what the store has not taken or a reader of the ring has not read: after each store
// write it lets go of the rest, and a reader that joins or resumes from before it reads those
// events from the store. Every reader of a session shares the ring's frames: an event is encoded
// once however many read it.
package stream

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
)

// Join, as a subscription's starting point, joins a session as it is: from the first event of its
// active run (what it has produced so far, then live), or from the next run it begins.
const Join int64 = -1

// Defaults of Options.
const (
	DefaultRingEvents = 4096
	// DefaultRingBytes holds about 120 chunk events (Frame.size), and bounds what a run's
	// events may wait for the store in memory. Holding half as many saved about 100 KiB of
	// resident memory per stream under load (issue 25) but cost a quarter more CPU per chat:
	// under load the store writes went out in batches half as large. (It was 64 KiB for as
	// many events while a frame kept its whole parley.Event: issue 25, tenth pass.)
	DefaultRingBytes  = 32 << 10
	DefaultBlock      = 1024
	DefaultFlushEvery = 100 * time.Millisecond
	// DefaultBacklogBytes is the server's budget for the events its runs hold waiting for the
	// store, shared among the runs writing at once: up to 256 runs each keep their ring's
	// bound of them, 1,000 runs 8 KiB each, about 30 chunk events (issue 25: a store that cannot
	// keep up makes every run hold its bound of unstored events; 16 MiB for as many events
	// while a frame kept its whole parley.Event).
	DefaultBacklogBytes = 8 << 20
)

// backlogFloor is the least a run may hold waiting for the store, however many runs write at
// once (or its ring's bound in bytes, if smaller): below it, a run would wait for the store at
// nearly every event. About 15 chunk events.
const backlogFloor = 4 << 10

// storeTimeout bounds each store or relay call.
const storeTimeout = 10 * time.Second

// backpressureWait bounds how long a producer waits for the store to take the events its ring
// holds; past it the ring drops them anyway (they are then lost to a reader that falls behind).
const backpressureWait = 30 * time.Second

// readBatch bounds the events read from the store or the relay at a time, and handed out by one
// Next.
const readBatch = 256

// writeBatch bounds the events of one store write or relay publish.
const writeBatch = 512

// writeBatchShare is the share of the ring's bound in bytes one store write takes at most: a
// batch is copied into the store's own form while it is written, so a full ring goes out in two
// writes rather than being held twice over.
const writeBatchShare = 2

// Numbers reserves a session's sequence numbers. parley.EventStore implements it.
type Numbers interface {
	// ReserveEventSeqs reserves n numbers and returns the first; a reservation survives a crash.
	ReserveEventSeqs(ctx context.Context, sessionID string, n int64) (first int64, err error)
	// ReleaseEventSeqs gives back the numbers after last when limit is still the last reserved.
	ReleaseEventSeqs(ctx context.Context, sessionID string, limit, last int64) error
}

// Relay carries a session's events between instances.
type Relay interface {
	// Publish hands the session's events (in order) to the other instances.
	Publish(ctx context.Context, sessionID string, evs []parley.Event) error
	// Range returns up to max of the session's published events with Seq > after, in order.
	Range(ctx context.Context, sessionID string, after int64, max int) ([]parley.Event, error)
	// Watch ticks its channel when the session may have new events; stop ends it.
	Watch(sessionID string) (tick <-chan struct{}, stop func())
}

// FramePublisher is a Relay that takes the frames' JSON as it is, rather than encoding each
// event again.
type FramePublisher interface {
	PublishFrames(ctx context.Context, sessionID string, frames []*Frame) error
}

// Metrics records the store's and the relay's batches and readers that fall behind.
type Metrics interface {
	// SubscriberDetached: a reader fell behind the ring and reads on its own; SubscriberCaughtUp:
	// it reached the ring again.
	SubscriberDetached()
	SubscriberCaughtUp()
	// StoreAppend: one AppendEvents call, or the write of a run's end that carries its last
	// events (Writer.Finish), took d; RelayPublish: one Publish took d.
	StoreAppend(d time.Duration, failed bool)
	RelayPublish(d time.Duration, failed bool)
}

// Options configure a Hub.
type Options struct {
	// Store keeps the events (each Writer writes its own in batches) and is where a reader that
	// fell behind the ring catches up. Nil: events live in memory only.
	Store parley.EventStore
	// Numbers reserves sequence numbers; nil: Store, or (no Store) numbers kept in memory.
	Numbers Numbers
	// Relay carries the events to and from other instances; nil: one instance.
	Relay Relay
	// RemoteRun returns the first sequence number of the session's run active on another
	// instance, or 0 (nil: none). A reader joining a session uses it.
	RemoteRun func(ctx context.Context, sessionID string) int64
	// RingEvents and RingBytes bound each session's ring (defaults DefaultRingEvents and
	// DefaultRingBytes). Events the store has not taken are never dropped: a producer whose ring
	// holds its bounds of them waits for the store.
	RingEvents int
	RingBytes  int
	// BacklogBytes is the budget for the events all runs of this Hub hold waiting for the
	// store (default DefaultBacklogBytes; negative: none). With n runs writing at once (runs
	// with events the store has not taken yet, or taking them now), a producer waits for the
	// store once its run holds more than BacklogBytes/n bytes of events the store has not
	// taken, but never for less than backlogFloor nor more than RingBytes. Like the ring's
	// bounds it never drops an event; unlike them, a producer that waited backpressureWait
	// for it goes on.
	BacklogBytes int
	// Block is how many sequence numbers a Writer reserves at a time (default DefaultBlock).
	Block int64
	// FlushEvery is how long events wait to be written to the store, so that a stream of small
	// chunks costs a few writes a second (default DefaultFlushEvery); a run's first events wait
	// ten times as long, so that a short run's events are all written with its end
	// (Writer.Finish).
	FlushEvery time.Duration
	Log        *slog.Logger
	Metrics    Metrics
}

// Hub holds the streams of the sessions this instance writes or reads.
type Hub struct {
	opts Options
	ctx  context.Context

	mu       sync.Mutex
	sessions map[string]*session
	memSeq   map[string]int64 // the last number reserved per session, without Numbers

	// writers counts the runs writing to the store: those whose store writer is armed or
	// writing (Writer.writing). They share Options.BacklogBytes; a run whose events are all
	// stored (idle, paused, or waiting for the model) takes no share.
	writers atomic.Int64
}

// New returns a Hub.
func New(opts Options) *Hub {
	if opts.RingEvents <= 0 {
		opts.RingEvents = DefaultRingEvents
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = DefaultRingBytes
	}
	if opts.BacklogBytes == 0 {
		opts.BacklogBytes = DefaultBacklogBytes
	}
	if opts.Block <= 0 {
		opts.Block = DefaultBlock
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = DefaultFlushEvery
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Numbers == nil && opts.Store != nil {
		opts.Numbers = opts.Store
	}
	return &Hub{opts: opts, ctx: context.Background(), sessions: map[string]*session{}, memSeq: map[string]int64{}}
}

// Frame is one event of a session's stream with its JSON encoding, made once and shared by every
// reader: read it, never change it.
//
// A frame keeps its event in the least memory it can, since a run holds its frames while the
// store takes them: a text delta (chunk or reasoning) with nothing but its number, run, session
// and text (nearly every event of a streamed answer) as those few fields, any other event whole.
// Event returns it as it was appended.
type Frame struct {
	Seq  int64
	Type parley.EventType
	JSON []byte

	runID, sessionID, content string        // a text delta's
	ev                        *parley.Event // any other event
}

// NewFrame returns the frame of ev whose JSON is b (tests, and readers that make frames of
// their own).
func NewFrame(ev parley.Event, b []byte) *Frame { return newFrame(&ev, b) }

// newFrame returns ev's frame, with its JSON.
func newFrame(ev *parley.Event, b []byte) *Frame {
	if textDelta(ev) { // not through frameOf, which would take ev to the heap
		return &Frame{Seq: ev.Seq, Type: ev.Type, JSON: b, runID: ev.RunID, sessionID: ev.SessionID, content: ev.Content}
	}
	w := &wholeFrame{ev: *ev}
	w.f = frameOf(&w.ev, b)
	return &w.f
}

// frameOf returns ev's frame, with its JSON b, keeping ev itself, not a copy, when the frame
// keeps its event whole: then ev must not change after.
func frameOf(ev *parley.Event, b []byte) Frame {
	if textDelta(ev) {
		return Frame{Seq: ev.Seq, Type: ev.Type, JSON: b, runID: ev.RunID, sessionID: ev.SessionID, content: ev.Content}
	}
	return Frame{Seq: ev.Seq, Type: ev.Type, JSON: b, ev: ev}
}

// wholeFrame is a frame that keeps its event whole together with its copy of that event: one
// allocation (384 bytes, a size class) instead of two (112 and 288).
type wholeFrame struct {
	f  Frame
	ev parley.Event
}

// textDelta reports whether ev is a chunk or reasoning event with no field but Seq, Type, RunID,
// SessionID and Content.
func textDelta(ev *parley.Event) bool {
	if ev.Type != parley.EventChunk && ev.Type != parley.EventReasoning {
		return false
	}
	return ev.Model == "" && ev.Message == nil && ev.ToolCalls == nil && ev.ToolCall == nil && ev.Usage == nil &&
		ev.Error == nil && ev.State == "" && ev.FinishReason == "" && ev.Iterations == 0 && ev.Todos == nil &&
		ev.Memory == nil && ev.Artifact == nil && ev.WebSearch == nil && ev.Image == nil && ev.Approval == nil
}

// Event returns the frame's event.
func (f *Frame) Event() parley.Event {
	if f.ev != nil {
		return *f.ev
	}
	return parley.Event{Seq: f.Seq, Type: f.Type, RunID: f.runID, SessionID: f.sessionID, Content: f.content}
}

// state is the State of the frame's event (a status event's).
func (f *Frame) state() string {
	if f.ev != nil {
		return f.ev.State
	}
	return ""
}

// stored returns the frame as the store takes it: its JSON, and its event where the frame keeps
// it whole (the store needs no event beside the JSON; parley.EncodedEvent).
func (f *Frame) stored() parley.EncodedEvent {
	return parley.EncodedEvent{Seq: f.Seq, JSON: f.JSON, Event: f.ev}
}

// frameOverhead is what a frame costs beyond its JSON and its event's text: the Frame itself
// (112 bytes, its size class) and the ring's pointer to it.
const frameOverhead = 120

// eventOverhead is what a frame that keeps its event whole costs beyond frameOverhead: its
// wholeFrame is 384 bytes where a Frame is 112.
const eventOverhead = 272

// size is the memory a frame holds, about: a text delta's text is its own, the run's and the
// session's ids are shared; a whole event's strings are about as long as its JSON.
func (f *Frame) size() int {
	if f.ev == nil {
		return frameOverhead + cap(f.JSON) + len(f.content)
	}
	return frameOverhead + eventOverhead + 2*len(f.JSON)
}

// Encode makes the frames of events. An event that cannot be encoded (a bug) is logged and left
// out: no client could read it.
func (h *Hub) encode(evs []parley.Event) []*Frame {
	frames := make([]*Frame, 0, len(evs))
	for i := range evs {
		if f := h.frame(evs[i]); f != nil {
			frames = append(frames, f)
		}
	}
	return frames
}

func (h *Hub) frame(ev parley.Event) *Frame {
	b, err := encodeEvent(&ev)
	if err != nil {
		h.opts.Log.Error("could not encode an event", "session", ev.SessionID, "seq", ev.Seq, "err", err)
		return nil
	}
	return newFrame(&ev, b)
}

// ring is a bounded FIFO of frames in increasing Seq. Pushing and popping cost O(1) (the buffer
// doubles when full, which is amortized O(1), and never shrinks while the session lives).
type ring struct {
	buf   []*Frame
	head  int
	n     int
	bytes int
}

func (r *ring) push(f *Frame) {
	if r.n == len(r.buf) {
		nb := make([]*Frame, max(16, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.at(i)
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = f
	r.n++
	r.bytes += f.size()
}

func (r *ring) pop() *Frame {
	f := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.bytes -= f.size()
	return f
}

func (r *ring) at(i int) *Frame { return r.buf[(r.head+i)%len(r.buf)] }

// after returns the position of the first frame with Seq > seq (r.n when none).
func (r *ring) after(seq int64) int {
	if r.n == 0 || r.at(0).Seq > seq {
		return 0
	}
	// Most rings are gapless: try the direct position first.
	if i := int(seq - r.at(0).Seq + 1); i >= 0 && i < r.n && r.at(i).Seq == seq+1 && r.at(i-1).Seq == seq {
		return i
	}
	return sort.Search(r.n, func(i int) bool { return r.at(i).Seq > seq })
}

func (r *ring) clear() {
	clear(r.buf)
	r.head, r.n, r.bytes = 0, 0, 0
}

// session is one session's stream on this instance: its ring, its writer (a run of this
// instance) if any, its readers, and its feeder (the relay's events of a run on another instance).
type session struct {
	h  *Hub
	id string

	refs int // writers and subscriptions holding it, under h.mu

	mu sync.Mutex
	// The ring holds every existing event with Seq in (from, last]; from is Join while nothing
	// placed the ring yet (no run seen).
	ring       ring
	from, last int64
	// joinFrom is where a reader that joined before any run was seen starts: the first run's.
	joinFrom int64
	// stored: with a store and a writer, the events up to stored are written (or given up on);
	// the ring drops nothing after it.
	stored int64
	// unstored is the size (Frame.size) of the ring's frames after stored: what the run writing
	// the session holds waiting for the store. Kept by pushLocked, popLocked, storeUpToLocked
	// and recountLocked, so that the backlog's check on every Append costs O(1).
	unstored int
	// storeFailed: a store write of the ring's events failed (since the ring last started
	// again), so stored may count events the store does not hold: the ring keeps its events to
	// its bounds rather than dropping what its readers have read (trimReadLocked).
	storeFailed bool
	// readers: the open subscriptions; the ring keeps what those reading it have not read yet.
	readers map[*Subscription]struct{}
	w       *Writer
	// active is the first Seq of the run in progress, here (w) or on another instance (seen by
	// the feeder); 0 when none is.
	active int64
	subs   int // open subscriptions, under h.mu
	// wake is closed whenever the ring changes or a run opens; made when a reader first waits
	// on it after that (waitLocked), so that wakes nobody waits for cost nothing.
	wake chan struct{}
	gen  int64 // counts the wakes
	// notify: the subscriptions whose consumer parked (Notify), told at the next wake.
	notify map[*Subscription]func()
	// progress is closed and replaced when the store writer has stored a batch.
	progress chan struct{}

	feedCancel context.CancelFunc // the feeder's, while it runs
	feedDone   chan struct{}
}

// get returns the session's stream, created if needed, holding one more reference.
func (h *Hub) get(sessionID string) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[sessionID]
	if s == nil {
		s = &session{h: h, id: sessionID, from: Join, last: Join, joinFrom: Join, stored: Join,
			progress: make(chan struct{})}
		h.sessions[sessionID] = s
	}
	s.refs++
	return s
}

// put drops a reference; the last one forgets the session's stream and lets go of its ring (a
// finished run's Writer, which its run may keep a while, then holds no frames).
func (h *Hub) put(s *session) {
	h.mu.Lock()
	s.refs--
	last := s.refs <= 0
	if last && h.sessions[s.id] == s {
		delete(h.sessions, s.id)
	}
	h.mu.Unlock()
	if last {
		s.mu.Lock()
		s.ring = ring{}
		s.unstored = 0
		s.mu.Unlock()
	}
}

// wakeLocked wakes every reader waiting on the session. Call with s.mu held.
func (s *session) wakeLocked() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
	s.gen++
	for sub, fn := range s.notify {
		delete(s.notify, sub)
		fn()
	}
}

// waitLocked returns the channel the next wake closes. Call with s.mu held.
func (s *session) waitLocked() chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

// trimLocked drops the oldest frames past the ring's bounds, but none the store has not taken.
// It reports whether frames are left past the bounds for want of the store. Call with s.mu held.
func (s *session) trimLocked() (blocked bool) {
	o := &s.h.opts
	for s.ring.n > 0 && (s.ring.n > o.RingEvents || s.ring.bytes > o.RingBytes) {
		if s.w != nil && o.Store != nil && s.ring.at(0).Seq > s.stored {
			return true
		}
		s.popLocked()
	}
	return false
}

// trimReadLocked drops the oldest frames the store holds and every reader of the ring (and the
// relay publisher) has read, whatever the ring's bounds: a reader that needs them later (one
// that joins, or resumes, from before them) reads them from the store, as it reads whatever the
// ring has moved past. So a run's memory is what its store and its readers have not taken yet,
// not the ring's bounds. Readers behind the ring read the store anyway and hold nothing. It
// does nothing without a store, or once a store write failed. Call with s.mu held.
func (s *session) trimReadLocked() {
	o := &s.h.opts
	if o.Store == nil || s.storeFailed || s.ring.n == 0 || s.ring.at(0).Seq > s.stored {
		return
	}
	limit := s.stored
	for sub := range s.readers {
		at := sub.after
		if !sub.placed {
			if s.joinFrom == Join {
				continue
			}
			at = s.joinFrom
		}
		if at >= s.from {
			limit = min(limit, at)
		}
	}
	if w := s.w; w != nil && o.Relay != nil {
		limit = min(limit, w.relayedTo)
	}
	for s.ring.n > 0 && s.ring.at(0).Seq <= limit {
		s.popLocked()
	}
}

// overLocked reports whether the ring holds more than its bounds. Called after trimLocked
// reported frames the store has not taken past them: the producer must then wait.
func (s *session) overLocked() bool {
	o := &s.h.opts
	return s.ring.n > o.RingEvents || s.ring.bytes > o.RingBytes
}

// backlogBound is how many bytes of events the store has not taken a run may hold before its
// producer waits for the store: the Hub's budget shared among the runs writing now, within
// [backlogFloor, RingBytes].
func (h *Hub) backlogBound() int {
	o := &h.opts
	if o.BacklogBytes < 0 {
		return o.RingBytes
	}
	n := max(h.writers.Load(), 1)
	return min(o.RingBytes, max(backlogFloor, int(int64(o.BacklogBytes)/n)))
}

// overBacklogLocked reports whether the run writing the session holds more than its share of
// the budget for events waiting for the store (backlogBound). Call with s.mu held.
func (s *session) overBacklogLocked() bool {
	return s.w != nil && s.h.opts.Store != nil && s.unstored > s.h.backlogBound()
}

// pushLocked adds f, the newest event, to the ring. Call with s.mu held.
func (s *session) pushLocked(f *Frame) {
	s.ring.push(f)
	s.last = f.Seq
	if f.Seq > s.stored {
		s.unstored += f.size()
	}
}

// popLocked drops the ring's oldest frame. Call with s.mu held.
func (s *session) popLocked() {
	f := s.ring.pop()
	s.from = f.Seq
	if f.Seq > s.stored {
		s.unstored -= f.size()
	}
}

// storeUpToLocked records that the events up to seq are written (or given up on). Call with
// s.mu held.
func (s *session) storeUpToLocked(seq int64) {
	if seq <= s.stored {
		return
	}
	for i := s.ring.after(s.stored); i < s.ring.n; i++ {
		f := s.ring.at(i)
		if f.Seq > seq {
			break
		}
		s.unstored -= f.size()
	}
	s.stored = seq
}

// recountLocked counts unstored again from the ring, after stored was set back. Call with s.mu
// held.
func (s *session) recountLocked() {
	s.unstored = 0
	for i := s.ring.after(s.stored); i < s.ring.n; i++ {
		s.unstored += s.ring.at(i).size()
	}
}

// Sessions returns how many sessions' streams the hub holds (tests, metrics).
func (h *Hub) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}
