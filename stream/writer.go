package stream

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
)

// Writer is the producer of one run's events in its session's stream. Append, GiveBack and Next
// are called by one goroutine at a time (the run's emitter); Close by its owner once.
type Writer struct {
	h     *Hub
	s     *session
	first int64
	next  int64 // the Seq the next Append gets
	limit int64 // the last number reserved

	closed  bool          // under s.mu: nothing more is appended
	closing chan struct{} // closed by Close: the relay publisher drains and stops
	relayed chan struct{} // closed when the relay publisher has stopped
	dropped bool

	// The store writer runs only while the run has events to write: the first Append after it
	// stopped arms flushTimer, which starts it once the events had time to gather (so an active
	// stream holds no goroutine of its own while its events gather). Under s.mu: writing is set
	// from the arming until the writer stops, when idle (made at the arming) is closed.
	writing    bool
	flushTimer *time.Timer
	idle       chan struct{}

	// storing is held by the store writer while it takes and writes a batch, and by Finish:
	// the run's events are written by one of them at a time, each once.
	storing sync.Mutex
	upto    int64 // under s.mu: the run's events up to it are written (or given up on)
	// relayedTo, under s.mu: the run's events up to it are handed to the relay (with one).
	relayedTo int64
}

// Open reserves the first block of sequence numbers of a new run of the session and returns its
// Writer: the session's readers see the run from now (a reader joining the session starts at its
// first event). The caller must Close (or Abandon) it, then Drop it.
func (h *Hub) Open(ctx context.Context, sessionID string) (*Writer, error) {
	first, err := h.reserve(ctx, sessionID, h.opts.Block)
	if err != nil {
		return nil, err
	}
	return h.OpenReserved(sessionID, first, h.opts.Block), nil
}

// OpenReserved is Open for a run whose first n numbers, from first, the caller has reserved
// itself (with the run's other writes, in one transaction).
func (h *Hub) OpenReserved(sessionID string, first, n int64) *Writer {
	s := h.get(sessionID)
	w := &Writer{h: h, s: s, first: first, next: first, limit: first + n - 1,
		closing: make(chan struct{}), relayed: make(chan struct{})}
	s.mu.Lock()
	s.w = w
	if s.last != first-1 {
		// The first run seen here, or the session's runs went on elsewhere meanwhile: the ring
		// starts again at this run; a reader before it catches up from the store.
		s.ring.clear()
		s.from, s.last = first-1, first-1
		s.storeFailed = false
	}
	if s.joinFrom == Join {
		s.joinFrom = first - 1
	}
	s.active = first
	s.stored = first - 1
	s.recountLocked()
	w.upto = first - 1
	w.relayedTo = first - 1
	s.wakeLocked()
	s.mu.Unlock()
	if h.opts.Relay != nil {
		go w.publish()
	} else {
		close(w.relayed)
	}
	return w
}

// FirstSeq is the Seq of the run's first event: its readers start after FirstSeq()-1.
func (w *Writer) FirstSeq() int64 { return w.first }

// Next returns the Seq the next Append gets.
func (w *Writer) Next() int64 { return w.next }

// number makes sure the next n numbers are reserved, reserving another block when the run has
// used its numbers (n is at most a block).
func (w *Writer) number(n int64) {
	s, h := w.s, w.h
	if w.next+n-1 > w.limit {
		first, err := h.reserve(h.ctx, s.id, h.opts.Block)
		switch {
		case err != nil:
			// Numbering goes on; only a crash of this process could now reuse numbers.
			h.opts.Log.Error("could not reserve event numbers", "session", s.id, "err", err)
		case first != max(w.next, w.limit+1):
			h.opts.Log.Error("event numbers reserved out of order", "session", s.id, "want", max(w.next, w.limit+1), "got", first)
		default:
			w.limit = first + h.opts.Block - 1
		}
	}
}

// Append stamps ev with the next sequence number (reserving another block when the run has used
// its numbers), encodes it, and hands it to the session's readers, the store and the relay. It
// returns ev as stamped. When the ring holds more than its bounds of events the store has not
// taken, Append waits for the store (up to a bound). Appending after Close does nothing and
// returns ev with Seq 0.
func (w *Writer) Append(ev parley.Event) parley.Event {
	s, h := w.s, w.h
	w.number(1)
	ev.Seq = w.next
	f := h.frame(ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		ev.Seq = 0
		return ev
	}
	w.next++
	if f == nil {
		return ev
	}
	s.pushLocked(f)
	w.scheduleLocked()
	blocked := s.trimLocked()
	s.wakeLocked()
	if blocked && s.overLocked() || s.overBacklogLocked() {
		w.waitForStoreLocked()
	}
	return ev
}

// waitForStoreLocked waits, with s.mu held (released while waiting), until the store has taken
// enough of the ring's events for it to be within its bounds and the run's share of the Hub's
// budget for them (Options.BacklogBytes), or backpressureWait has passed: then the ring drops
// the oldest events past its bounds anyway, and a run over only its share goes on.
func (w *Writer) waitForStoreLocked() {
	s := w.s
	deadline := time.Now().Add(backpressureWait)
	for {
		hard := s.overLocked() && s.trimLocked()
		if !hard && !s.overBacklogLocked() {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			if !hard {
				return // the budget is shared, not a bound: the ring still holds this run's events
			}
			w.h.opts.Log.Error("the store did not take a run's events in time: dropped from memory before they were stored",
				"session", s.id, "from", s.ring.at(0).Seq, "stored", s.stored)
			for s.overLocked() {
				s.popLocked()
			}
			return
		}
		p := s.progress
		urged := w.urgeLocked()
		s.mu.Unlock()
		if urged {
			// The producer would only wait for the write: it writes itself, on its own stack,
			// rather than on a goroutine of the store writer's (under load nearly every run
			// waits here, each with a goroutine that held a stack for the store's whole write).
			w.flush()
			s.mu.Lock()
			continue
		}
		t := time.NewTimer(left)
		select {
		case <-p:
		case <-t.C:
		}
		t.Stop()
		s.mu.Lock()
	}
}

// GiveBack gives back the reserved numbers after last (at least Next()-1), so that the session's
// next run goes on from last+1.
func (w *Writer) GiveBack(last int64) {
	last = max(last, w.next-1)
	w.h.release(w.s.id, w.limit, last)
	w.limit = last
}

// Limit returns the last number reserved for the run.
func (w *Writer) Limit() int64 { return w.limit }

// GaveBack records that the caller gave back the reserved numbers after last itself (with the
// run's end, in one transaction), as GiveBack would have.
func (w *Writer) GaveBack(last int64) { w.limit = max(last, w.next-1) }

// ErrFinished is Finish's error for a Writer closed before it.
var ErrFinished = errors.New("stream: the run's events are closed")

// Finish appends tail, the run's last events, once write has stored them together with every
// event of the run the store has not taken yet, in one write (the run's end: parley.RunFinish).
// write gets those events in order, the ring's with their JSON and tail's, stamped with the next
// numbers, without (write sets it, as parley.RunBeginner.FinishRun does; or it is made here).
// The session's readers see tail only once write returned nil, so that what tail announces is
// durable before any client sees it. When write fails, nothing is appended (the store writer goes
// on with the ring's events) and the caller may Append tail itself. Finish stamps tail's events
// in place and returns tail; the frames it appends keep those events, not copies of them, so the
// caller must not change them after. It is called by the producer, like Append, and blocks the
// store writer while write runs.
func (w *Writer) Finish(tail []parley.Event, write func(evs []parley.EncodedEvent) error) ([]parley.Event, error) {
	s, h := w.s, w.h
	w.number(int64(len(tail)))
	w.storing.Lock()
	defer w.storing.Unlock()
	s.mu.Lock()
	if w.closed {
		s.mu.Unlock()
		return nil, ErrFinished
	}
	if s.from > w.upto && s.ring.n > 0 && s.ring.at(0).Seq > w.upto+1 {
		h.opts.Log.Error("run events lost before they were stored", "session", s.id, "after", w.upto, "from", s.from)
	}
	i := s.ring.after(w.upto)
	evs := make([]parley.EncodedEvent, 0, s.ring.n-i+len(tail))
	for ; i < s.ring.n && s.ring.at(i).Seq < w.next; i++ {
		f := s.ring.at(i)
		evs = append(evs, f.stored())
	}
	next := w.next
	s.mu.Unlock()
	for j := range tail {
		tail[j].Seq = next + int64(j)
		evs = append(evs, parley.EncodedEvent{Seq: tail[j].Seq, Event: &tail[j]})
	}
	start := time.Now()
	err := write(evs)
	if h.opts.Metrics != nil {
		h.opts.Metrics.StoreAppend(time.Since(start), err != nil)
	}
	if err != nil {
		return nil, err
	}
	tailFrames := make([]Frame, len(tail)) // one allocation for all of them
	frames := make([]*Frame, 0, len(tail))
	for j, e := range evs[len(evs)-len(tail):] {
		if e.JSON == nil {
			var err error
			if e.JSON, err = json.Marshal(&tail[j]); err != nil {
				h.opts.Log.Error("could not encode an event", "session", s.id, "seq", e.Seq, "err", err)
				continue
			}
		}
		tailFrames[j] = frameOf(&tail[j], e.JSON)
		frames = append(frames, &tailFrames[j])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w.next += int64(len(tail))
	for _, f := range frames {
		s.pushLocked(f)
	}
	w.storedLocked(w.next-1, true)
	s.wakeLocked()
	return tail, nil
}

// Close marks the run's events complete and waits until the store and the relay have them. The
// ring keeps them for the session's readers until Drop.
func (w *Writer) Close() {
	s := w.s
	s.mu.Lock()
	if w.closed {
		s.mu.Unlock()
		return
	}
	w.closed = true
	s.wakeLocked()
	now := w.urgeLocked() // the events gathering are written at once
	idle := w.idle
	s.mu.Unlock()
	close(w.closing)
	if now {
		w.flush()
	}
	if idle != nil {
		<-idle
	}
	<-w.relayed
	s.mu.Lock()
	if s.w == w {
		s.w = nil
		s.active = 0
		s.trimLocked()
		s.trimReadLocked()
	}
	s.mu.Unlock()
}

// Abandon gives back every number of a run that never started and closes its Writer.
func (w *Writer) Abandon() {
	w.GiveBack(w.first - 1)
	w.Close()
}

// Drop lets the session's stream forget the run once nothing else holds it (the store has its
// events). Call it after Close; a second call does nothing.
func (w *Writer) Drop() {
	if w.dropped {
		return
	}
	w.dropped = true
	w.h.put(w.s)
}

// pending returns up to n of the events after `after` the ring holds, and at most maxBytes of
// them (by Frame.size; at least one), whether more of them were left out for those bounds,
// whether the Writer was closed when they were read, and the ring's start (events up to it are
// gone).
func (w *Writer) pending(after int64, n, maxBytes int) (frames []*Frame, more, closed bool, wake <-chan struct{}, from int64) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.ring.after(after)
	k, size := 0, 0
	// Only this run's frames: the session's next run may already append after them.
	for i+k < s.ring.n && s.ring.at(i+k).Seq < w.next {
		size += s.ring.at(i + k).size()
		if k == n || k > 0 && size > maxBytes {
			more = true
			break
		}
		k++
	}
	if k > 0 {
		frames = make([]*Frame, k)
		for j := range k {
			frames[j] = s.ring.at(i + j)
		}
	}
	return frames, more, w.closed, s.waitLocked(), s.from
}

// firstFlush is how many times FlushEvery a run's first events wait to be written: most runs
// end before (a chat's answer), and their events are written with their end.
const firstFlush = 10

// scheduleLocked arms the store writer, unless it is armed or writing: the events appended
// from now are written once they have gathered for FlushEvery (firstFlush times that before the
// run's first write, so that a short run, however slow an overloaded server makes it, leaves
// all of its events to its end's one write, Finish). Call with s.mu held.
func (w *Writer) scheduleLocked() {
	if w.writing || w.h.opts.Store == nil {
		return
	}
	w.writing = true
	w.h.writers.Add(1) // until the store writer stops
	w.idle = make(chan struct{})
	wait := w.flushWait()
	if w.upto < w.first {
		wait = firstFlush * w.h.opts.FlushEvery
	}
	if w.flushTimer == nil {
		w.flushTimer = time.AfterFunc(wait, w.flush)
	} else {
		w.flushTimer.Reset(wait)
	}
}

// flushWait is how long the events appended from now gather before the store writer writes
// them: FlushEvery, or firstFlush times that while the store is behind (more runs writing than
// the Hub's budget gives each its ring's bound): then a run's share of the budget fills before
// long, and its producer writes it at once (waitForStoreLocked) in one write as large as the
// share, where the timer would write what gathered in FlushEvery, a fraction of it, and make
// the store take more, smaller writes. The timer is then for a run whose events come slowly.
func (w *Writer) flushWait() time.Duration {
	h := w.h
	if h.opts.BacklogBytes >= 0 && h.backlogBound() < h.opts.RingBytes {
		return firstFlush * h.opts.FlushEvery
	}
	return h.opts.FlushEvery
}

// urgeLocked stops the store writer's wait for events to gather, and reports whether it did:
// the caller then runs the writer (w.flush) itself. Call with s.mu held.
func (w *Writer) urgeLocked() bool {
	return w.writing && w.flushTimer != nil && w.flushTimer.Stop()
}

// flush is the store writer: it writes the run's events to the store a batch at a time (a
// store write takes at most half the ring's bytes and writeBatch events) until it has written
// what the ring holds of the run, then stops; events appended meanwhile arm it again, or, once
// the Writer is closed, are written at once. What it has not written when the run ends, Finish
// writes with the run's end.
func (w *Writer) flush() {
	h, s := w.h, w.s
	maxBytes := max(h.opts.RingBytes/writeBatchShare, 1)
	for {
		w.storing.Lock()
		s.mu.Lock()
		after := w.upto
		s.mu.Unlock()
		frames, more, _, _, from := w.pending(after, writeBatch, maxBytes)
		if from > after && (len(frames) == 0 || frames[0].Seq > after+1) {
			h.opts.Log.Error("run events lost before they were stored", "session", s.id, "after", after, "from", from)
		}
		if len(frames) > 0 {
			ok := w.store(frames)
			s.mu.Lock()
			w.storedLocked(frames[len(frames)-1].Seq, ok)
			s.mu.Unlock()
		}
		w.storing.Unlock()
		if more {
			continue // a full batch (in events or bytes): the rest is written at once
		}
		s.mu.Lock()
		if w.next-1 > w.upto {
			if w.closed {
				s.mu.Unlock()
				continue
			}
			// Appended while writing: they gather for the next write.
			w.flushTimer.Reset(w.flushWait())
			s.mu.Unlock()
			return
		}
		w.writing = false
		h.writers.Add(-1)
		close(w.idle)
		w.idle = nil
		s.mu.Unlock()
		return
	}
}

// storedLocked records that the run's events up to seq are written (ok) or given up on: the
// ring may drop them, and a producer waiting for the store goes on. Call with s.mu held.
func (w *Writer) storedLocked(seq int64, ok bool) {
	s := w.s
	w.upto = max(w.upto, seq)
	s.storeUpToLocked(seq)
	if !ok {
		s.storeFailed = true
	}
	close(s.progress)
	s.progress = make(chan struct{})
	s.trimLocked()
	s.trimReadLocked()
}

// store writes frames to the store: their JSON as it is when the store takes encoded events.
// It reports whether the store has them (false: the write failed, and was logged).
func (w *Writer) store(frames []*Frame) bool {
	h := w.h
	enc, _ := h.opts.Store.(parley.EncodedEventAppender)
	var evs []parley.Event
	var encoded []parley.EncodedEvent
	if enc != nil {
		encoded = make([]parley.EncodedEvent, len(frames))
		for i, f := range frames {
			encoded[i] = f.stored()
		}
	} else {
		evs = make([]parley.Event, len(frames))
		for i, f := range frames {
			evs[i] = f.Event()
		}
	}
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		start := time.Now()
		if enc != nil {
			err = enc.AppendEncodedEvents(ctx, w.s.id, time.Now(), encoded)
		} else {
			err = h.opts.Store.AppendEvents(ctx, w.s.id, time.Now(), evs)
		}
		cancel()
		if h.opts.Metrics != nil {
			h.opts.Metrics.StoreAppend(time.Since(start), err != nil)
		}
		if err == nil {
			return true
		}
		if parley.CodeOf(err) == parley.ECNotFound { // a deleted session keeps nothing
			return false
		}
	}
	h.opts.Log.Error("could not store run events", "session", w.s.id, "from", frames[0].Seq, "to", frames[len(frames)-1].Seq, "err", err)
	return false
}

// publish hands the run's events to the relay as they come, until the Writer closes. Unlike the
// store, the relay gets each event at once: it is what other instances' readers see live.
func (w *Writer) publish() {
	defer close(w.relayed)
	h, s := w.h, w.s
	after := w.first - 1
	for {
		frames, _, closed, wake, from := w.pending(after, writeBatch, 1<<62)
		if from > after && (len(frames) == 0 || frames[0].Seq > after+1) {
			// Fallen behind the ring: other instances' readers read these from the store.
			h.opts.Log.Warn("run events not relayed", "session", s.id, "after", after, "from", from)
		}
		if len(frames) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			start := time.Now()
			var err error
			if fp, ok := h.opts.Relay.(FramePublisher); ok {
				err = fp.PublishFrames(ctx, s.id, frames)
			} else {
				evs := make([]parley.Event, len(frames))
				for i, f := range frames {
					evs[i] = f.Event()
				}
				err = h.opts.Relay.Publish(ctx, s.id, evs)
			}
			cancel()
			if h.opts.Metrics != nil {
				h.opts.Metrics.RelayPublish(time.Since(start), err != nil)
			}
			if err != nil {
				h.opts.Log.Warn("could not relay run events", "session", s.id, "from", frames[0].Seq, "err", err)
			}
			after = frames[len(frames)-1].Seq
			s.mu.Lock()
			w.relayedTo = after
			s.mu.Unlock()
			continue
		}
		if closed {
			return
		}
		select {
		case <-wake:
		case <-w.closing:
		}
	}
}

// reserve reserves n sequence numbers of the session's stream and returns the first.
func (h *Hub) reserve(ctx context.Context, sessionID string, n int64) (int64, error) {
	if h.opts.Numbers == nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		first := h.memSeq[sessionID] + 1
		h.memSeq[sessionID] += n
		return first, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	return h.opts.Numbers.ReserveEventSeqs(ctx, sessionID, n)
}

// release gives back the numbers after last, if limit is still the last one reserved.
func (h *Hub) release(sessionID string, limit, last int64) {
	if limit <= last {
		return
	}
	if h.opts.Numbers == nil {
		h.mu.Lock()
		if h.memSeq[sessionID] == limit {
			h.memSeq[sessionID] = last
		}
		h.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := h.opts.Numbers.ReleaseEventSeqs(ctx, sessionID, limit, last); err != nil {
		// Harmless: the session's next run starts after a gap.
		h.opts.Log.Warn("could not give back unused event numbers", "session", sessionID, "err", err)
	}
}
