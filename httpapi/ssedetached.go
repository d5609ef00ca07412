package httpapi

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/internal/logctx"
)

// sseStream is a session's SSE stream that outlives its handler (streamDetached): its pump,
// transport, writer and context are one object, with methods where closures were, so that an
// idle stream is a few allocations (issue 25: ≤ 8 KiB of server memory per idle SSE stream, of
// which the garbage collector's headroom is about as much as the stream's own heap).
type sseStream struct {
	pump
	tr    sseTransport
	w     sseWriter
	ctx   streamCtx
	conn  net.Conn
	watch *idleWatch // nil where the server's poller cannot watch the connection
	// owner holds one of the stream slots of its user (takeStream), given back at the end, when
	// the stream's place in the metrics goes too.
	owner string
	slot  bool // owner's slot is the stream's (streamDetached), not a streamed chat's, which takes none
	// reuse: the connection, a streamed chat's taken over from net/http with nothing of the
	// client's next request read (takeOver), goes back to the server (Deps.GiveBack) if the
	// response ends whole and the poller watches it.
	reuse bool
	// left counts who has seen the stream's end, where a goroutine reads the connection (no
	// watch): the pump and that reader; the second finishes. Where the poller watches it, it
	// holds the reads' state (rdReading, rdStopped, rdSent), for reuse.
	left atomic.Int32
	// prev and next link the server's detached streams (detachedStreams).
	prev, next *sseStream
}

// The state of a watched stream's reads (sseStream.left), for a connection that may be given
// back: the poller's callback is reading (and dropping what it reads); the stream's end stopped
// the reads, so that none drops what could be the client's next request (set once no read is
// under way); a read dropped bytes the client sent while the response went on, so that the
// connection cannot be given back.
const (
	rdReading = 1 << iota
	rdStopped
	rdSent
)

// end ends the stream's context; the pump, kicked, sees it.
func (st *sseStream) end(error) {
	st.ctx.cancel()
	st.kick()
}

// shutdown ends the stream as the server shuts down.
func (st *sseStream) shutdown() { st.end(errWSShutdown) }

// readable is the poller's callback (sseReadable).
func (st *sseStream) readable() {
	if !st.reuse {
		sseReadable(st.watch, st.end, nil)
		return
	}
	for {
		v := st.left.Load()
		if v&rdStopped != 0 {
			return
		}
		if st.left.CompareAndSwap(v, v|rdReading) {
			break
		}
	}
	var sent bool
	sseReadable(st.watch, st.end, &sent)
	for {
		v := st.left.Load()
		w := v &^ rdReading
		if sent {
			w |= rdSent
		}
		if st.left.CompareAndSwap(v, w) {
			return
		}
	}
}

// onEnd is the pump's last act: the response's end, then the connection's: closed, or given
// back to the server (reuse) when the stream ended whole, neither by an error, nor by its
// context (the client leaving, the server shutting down), nor with a write that failed, and the
// client sent nothing while it streamed. The poller stops reading the connection before the
// response's last chunk, after which the client may send its next request.
func (st *sseStream) onEnd(err error) {
	reuse := st.reuse && err == nil && st.ctx.Err() == nil && st.watch != nil
	for reuse {
		// A read under way (one non-blocking read) ends soon; the next sees rdStopped.
		if v := st.left.Load(); v&rdReading == 0 && st.left.CompareAndSwap(v, v|rdStopped) {
			reuse = v&rdSent == 0
			break
		}
		runtime.Gosched()
	}
	if st.watch != nil {
		st.watch.close() // before the connection is closed
	}
	st.w.end()
	given := reuse && st.w.err == nil && (st.s.Lifetime == nil || st.s.Lifetime.Err() == nil) &&
		st.conn.SetDeadline(time.Time{}) == nil && st.s.GiveBack(st.conn)
	if !given {
		st.conn.Close()
	}
	st.ended()
}

// ended is called by the pump, once ended, and by the connection's reader, if any, once the
// client has left: the last of them finishes.
func (st *sseStream) ended() {
	if st.watch != nil || st.left.Add(1) == 2 {
		st.finish()
	}
}

// finish lets go of what the stream holds; whoever sees the stream's end last calls it.
func (st *sseStream) finish() {
	st.s.detached.remove(st)
	st.ctx.cancel()
	if st.slot {
		st.s.giveStream(st.owner)
	}
	if st.s.Metrics != nil {
		st.s.Metrics.StreamClose("sse")
	}
}

// streamCtx is the context of a stream that outlives its handler, in one object: of the
// request's values only those a stream uses (the caller's identity, the log attributes), none of
// its cancellation (so that an idle stream keeps neither the request's nor its connection's
// contexts), and a cancel of its own. It has no deadline: the stream's lifetime is its pump's.
type streamCtx struct {
	id    auth.Identity
	hasID bool
	attrs []slog.Attr

	mu   sync.Mutex
	done chan struct{} // made by the first Done or cancel
	err  error
}

// from sets c to the identity and log attributes of ctx (the request's).
func (c *streamCtx) from(ctx context.Context) {
	c.id, c.hasID = ctx.Value(identityKey).(auth.Identity)
	c.attrs = logctx.Attrs(ctx)
}

func (c *streamCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *streamCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *streamCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *streamCtx) Value(key any) any {
	if key == any(identityKey) {
		if c.hasID {
			return c.id
		}
		return nil
	}
	if v, ok := logctx.Value(key, c.attrs); ok {
		return v
	}
	return nil
}

// cancel ends the context (context.Canceled); again, it does nothing.
func (c *streamCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = context.Canceled
	if c.done == nil {
		c.done = closedDone
	} else {
		close(c.done)
	}
}

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// detachedStreams are the server's detached SSE streams, ended together when the server shuts
// down (Lifetime): one callback on Lifetime for all of them, not one per stream, and a list
// linked through the streams themselves.
type detachedStreams struct {
	mu     sync.Mutex
	once   sync.Once
	ending bool
	head   *sseStream
}

// addDetached registers st to be ended at the server's shutdown; it reports false when the
// server is already shutting down (st is not added).
func (s *server) addDetached(st *sseStream) bool {
	d := &s.detached
	if s.Lifetime == nil {
		return true
	}
	d.once.Do(func() { context.AfterFunc(s.Lifetime, d.endAll) })
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ending {
		return false
	}
	st.prev, st.next = nil, d.head
	if d.head != nil {
		d.head.prev = st
	}
	d.head = st
	return true
}

// remove takes st off the list, if it is on it.
func (d *detachedStreams) remove(st *sseStream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case st.prev != nil:
		st.prev.next = st.next
	case d.head == st:
		d.head = st.next
	default:
		return // not on the list
	}
	if st.next != nil {
		st.next.prev = st.prev
	}
	st.prev, st.next = nil, nil
}

// endAll ends every stream registered (the server is shutting down); none is added after.
func (d *detachedStreams) endAll() {
	d.mu.Lock()
	d.ending = true
	var all []*sseStream
	for st := d.head; st != nil; st = st.next {
		all = append(all, st)
	}
	d.mu.Unlock()
	for _, st := range all {
		st.shutdown()
	}
}
