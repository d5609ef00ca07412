package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
)

// streamSlots counts each user's open streams (SSE and WebSocket) against MaxStreamsPerUser.
type streamSlots struct {
	mu     sync.Mutex
	byUser map[string]int
}

// acquireStream takes one of the user's stream slots; release gives it back.
func (s *server) acquireStream(user string) (release func(), err error) {
	if err := s.takeStream(user); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { s.giveStream(user) }) }, nil
}

// takeStream takes one of the user's stream slots, as acquireStream does, with no callback to
// keep (a detached stream keeps the user): giveStream, called once, gives it back.
func (s *server) takeStream(user string) error {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	if s.MaxStreamsPerUser > 0 && s.slots.byUser[user] >= s.MaxStreamsPerUser {
		return &parley.Error{Code: parley.ECRateLimited, RetryAfter: 5 * time.Second,
			Message: "too many open streams: at most " + strconv.Itoa(s.MaxStreamsPerUser) + " per user; close one first"}
	}
	s.slots.byUser[user]++
	return nil
}

// giveStream gives back a slot takeStream took.
func (s *server) giveStream(user string) {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	if s.slots.byUser[user]--; s.slots.byUser[user] <= 0 {
		delete(s.slots.byUser, user)
	}
}

// streamOpen records an open stream of kind in the metrics; streamClose records its end. The
// pair makes no callback, which StreamOpened would (a closure and its once: two allocations a
// stream).
func (s *server) streamOpen(kind string) {
	if s.Metrics != nil {
		s.Metrics.StreamOpen(kind)
	}
}

func (s *server) streamClose(kind string) {
	if s.Metrics != nil {
		s.Metrics.StreamClose(kind)
	}
}

// resumePoint reads where a client resumes: the Last-Event-ID header (which a browser's
// EventSource sends when it reconnects) or else the after query parameter. Absent: stream.Join.
func resumePoint(r *http.Request) (int64, error) {
	name, v := "Last-Event-ID", strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if v == "" {
		name, v = "after", r.URL.Query().Get("after")
	}
	if v == "" {
		return stream.Join, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<53 {
		return 0, parley.Errorf(parley.ECInvalid, "%s: must be the sequence number of an event (an integer from 0)", name)
	}
	return n, nil
}

// handleSessionStream streams a session's run events as SSE: from the event after the one the
// client names, or (naming none) from the start of the active run, then every run of the session
// as it happens, until the client leaves, the stream is idle for StreamIdle, or it has been open
// for StreamLifetime. With ?until=done the stream ends after the next done event.
func (s *server) handleSessionStream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, owner, err := s.sharedOwnedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		after, err := resumePoint(r)
		if err != nil {
			writeError(w, err)
			return
		}
		untilDone := false
		switch v := r.URL.Query().Get("until"); v {
		case "":
		case "done":
			untilDone = true
		default:
			writeError(w, parley.Errorf(parley.ECInvalid, "until: must be \"done\" or absent"))
			return
		}
		if err := s.takeStream(owner); err != nil {
			writeError(w, err)
			return
		}
		if s.streamDetached(w, r, sess.ID, after, untilDone, owner) {
			return
		}
		defer s.giveStream(owner)
		s.streamSession(w, r, sess.ID, after, untilDone)
	})
}

// streamDetached streams as streamSession does, on the connection taken over from net/http
// (HTTP/1.1), and returns at once: the stream goes on without the handler, so that an idle stream
// holds neither the request's goroutine and net/http's buffers nor a goroutine of its pump, nor
// (where the server's idlePoller can watch the connection) one that waits for the client to
// leave. The response is the same: chunked, its chunks written
// here, ending with the stream ("Connection: close"). It reports false, having written nothing,
// where the connection cannot be taken over (HTTP/2, a writer without Hijack); owner's stream
// slot (takeStream) is then the caller's to give back, and otherwise the stream's.
func (s *server) streamDetached(w http.ResponseWriter, r *http.Request, sessionID string, after int64, untilDone bool, owner string) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor < 1 || !canHijack(w) {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "close")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err == nil {
		err = brw.Writer.Flush() // the response's head, which net/http wrote
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		s.giveStream(owner)
		s.Log.Info("stream client dropped", "session", sessionID, "err", err)
		return true
	}
	// The handler's context ends when it returns; the stream's goes on, with its own end: the
	// client leaving, the server shutting down, the stream's lifetime (a deadline of the pump's).
	// The stream is one object (sseStream); it keeps of the request only its credentials.
	st := &sseStream{conn: conn, owner: owner, slot: true}
	if s.Metrics != nil {
		s.Metrics.StreamOpen("sse") // StreamClose in finish
	}
	st.ctx.from(r.Context())
	st.w = sseWriter{conn: conn, timeout: s.WriteTimeout}
	st.tr = sseTransport{s: s, sse: &st.w, session: sessionID, untilDone: untilDone, key: st.ctx.id.KeyID}
	st.pump = pump{s: s, t: &st.tr, heartbeat: s.Heartbeat, park: wsPark, lifetime: s.StreamLifetime, ownKick: true, noDone: true}
	st.secret, st.secretErr = bearer(r)
	st.subscribe(&st.ctx, sessionID, after)
	st.goOn(func() { st.startHere(&st.ctx) }) // its first work (the catch-up, if any) in this goroutine, which ends next
	return true
}

// goOn sets up what a stream taken over from net/http needs (its end at the server's shutdown,
// the watch on its connection), starts its pump (start), then waits for its client to leave:
// where the connection can be watched, no goroutine waits for that (the server's poller calls
// back when the connection is readable, and a read that does not block tells whether the client
// left; bytes it sends are dropped); elsewhere a goroutine reads until the client leaves or the
// pump, done, closes the connection.
func (st *sseStream) goOn(start func()) {
	st.pump.onEnd = st.onEnd
	if !st.s.addDetached(st) {
		st.ctx.cancel() // the server is shutting down: the pump ends at once
	}
	st.watch = st.s.idle.watch(st.conn, st.readable)
	start()
	if st.watch != nil {
		if !st.watch.arm() {
			st.end(errClientLeft)
		}
		return
	}
	go func() {
		var b [16]byte
		for {
			if _, err := st.conn.Read(b[:]); err != nil {
				break
			}
		}
		st.end(errClientLeft)
		st.ended()
	}()
}

// sseReadable is called when a detached stream's connection has something to read: the client
// left (its end of the connection, or an error) or it sent bytes, which are dropped (and, with
// sent, noted); then the watch waits again (at once, if more is there: one read per call, so
// that a client that keeps sending does not hold the poller).
func sseReadable(w *idleWatch, end func(error), sent *bool) {
	var b [512]byte
	n, err := w.readNow(b[:])
	if n > 0 && sent != nil {
		*sent = true
	}
	if (err == nil || errors.Is(err, errWouldBlock)) && w.arm() {
		return
	}
	end(errClientLeft)
}

// detachedRequest is what a stream that outlives its handler keeps of its request, with ctx: the
// credentials its recheck reads (the Authorization header, or a WebSocket's key offered as a
// subprotocol), not the whole request.
func detachedRequest(r *http.Request, ctx context.Context) *http.Request {
	var h http.Header
	if v := r.Header["Authorization"]; len(v) > 0 {
		h = http.Header{"Authorization": v}
	} else if wsAuthProtocol(r) != "" {
		h = http.Header{"Sec-Websocket-Protocol": r.Header["Sec-Websocket-Protocol"]}
	}
	d := &http.Request{Method: constant(r.Method, http.MethodGet), Proto: constant(r.Proto, "HTTP/1.1"),
		ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor, Header: h, Host: r.Host, RemoteAddr: r.RemoteAddr}
	return d.WithContext(ctx)
}

// constant returns c when s is c: net/http's method and protocol are parts of the request line
// it read, which a string kept for the stream's life would keep whole.
func constant(s, c string) string {
	if s == c {
		return c
	}
	return s
}

// errClientLeft: the client of a detached stream closed its connection.
var errClientLeft = errorString("client left")

// canHijack reports whether w, or a writer it wraps, can hand over its connection.
func canHijack(w http.ResponseWriter) bool {
	for {
		if _, ok := w.(http.Hijacker); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// streamSession writes the session's events after seq `after` as SSE, each with its seq as id,
// until the client leaves, the stream is idle for StreamIdle or open for StreamLifetime, or (with
// untilDone) a done event has been written. One writer per connection: the calling goroutine.
//
// A stream with untilDone (a streamed chat's) still open after chatDetachAfter, on a connection
// net/http can hand over (HTTP/1.1), is taken over from net/http (takeOver) and goes on as a
// detached stream does (streamDetached), parking between batches: a long answer then holds
// neither the request's goroutine, net/http's read of the connection and its buffers, nor a
// goroutine of its pump while it waits for the model. Its response was sent chunked and without
// "Connection: close" (a short chat keeps its connection); once its last chunk is written, the
// connection is given back to the HTTP server (Deps.GiveBack), which reads the client's next
// request from it; without GiveBack, or where the stream did not end whole, it closes.
func (s *server) streamSession(w http.ResponseWriter, r *http.Request, sessionID string, after int64, untilDone bool) {
	// Only the pump's call stays on the handler's stack for the stream's length: what comes
	// before and after it is in functions of their own (TestStreamedChatStackUnderThePump).
	if st := s.sessionStream(w, r, sessionID, after, untilDone); st != nil {
		st.afterRun(st.run(r.Context()))
	}
}

// sessionStream starts streamSession's response and readies its pump; nil: the response was an
// error.
//
//go:noinline
func (s *server) sessionStream(w http.ResponseWriter, r *http.Request, sessionID string, after int64, untilDone bool) *sseStream {
	st := &sseStream{}
	if err := st.w.start(w, s.WriteTimeout); err != nil {
		writeError(w, err)
		return nil
	}
	s.streamOpen("sse")
	// The stream's lifetime is a deadline of the pump's, not a context with a timer of its own.
	st.tr = sseTransport{s: s, r: r, sse: &st.w, session: sessionID, untilDone: untilDone}
	st.pump = pump{s: s, r: r, t: &st.tr, heartbeat: s.Heartbeat, lifetime: s.StreamLifetime}
	if untilDone && r.ProtoMajor == 1 && r.ProtoMinor >= 1 && canHijack(w) {
		st.detachAt, st.detacher = time.Now().Add(time.Duration(chatDetachAfter.Load())), st
	}
	st.subscribe(r.Context(), sessionID, after)
	return st
}

// afterRun ends streamSession's response, or hands the stream over to its pump (errDetached).
//
//go:noinline
func (st *sseStream) afterRun(err error) {
	if err == errDetached {
		st.goOn(func() { st.continueDetached(&st.ctx, chatPark) })
		return
	}
	st.w.end()
	st.s.streamClose("sse")
}

// chatDetachAfter is how long a streamed chat's response stays with net/http before it is taken
// over (streamSession): short chats keep their connection for the client's next request.
var chatDetachAfter atomic.Int64 // a time.Duration

func init() { chatDetachAfter.Store(int64(2 * time.Second)) }

// chatPark is how long a detached chat's pump waits with nothing to do before it parks: not at
// all. A model's chunks come a few milliseconds apart, so a pump that waited wsPark would keep a
// goroutine for the whole answer; parked, it holds none between batches, for a goroutine start
// per batch (bench/longstream at 1,000 streams: ~5 KiB less resident memory a stream than with
// wsPark, no CPU difference beyond the scatter; docs/benchmarks.md).
const chatPark = time.Nanosecond

// takeOver takes the stream's connection from net/http (the pump's detacher), its response's
// head and every chunk so far written and flushed: the stream's chunks are written to the
// connection from here on. It keeps of the request only what a detached stream does. It reports
// false, the stream staying with net/http, if the connection cannot be taken.
func (st *sseStream) takeOver() bool {
	conn, brw, err := http.NewResponseController(st.w.w).Hijack()
	if err != nil {
		return false
	}
	r := st.pump.r
	st.conn = conn
	// What the client sent after its request, which net/http's reader holds (a pipelined
	// request), would be lost to the server that the connection is given back to: then it closes.
	st.reuse = st.s.GiveBack != nil && brw.Reader.Buffered() == 0
	st.ctx.from(r.Context())
	st.secret, st.secretErr = bearer(r)
	st.tr.r, st.tr.key = nil, st.ctx.id.KeyID
	st.pump.r = nil
	st.w = sseWriter{conn: conn, timeout: st.w.timeout}
	return true
}

// sseTransport writes a session's stream as SSE events (GET …/stream, POST …/chat/stream).
type sseTransport struct {
	s         *server
	r         *http.Request // nil: key names the caller's key (a detached stream's)
	key       string
	sse       *sseWriter
	session   string
	untilDone bool
}

// frames gathers the events; flush, or the end of the response, sends them.
func (t *sseTransport) frames(fs []*stream.Frame) (bool, error) {
	done := false
	for _, f := range fs {
		t.sse.event(f)
		done = done || f.Type == parley.EventDone
	}
	if err := t.sse.err; err != nil { // a write of a large batch failed
		t.s.Log.Info("stream client dropped", "session", t.session, "err", err)
		return false, err
	}
	return t.untilDone && done, nil
}

func (t *sseTransport) flush() error {
	if err := t.sse.flush(); err != nil {
		t.s.Log.Info("stream client dropped", "session", t.session, "err", err)
		return err
	}
	return nil
}

func (t *sseTransport) heartbeat() error { return t.sse.comment("ping") }

func (t *sseTransport) failed(err error) {
	t.s.Log.Warn("event stream ended", "session", t.session, "err", err)
}

// revoked: an error event (no id, so a client that resumes does not skip anything), then the end
// of the stream.
func (t *sseTransport) revoked(err error) {
	t.sse.errorEvent(errorBodyOf(err))
	_ = t.sse.flush()
	t.s.Log.Info("stream ended: credentials no longer valid", "session", t.session, "key", t.keyID())
}

// keyID is the caller's key (the identity's KeyID), for the log.
func (t *sseTransport) keyID() string {
	if t.r == nil {
		return t.key
	}
	return identityOf(t.r).KeyID
}

func (t *sseTransport) idle() {
	_ = t.sse.comment("idle timeout: reconnect with Last-Event-ID to go on")
}

func (t *sseTransport) lifetime() {
	_ = t.sse.comment("lifetime reached: reconnect with Last-Event-ID to go on")
}

// control applies a control action to the session's active run, whichever instance runs it.
func (s *server) control(ctx context.Context, sessionID, action string) (map[string]any, error) {
	runID, state, err := s.Runs.Control(ctx, sessionID, action)
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": action, "run_id": runID, "state": state}, nil
}

// handleControl is POST /api/v1/sessions/{id}/{abort|pause|resume}.
func (s *server) handleControl(action string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		out, err := s.control(r.Context(), sess.ID, action)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}
