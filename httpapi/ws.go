package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/stream"
)

// The WebSocket protocol (docs/protocol.md, "WebSocket"). Every frame is one JSON object:
// {"type": …, "id": …, "data": …}; the server adds "seq" to the frames that carry run events.
const (
	wsProtocol     = "parley.v1"
	wsAuthPrefix   = "parley.auth."
	wsOutboxSize   = 32 // replies waiting for the writer; a client that floods past it is dropped
	wsHistoryLimit = 200
	// wsPark is how long a connection's pump waits with nothing to do before it gives back its
	// goroutine: an idle connection holds one goroutine, its reader.
	wsPark = time.Second
)

// wsFrameBuffers lends the writer a buffer to build run events' frames in, while it writes.
var wsFrameBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// wsFrameKeep is the largest frame buffer given back to wsFrameBuffers.
const wsFrameKeep = 16 << 10

// wsAuthProtocol returns the key a browser offers as the subprotocol "parley.auth.<key>", or "".
func wsAuthProtocol(r *http.Request) string {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, wsAuthPrefix) {
				return p[len(wsAuthPrefix):]
			}
		}
	}
	return ""
}

// wsIn is a frame from the client.
type wsIn struct {
	Type string          `json:"type"`
	ID   string          `json:"id,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// wsUserMessage is the data of a user_message frame.
type wsUserMessage struct {
	Text          string        `json:"text"`
	FileIDs       []string      `json:"fileIds,omitempty"`
	BinaryContent []parley.Part `json:"binary_content,omitempty"`
	Model         string        `json:"model,omitempty"`
	SelectedTools []string      `json:"selected_tools,omitempty"`
	ProjectID     string        `json:"project_id,omitempty"` // the project of the session the first message creates
	ParentID      string        `json:"parent_id,omitempty"`  // the message of the session it follows: an edit (issue 23)
}

// wsControl is the data of a control frame.
type wsControl struct {
	Action   string `json:"action"`
	AfterSeq int64  `json:"after_seq,omitempty"` // get_history: messages after this message seq
	Limit    int    `json:"limit,omitempty"`     // get_history: at most this many (default 200, max 1000)
	// retry: the model to answer with (default: the one that failed) and the tools it is offered.
	Model         string   `json:"model,omitempty"`
	SelectedTools []string `json:"selected_tools,omitempty"`
}

// wsOut is a frame to the client that is not a run event.
type wsOut struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
	Data any    `json:"data,omitempty"`
}

// wsEventType is the frame type a run event travels as (seed 002 §8's names where it has one).
func wsEventType(ev *parley.Event) string {
	switch ev.Type {
	case parley.EventChunk:
		return "llm_chunk"
	case parley.EventReasoning:
		return "llm_reasoning"
	case parley.EventRecord:
		if ev.Message != nil && ev.Message.Role == parley.RoleUser {
			return "user_message"
		}
		return "llm_complete"
	case parley.EventStart, parley.EventStatus, parley.EventDone:
		return "status"
	default: // tool_calls_start, tool_call, tool_result, usage, error
		return string(ev.Type)
	}
}

// appendWSEvent appends a run event's frame to b: {"type":…,"seq":…,"data":<the SSE event's data,
// byte for byte>}.
func appendWSEvent(b []byte, f *stream.Frame) []byte {
	b = append(b, `{"type":"`...)
	ev := f.Event()
	b = append(b, wsEventType(&ev)...)
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, f.Seq, 10)
	b = append(b, `,"data":`...)
	b = append(b, f.JSON...)
	return append(b, '}')
}

// wsConn is one WebSocket client. The handler's goroutine reads the client's frames and hands
// replies to the writer, the pump (which runs only while it has work), through outbox; a ping
// goes out every Heartbeat from a timer.
type wsConn struct {
	s        *server
	c        *websocket.Conn
	id       auth.Identity
	ip       string
	cancel   context.CancelCauseFunc
	outbox   chan []byte
	session  chan follow   // a session the reader created: the writer starts following it
	activity chan struct{} // the client sent a frame: the idle timer starts again
	// holding: the reader is handling a frame; the pump sends no run event meanwhile, so that
	// the frame's reply goes before the events it caused (a run it started: "the run's events
	// follow").
	holding atomic.Bool

	sessionID string // owned by the reader after the start

	r *http.Request // the upgrade request: its credentials are checked again while open

	conn *corkConn // the hijacked connection, which gathers each batch's writes
	buf  *[]byte   // the writer's frame buffer, borrowed from wsFrameBuffers while it writes
	pump *pump

	pingMu      sync.Mutex
	pingTimer   *time.Timer
	pingStopped bool
	pings       sync.WaitGroup // the ping under way, if any

	// connCtx is the I/O context of the connection: it ends only after the close handshake,
	// because a read or write whose context ends drops the connection without one.
	connCtx context.Context
	// life is the connection's life (the writer's context): the pump's writes stop when it ends.
	life context.Context
}

var (
	// errWSGone: the client is gone or cannot keep up (a read or write failed, a ping went
	// unanswered); the connection is dropped without a close handshake.
	errWSGone     = errors.New("client gone")
	errWSIdle     = errors.New("idle timeout")
	errWSFlood    = errors.New("too many frames without reading the replies")
	errWSLifetime = errors.New("lifetime reached")
	errWSShutdown = errors.New("server shutting down")
	// errWSRevoked: the connection's key was revoked or has expired (see wsRevoked).
	errWSRevoked = errors.New("unauthorized: invalid, revoked or expired API key")
)

// wsRevoked ends a connection whose key is no longer valid; id is the client frame that found
// out (a user_message), whose error reply is the last frame before the close.
type wsRevoked struct{ id string }

func (e wsRevoked) Error() string        { return errWSRevoked.Error() }
func (e wsRevoked) Is(target error) bool { return target == errWSRevoked }

// handleWS is GET /api/ws?convId=<session>&after=<seq>: a WebSocket on one conversation. Without
// convId the conversation is created by the first user_message.
func (s *server) handleWS() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := identityOf(r)
		sessionID := r.URL.Query().Get("convId")
		if sessionID != "" {
			r.SetPathValue("id", sessionID)
			if _, _, err := s.sharedOwnedSession(r); err != nil {
				writeError(w, err)
				return
			}
		}
		after, err := resumePoint(r)
		if err != nil {
			writeError(w, err)
			return
		}
		// The slot and the stream's place in the metrics are given back by finish, once, with
		// no callbacks kept for the connection's life.
		if err := s.takeStream(id.User); err != nil {
			writeError(w, err)
			return
		}
		cw := &corkingWriter{ResponseWriter: w, timeout: s.WriteTimeout}
		c, err := websocket.Accept(cw, r, &websocket.AcceptOptions{
			Subprotocols:   []string{wsProtocol},
			OriginPatterns: s.wsOrigins,
		})
		if err != nil {
			s.giveStream(id.User)
			return // Accept has answered the client
		}
		if s.Metrics != nil {
			s.Metrics.StreamOpen("websocket")
		}
		c.SetReadLimit(s.MaxBodyBytes)

		// The connection outlives this handler (see below): its life is its own, ended by the
		// server's shutdown (Lifetime), its own lifetime, or its end.
		life, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
		// Whoever ends it kicks its pump, which sees the end (no context.AfterFunc of its own).
		var conn *wsConn
		stop := func(err error) {
			cancel(err)
			conn.kick()
		}
		// Its lifetime is a deadline of its pump's, which ends it with errWSLifetime.
		ctx := life
		// The reads' and the pings' I/O use connCtx, which ends only after the close
		// handshake: a cancelled read would drop the connection before the close frame is sent.
		connCtx, endConn := context.WithCancel(context.WithoutCancel(ctx))
		// The request as the connection sees it from now on: its context is the connection's,
		// not the handler's (which ends when the handler returns), and of the rest only what the
		// recheck of its credentials reads.
		live := detachedRequest(r, ctx)
		conn = &wsConn{
			s: s, c: c, conn: cw.conn, id: id, ip: s.clientIP(r), r: live, cancel: stop, sessionID: sessionID, connCtx: connCtx, life: ctx,
			outbox: make(chan []byte, wsOutboxSize), session: make(chan follow, 1), activity: make(chan struct{}, 1),
		}
		// The pump writes, in a goroutine of its own while it has work; when it stops, it closes
		// the connection, which ends the reads.
		p := &pump{s: s, r: live, t: conn, replies: conn.outbox, sessions: conn.session, activity: conn.activity, hold: &conn.holding, park: wsPark, lifetime: s.StreamLifetime, ownKick: true,
			reply: func(b []byte) error { return conn.send(ctx, b) }}
		p.onEnd = func(err error) { conn.end(ctx, err, endConn) }
		conn.pump = p
		// The server's shutdown ends it too. Registered once conn.pump is set: a shutdown already
		// under way runs stop at once, on another goroutine, and stop kicks the pump.
		stopShutdown := func() bool { return false }
		if s.Lifetime != nil {
			stopShutdown = context.AfterFunc(s.Lifetime, func() { stop(errWSShutdown) })
		}
		if err := conn.connected(ctx, sessionID); err == nil && sessionID != "" {
			p.subscribe(ctx, sessionID, after)
		}
		// The reader owns the connection until its end, and lets go of it then.
		finish := func() {
			cancel(nil)
			<-p.done
			conn.stopPings()
			endConn()
			stopShutdown()
			c.CloseNow()
			if s.Metrics != nil {
				s.Metrics.StreamClose("websocket")
			}
			s.giveStream(id.User)
		}
		reading := func() {
			if conn.read(connCtx, ctx) {
				finish()
			}
		}
		// Where the server's poller can watch the connection, the reader gives back its
		// goroutine while the client is quiet (wsidle.go); a new one reads when it speaks.
		if cw.conn.rs.watch = s.idle.watch(cw.conn.Conn, cw.conn.rs.wake); cw.conn.rs.watch != nil {
			cw.conn.rs.resume = reading
		}
		p.start(ctx) // ends at once if the connected status could not be sent
		conn.startPings(connCtx, ctx)
		// The handler returns: net/http then lets go of what it holds for the request (its
		// buffers, its goroutine's stack), which an idle connection would otherwise keep for its
		// life.
		go reading()
	})
}

// connected sends the first frame: the connected status.
func (w *wsConn) connected(ctx context.Context, sessionID string) error {
	status := map[string]any{"state": "connected", "session_id": sessionID, "user": w.id.User}
	if sessionID != "" {
		if run, ok := w.s.Runs.Active(sessionID); ok {
			status["active_run"] = run.ID
			status["paused"] = run.Paused()
		}
	}
	return w.send(ctx, mustJSON(wsOut{Type: "status", Data: status}))
}

// end closes the connection once its pump has stopped with err: with a close frame and the
// reason (ctx's cause) where there is one to give, or at once when the client is gone.
func (w *wsConn) end(ctx context.Context, err error, endConn func()) {
	w.cancel(err)
	w.conn.rs.closing.Store(true) // the close handshake's reads wait for the client
	code, reason := websocket.StatusNormalClosure, ""
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errWSIdle), errors.Is(cause, errWSLifetime):
		reason = cause.Error() + ": reconnect with after=<last seq> to go on"
	case errors.Is(cause, errWSFlood):
		code, reason = websocket.StatusPolicyViolation, cause.Error()
	case errors.Is(cause, errWSRevoked):
		// An error frame, then a close with 1008 and the reason: the client must not
		// reconnect with the same key.
		code, reason = websocket.StatusPolicyViolation, cause.Error()
		var rv wsRevoked
		errors.As(cause, &rv)
		_ = w.send(context.Background(), mustJSON(wsOut{Type: "error", ID: rv.id, Data: errorBodyOf(auth.ErrBadCredentials)}))
		w.s.Log.Info("websocket closed: credentials no longer valid", "key", w.id.KeyID)
	case errors.Is(cause, errWSShutdown):
		code, reason = websocket.StatusGoingAway, "server shutting down"
	}
	if errors.Is(context.Cause(ctx), errWSGone) {
		w.c.CloseNow()
	} else {
		_ = w.c.Close(code, reason) // the handshake is bounded by the library (5s per step)
	}
	endConn()
}

// The connection is the pump's transport: run events go out as frames, and the ends of the stream
// are the connection's close reasons (the handler closes it with the context's cause).

func (w *wsConn) frames(fs []*stream.Frame) (bool, error) {
	if err := w.sendEvents(w.life, fs); err != nil {
		w.s.Log.Info("websocket client dropped", "seq", fs[0].Seq, "err", err)
		return false, err
	}
	return false, nil
}

func (w *wsConn) flush() error { return nil } // frames wrote its batch as one write already

func (w *wsConn) heartbeat() error { return nil } // pings go out on their own (startPings)

func (w *wsConn) failed(err error) {
	w.s.Log.Warn("websocket stream ended", "err", err)
	_ = w.send(w.life, mustJSON(wsOut{Type: "error", Data: errorBodyOf(err)}))
}

func (w *wsConn) revoked(error) { w.cancel(wsRevoked{}) }

func (w *wsConn) idle() { w.cancel(errWSIdle) }

func (w *wsConn) lifetime() { w.cancel(errWSLifetime) }

// send writes frames within the write timeout, gathered into one write, unless ctx has ended; a
// client that cannot take them is dropped. Only the writer calls it.
func (w *wsConn) send(ctx context.Context, frames ...[]byte) error {
	return w.sendEach(ctx, len(frames), func(i int) []byte { return frames[i] })
}

// sendEvents writes run events as send does.
func (w *wsConn) sendEvents(ctx context.Context, frames []*stream.Frame) error {
	w.buf = wsFrameBuffers.Get().(*[]byte)
	err := w.sendEach(ctx, len(frames), func(i int) []byte {
		*w.buf = appendWSEvent((*w.buf)[:0], frames[i])
		return *w.buf
	})
	if cap(*w.buf) <= wsFrameKeep { // a large event's buffer is not kept
		wsFrameBuffers.Put(w.buf)
	}
	w.buf = nil
	return err
}

func (w *wsConn) sendEach(ctx context.Context, n int, frame func(i int) []byte) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	// The connection bounds each of its writes (WriteTimeout); the frames go without a context
	// of their own (a timer and a callback each, otherwise).
	w.conn.cork()
	var err error
	for i := 0; i < n && err == nil; i++ {
		err = w.c.Write(context.Background(), websocket.MessageText, frame(i))
	}
	if uerr := w.conn.uncork(); err == nil {
		err = uerr
	}
	if err != nil {
		err = fmt.Errorf("%w: %v", errWSGone, err)
		w.cancel(err)
		return err
	}
	return nil
}

// reply queues a frame for the writer. A client that sends frames faster than it reads the
// replies fills the outbox and is dropped.
func (w *wsConn) reply(v wsOut) {
	select {
	case w.outbox <- mustJSON(v):
		w.kick()
	default:
		w.cancel(errWSFlood)
	}
}

func (w *wsConn) fail(id string, err error) {
	w.reply(wsOut{Type: "error", ID: id, Data: errorBodyOf(err)})
}

// startPings sends a WebSocket ping every Heartbeat until ctx ends, each from a timer's goroutine
// (none while waiting); a client that does not answer within the write timeout is dropped. The
// pings' I/O uses connCtx.
func (w *wsConn) startPings(connCtx, ctx context.Context) {
	var ping func()
	ping = func() {
		defer w.pings.Done()
		if ctx.Err() != nil {
			return
		}
		pctx, cancel := context.WithTimeout(connCtx, w.s.WriteTimeout)
		err := w.c.Ping(pctx)
		cancel()
		if err != nil {
			w.cancel(fmt.Errorf("%w: no answer to a ping: %v", errWSGone, err))
			return
		}
		w.pingMu.Lock()
		defer w.pingMu.Unlock()
		if !w.pingStopped {
			w.pings.Add(1)
			w.pingTimer.Reset(w.s.Heartbeat)
		}
	}
	w.pingMu.Lock()
	defer w.pingMu.Unlock()
	w.pings.Add(1)
	w.pingTimer = time.AfterFunc(w.s.Heartbeat, ping)
}

// stopPings stops the pings and waits for the one under way.
func (w *wsConn) stopPings() {
	w.pingMu.Lock()
	w.pingStopped = true
	if w.pingTimer != nil && w.pingTimer.Stop() {
		w.pings.Done() // the next ping will not run
	}
	w.pingMu.Unlock()
	w.pings.Wait()
}

// read handles the client's frames until the connection ends (ended), or until the reader gives
// back its goroutine, the client being quiet (wsidle.go); its I/O uses connCtx, and ctx is the
// connection's life, for the work a frame starts.
func (w *wsConn) read(connCtx, ctx context.Context) (ended bool) {
	for {
		typ, data, dropped, release, err := w.readFrame(connCtx, ctx)
		if errors.Is(err, errWouldBlock) {
			if w.conn.rs.park() {
				return false
			}
			continue // the connection is closing: read on to its end
		}
		if err != nil {
			if websocket.CloseStatus(err) == -1 { // not a close frame: the connection broke
				err = fmt.Errorf("%w: %v", errWSGone, err)
			}
			w.cancel(err)
			return true
		}
		select {
		case w.activity <- struct{}{}:
			w.kick()
		default:
		}
		switch {
		case dropped:
			w.fail("", &parley.Error{Code: parley.ECUnavailable, RetryAfter: max(w.s.BodyWait, time.Second),
				Message: "the server is busy reading other requests; send the frame again shortly"})
		case typ != websocket.MessageText:
			w.fail("", parley.Errorf(parley.ECInvalid, "frames must be JSON text"))
		default:
			w.holding.Store(true)
			w.handle(ctx, data)
			w.letGo()
		}
		release()
	}
}

// wsFreeFrame is how much of a frame is read without a share of the server's body budget: most
// frames are small; a larger one reserves --max-body-bytes before the rest is read.
const wsFreeFrame = 64 << 10

// readFrame reads one client frame. A frame larger than wsFreeFrame takes a share of the body
// budget, as a request body does, which release gives back; when none frees up in time, the rest
// of the frame is read and dropped (dropped).
func (w *wsConn) readFrame(connCtx, ctx context.Context) (typ websocket.MessageType, data []byte, dropped bool, release func(), err error) {
	release = func() {}
	w.conn.rs.between.Store(true) // reading the next header may give up rather than wait
	typ, rd, err := w.c.Reader(connCtx)
	w.conn.rs.between.Store(false)
	if err != nil {
		return typ, nil, false, release, err
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, rd, wsFreeFrame); errors.Is(err, io.EOF) {
		return typ, buf.Bytes(), false, release, nil
	} else if err != nil {
		return typ, nil, false, release, err
	}
	reserved, berr := w.s.bodies.acquire(ctx, w.s.MaxBodyBytes, w.s.BodyWait)
	rel := func() { w.s.bodies.release(reserved) }
	if berr != nil {
		_, err := io.Copy(io.Discard, rd)
		return typ, nil, true, release, err
	}
	if _, err := io.Copy(&buf, rd); err != nil {
		rel()
		return typ, nil, false, release, err
	}
	return typ, buf.Bytes(), false, rel, nil
}

// beforeAnswer, set by tests, runs before a frame's reply is queued.
var beforeAnswer atomic.Pointer[func()]

// letGo lets the pump send run events again once a frame's reply is queued (holding).
func (w *wsConn) letGo() {
	w.holding.Store(false)
	select {
	case w.activity <- struct{}{}: // wakes a pump waiting without the subscription
	default: // one is waiting already
	}
	w.kick()
}

// handle answers one client frame.
func (w *wsConn) handle(ctx context.Context, data []byte) {
	var in wsIn
	if err := decodeStrict(data, &in); err != nil {
		if a, id, ok := flatApproval(data); ok {
			// An approval frame may also carry its fields beside "type" (docs/protocol.md).
			out, err := w.approvalFrame(ctx, a)
			w.answer(id, out, err)
			return
		}
		w.fail("", err)
		return
	}
	if len(in.ID) > 128 {
		w.fail("", parley.Errorf(parley.ECInvalid, "id: at most 128 characters"))
		return
	}
	if err := parley.CheckText("id", in.ID, parley.TextName); err != nil {
		w.fail("", err)
		return
	}
	switch in.Type {
	case "ping":
		w.reply(wsOut{Type: "pong", ID: in.ID})
	case "user_message":
		var m wsUserMessage
		if err := decodeData(in.Data, &m); err != nil {
			w.fail(in.ID, err)
			return
		}
		out, err := w.userMessage(ctx, m)
		w.answer(in.ID, out, err)
	case "control":
		var c wsControl
		if err := decodeData(in.Data, &c); err != nil {
			w.fail(in.ID, err)
			return
		}
		out, err := w.controlFrame(ctx, c)
		w.answer(in.ID, out, err)
	case "regenerate":
		var m wsRegenerate
		if err := decodeData(in.Data, &m); err != nil {
			w.fail(in.ID, err)
			return
		}
		out, err := w.regenerate(ctx, m)
		w.answer(in.ID, out, err)
	case "approval":
		var a wsApproval
		if err := decodeData(in.Data, &a); err != nil {
			w.fail(in.ID, err)
			return
		}
		if err := a.Check(); err != nil {
			w.fail(in.ID, err)
			return
		}
		out, err := w.approvalFrame(ctx, a)
		w.answer(in.ID, out, err)
	default:
		w.fail(in.ID, parley.Errorf(parley.ECInvalid, "type: %q is not a client frame (user_message, control, regenerate, approval or ping)", truncate(in.Type, 40)))
	}
}

// answer replies to the client frame id with out, or with err; a key found revoked while the
// frame was handled closes the connection instead (the writer answers the frame and closes).
func (w *wsConn) answer(id string, out map[string]any, err error) {
	if f := beforeAnswer.Load(); f != nil {
		(*f)()
	}
	switch {
	case err != nil && parley.CodeOf(err) == parley.ECUnauth:
		w.cancel(wsRevoked{id: id})
	case err != nil:
		w.fail(id, err)
	default:
		w.reply(wsOut{Type: "control_response", ID: id, Data: out})
	}
}

func decodeData(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return parley.Errorf(parley.ECInvalid, "data: required")
	}
	return decodeStrict(raw, v)
}

// admit checks, before a frame starts a run, what the pipeline checks before a chat: the key
// (it may have been revoked since the connection opened; checked through the authenticator's
// short cache), the rate limit and the budget of runs.
func (w *wsConn) admit(ctx context.Context) error {
	s := w.s
	if err := s.stillValid(ctx, w.r); err != nil {
		return err // handle closes the connection; its last frame answers this one
	}
	if err := s.limitFor(ctx, w.ip, w.id, nil); err != nil {
		return err
	}
	if s.Runs.Full() {
		return runs.ErrOverloaded
	}
	return nil
}

// userMessage starts a run, as POST /api/v1/chat does, with the same checks: rate limit,
// throttle, validation, ownership.
func (w *wsConn) userMessage(ctx context.Context, m wsUserMessage) (map[string]any, error) {
	s := w.s
	if err := w.admit(ctx); err != nil {
		return nil, err
	}
	req := chat.Request{Message: m.Text, BinaryContent: m.BinaryContent, FileIDs: m.FileIDs, SessionID: w.sessionID, Model: m.Model, SelectedTools: m.SelectedTools, ProjectID: m.ProjectID, ParentID: m.ParentID}
	if err := s.Chat.Validate(&req); err != nil {
		return nil, err
	}
	st, err := s.Chat.Send(ctx, w.id.User, req)
	if err != nil {
		return nil, err
	}
	if w.sessionID == "" {
		w.sessionID = st.Session.ID
		// From the run's first event, not stream.Join: the run may be over before the writer
		// subscribes, and a reader that joins then starts after it.
		w.session <- follow{sessionID: st.Session.ID, after: st.Run.FirstSeq() - 1}
		w.kick()
	}
	return map[string]any{"action": "user_message", "session_id": st.Session.ID, "run_id": st.Run.ID, "message_id": st.UserMessage.ID}, nil
}

// retry starts a run that answers the session's failed last turn again, as POST
// /api/v1/sessions/{id}/retry does, with the same checks as a user message: rate limit,
// throttle, validation, ownership.
func (w *wsConn) retry(ctx context.Context, c wsControl) (map[string]any, error) {
	s := w.s
	if w.sessionID == "" {
		return nil, parley.Errorf(parley.ECConflict, "no session to retry: this connection has none yet")
	}
	if err := w.admit(ctx); err != nil {
		return nil, err
	}
	req := chat.RetryRequest{Model: c.Model, SelectedTools: c.SelectedTools}
	st, err := s.Chat.Retry(ctx, w.id.User, w.sessionID, req)
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": "retry", "session_id": st.Session.ID, "run_id": st.Run.ID, "model": st.Run.Model, "message_id": st.UserMessage.ID}, nil
}

// controlFrame answers a control frame: abort, pause, resume, retry, get_history or get_todos.
func (w *wsConn) controlFrame(ctx context.Context, c wsControl) (map[string]any, error) {
	s := w.s
	if c.Action == "get_history" {
		limit := c.Limit
		if limit == 0 {
			limit = wsHistoryLimit
		}
		if limit < 1 || limit > 1000 || c.AfterSeq < 0 {
			return nil, parley.Errorf(parley.ECInvalid, "limit: must be from 1 to 1000, after_seq from 0")
		}
		out := map[string]any{"action": "get_history", "session_id": w.sessionID, "messages": []parley.Message{}}
		if w.sessionID == "" {
			return out, nil
		}
		msgs, err := s.Store.ListMessages(ctx, w.sessionID, c.AfterSeq, limit)
		if err != nil {
			return nil, err
		}
		if msgs != nil {
			out["messages"] = msgs
		}
		if len(msgs) == limit {
			out["next_after"] = msgs[len(msgs)-1].Seq
		}
		return out, nil
	}
	if c.Action == "get_todos" {
		out := map[string]any{"action": "get_todos", "session_id": w.sessionID, "todos": []parley.Todo{}}
		if w.sessionID == "" {
			return out, nil
		}
		todos, err := s.Store.Todos(ctx, w.sessionID)
		if err != nil {
			return nil, err
		}
		out["todos"] = todos
		return out, nil
	}
	if c.Action == "retry" {
		return w.retry(ctx, c)
	}
	if c.Model != "" || c.SelectedTools != nil {
		return nil, parley.Errorf(parley.ECInvalid, "model, selected_tools: only for the retry action")
	}
	if c.Action != "abort" && c.Action != "pause" && c.Action != "resume" {
		return nil, parley.Errorf(parley.ECInvalid, "action: must be abort, pause, resume, retry, get_history or get_todos")
	}
	if w.sessionID == "" {
		return nil, parley.Errorf(parley.ECConflict, "no run is active in this session")
	}
	return s.control(ctx, w.sessionID, c.Action)
}

// errorBodyOf is the client-visible form of err, sanitized as writeError does.
func errorBodyOf(err error) parley.ErrorBody {
	return parley.ErrorBody{Code: parley.CodeOf(err), Message: redact.String(parley.MessageOf(err))}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own frame types are encoded here
	}
	return b
}

// kick tells the pump that the reader handed it something (a reply, a session, activity).
func (w *wsConn) kick() {
	if w.pump != nil { // a connection being tested on its own has none
		w.pump.kick()
	}
}
