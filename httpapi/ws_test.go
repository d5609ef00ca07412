package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/runs"
)

// frame is a WebSocket frame as a client reads it.
type frame struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Seq  int64           `json:"seq"`
	Data json.RawMessage `json:"data"`
}

func (f frame) event(t *testing.T) parley.Event {
	t.Helper()
	var ev parley.Event
	if err := json.Unmarshal(f.Data, &ev); err != nil {
		t.Fatalf("frame %s: data is not an event: %s", f.Type, f.Data)
	}
	return ev
}

func (f frame) field(t *testing.T, name string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(f.Data, &m); err != nil {
		t.Fatalf("frame %s: data %s", f.Type, f.Data)
	}
	return m[name]
}

type wsClient struct {
	t      *testing.T
	c      *websocket.Conn
	frames chan frame // filled by the client's reader goroutine, once started
	err    chan error // the error that ended the reader
}

// dialWS opens a WebSocket as user (its API key in the Authorization header) with the query, and
// starts reading frames in the background. The reader never closes the connection on its own,
// so that a test can wait for a frame that must not come.
func (e *env) dialWS(t *testing.T, user, query string) (*wsClient, *http.Response, error) {
	t.Helper()
	c, resp, err := e.dialWSOpts(t, user, query, nil)
	if err == nil {
		c.startReading()
	}
	return c, resp, err
}

// dialWSOpts dials without starting the reader; client, when set, makes the connection.
func (e *env) dialWSOpts(t *testing.T, user, query string, client *http.Client) (*wsClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{}
	if user != "-" {
		h.Set("Authorization", "Bearer "+e.key(t, user))
	}
	c, resp, err := websocket.Dial(ctx, strings.Replace(e.url, "http", "ws", 1)+"/api/ws"+query, &websocket.DialOptions{
		HTTPHeader: h, Subprotocols: []string{"parley.v1"}, HTTPClient: client,
	})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c, frames: make(chan frame, 10000), err: make(chan error, 1)}, resp, nil
}

func (w *wsClient) startReading() {
	go func() {
		defer close(w.frames)
		for {
			_, b, err := w.c.Read(context.Background())
			if err != nil {
				w.err <- err
				return
			}
			var f frame
			if err := json.Unmarshal(b, &f); err != nil {
				f = frame{Type: "not JSON: " + string(b)}
			}
			w.frames <- f
		}
	}()
}

func (e *env) ws(t *testing.T, user, query string) *wsClient {
	t.Helper()
	c, resp, err := e.dialWS(t, user, query)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", query, err, status)
	}
	if c.c.Subprotocol() != "parley.v1" {
		t.Fatalf("subprotocol %q", c.c.Subprotocol())
	}
	return c
}

func (w *wsClient) send(v string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(v)); err != nil {
		w.t.Fatalf("send %s: %v", v, err)
	}
}

func (w *wsClient) read() frame {
	w.t.Helper()
	// Generous: a frame that is coming may take seconds on a loaded machine under -race.
	f, err := w.tryRead(20 * time.Second)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return f
}

var errNoFrame = errors.New("no frame in time")

// tryRead returns the next frame, the error that closed the connection, or errNoFrame after d.
func (w *wsClient) tryRead(d time.Duration) (frame, error) {
	select {
	case f, ok := <-w.frames:
		if !ok {
			return frame{}, <-w.err
		}
		if strings.HasPrefix(f.Type, "not JSON") {
			w.t.Fatalf("frame %s", f.Type)
		}
		return f, nil
	case <-time.After(d):
		return frame{}, errNoFrame
	}
}

// untilDone reads frames up to the done event and returns the run-event frames and the others.
func (w *wsClient) untilDone() (events, other []frame) {
	w.t.Helper()
	for {
		f := w.read()
		if f.Seq == 0 {
			other = append(other, f)
			continue
		}
		events = append(events, f)
		if f.event(w.t).Type == parley.EventDone {
			return events, other
		}
	}
}

// expect reads the next frame and checks its type (and id, when given).
func (w *wsClient) expect(typ, id string) frame {
	w.t.Helper()
	f := w.read()
	if f.Type != typ || id != "" && f.ID != id {
		w.t.Fatalf("got frame %s (id %q) %s, want %s (id %q)", f.Type, f.ID, f.Data, typ, id)
	}
	return f
}

func seqs(fs []frame) []int64 {
	var out []int64
	for _, f := range fs {
		out = append(out, f.Seq)
	}
	return out
}

// consecutive fails unless the frames' seqs run from first without gap or repeat.
func consecutive(t *testing.T, who string, fs []frame, first int64) {
	t.Helper()
	for i, f := range fs {
		if f.Seq != first+int64(i) {
			t.Fatalf("%s: seqs %v, want consecutive from %d", who, seqs(fs), first)
		}
	}
}

// stepAgent streams "one", waits for step, streams "two", passes the run's gate, waits for step
// again, then stores the answer "onetwo".
func stepAgent(e *env, step chan struct{}) {
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		wait := func() error {
			select {
			case <-step:
				return nil
			case <-ctx.Done():
				return parley.Errorf(parley.ECCanceled, "aborted")
			}
		}
		emit(parley.Event{Type: parley.EventChunk, Content: "one"})
		if err := wait(); err != nil {
			return nil, err
		}
		emit(parley.Event{Type: parley.EventChunk, Content: "two"})
		if err := in.Run.Gate(ctx); err != nil {
			return nil, err
		}
		if err := wait(); err != nil {
			return nil, err
		}
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("onetwo"), RunID: in.RunID, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := e.store.AppendMessages(ctx, in.SessionID, m); err != nil {
			return nil, err
		}
		emit(parley.Event{Type: parley.EventRecord, Message: m})
		return &agent.Result{Final: m, FinishReason: parley.FinishStop}, nil
	}
}

// TestWebSocketConversation: the protocol of docs/protocol.md end to end: status, ping, a user
// message and its run's events (the same data, byte for byte, and the same seqs as the SSE
// stream), get_history, and bad frames answered with errors on a connection that stays open.
func TestWebSocketConversation(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	c := e.ws(t, "alice", "?convId="+sid)
	if st := c.expect("status", ""); st.field(t, "state") != "connected" || st.field(t, "session_id") != sid {
		t.Fatalf("status: %s", st.Data)
	}
	c.send(`{"type":"ping","id":"p1"}`)
	c.expect("pong", "p1")

	c.send(`{"type":"user_message","id":"m1","data":{"text":"Hi"}}`)
	evs, other := c.untilDone()
	if len(other) != 1 || other[0].Type != "control_response" || other[0].ID != "m1" || other[0].field(t, "run_id") == "" {
		t.Fatalf("ack: %+v", other)
	}
	want := []string{"status", "user_message", "llm_chunk", "llm_chunk", "llm_complete", "usage", "status"}
	var got []string
	for _, f := range evs {
		got = append(got, f.Type)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("frames %v, want %v", got, want)
	}
	consecutive(t, "ws", evs, 1)
	if ev := evs[1].event(t); ev.Message.Content.String() != "Hi" {
		t.Fatalf("user_message frame: %s", evs[1].Data)
	}

	// The SSE stream of the session carries the same events: same ids, same data bytes.
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream?after=0&until=done")
	sse, _ := readEvents(t, resp.Body, nil)
	resp.Body.Close()
	if len(sse) != len(evs) {
		t.Fatalf("SSE has %d events, WebSocket %d", len(sse), len(evs))
	}
	for i := range sse {
		if sse[i].id != fmt.Sprint(evs[i].Seq) || sse[i].raw != string(evs[i].Data) {
			t.Fatalf("event %d differs:\n SSE %s %s\n  WS %d %s", i, sse[i].id, sse[i].raw, evs[i].Seq, evs[i].Data)
		}
	}

	c.send(`{"type":"control","id":"h1","data":{"action":"get_history"}}`)
	h := c.expect("control_response", "h1")
	if msgs, _ := h.field(t, "messages").([]any); len(msgs) != 2 {
		t.Fatalf("history: %s", h.Data)
	}

	// Bad frames get an error frame; the connection stays usable.
	for _, bad := range []struct{ frame, code, reason string }{
		{`not json`, "invalid", "invalid JSON"},
		{`{"type":"shout","id":"x1"}`, "invalid", `"shout" is not a client frame`},
		{`{"type":"user_message","id":"x2"}`, "invalid", "data: required"},
		{`{"type":"user_message","id":"x3","data":{"text":"  "}}`, "invalid", "message: must not be empty"},
		{`{"type":"user_message","id":"x4","data":{"text":"hi","fileIds":["f1"]}}`, "not_found", `file "f1" not found`},
		{`{"type":"user_message","id":"x5","data":{"text":"hi","model":"gpt-9"}}`, "invalid", "unknown model"},
		{`{"type":"user_message","id":"x6","data":{"text":"hi","extra":1}}`, "invalid", `unknown field "extra"`},
		{`{"type":"control","id":"x7","data":{"action":"explode"}}`, "invalid", "action"},
		{`{"type":"control","id":"x8","data":{"action":"abort"}}`, "conflict", "no run is active"},
		{`{"type":"control","id":"x9","data":{"action":"get_history","limit":5000}}`, "invalid", "limit"},
	} {
		c.send(bad.frame)
		f := c.expect("error", "")
		if f.field(t, "code") != bad.code || !strings.Contains(fmt.Sprint(f.field(t, "message")), bad.reason) {
			t.Fatalf("%s: error %s, want %s containing %q", bad.frame, f.Data, bad.code, bad.reason)
		}
	}
	c.send(`{"type":"ping","id":"p2"}`)
	c.expect("pong", "p2")
	if n, _ := e.store.History(context.Background(), sid); len(n) != 2 {
		t.Fatalf("bad frames stored something: %d messages", len(n))
	}
}

// TestWebSocketNewConversation: without convId the first user_message creates the session, and
// the connection follows it.
func TestWebSocketNewConversation(t *testing.T) {
	e := newEnv(t, nil)
	c := e.ws(t, "alice", "")
	c.expect("status", "")
	c.send(`{"type":"user_message","id":"m1","data":{"text":"Hello"}}`)
	evs, other := c.untilDone()
	sid, _ := other[0].field(t, "session_id").(string)
	if sid == "" || evs[0].event(t).SessionID != sid {
		t.Fatalf("ack %s / first event %s", other[0].Data, evs[0].Data)
	}
	if s, err := e.store.GetSession(context.Background(), sid); err != nil || s.Owner != "alice" {
		t.Fatalf("new session: %+v %v", s, err)
	}
}

// TestTheReplyGoesBeforeTheRunsEvents: a frame that starts a run in the connection's session
// (a user_message, a retry) is answered before any event of that run goes out, even when the
// whole run is over before its reply is queued ("the run's events follow", docs/protocol.md).
func TestTheReplyGoesBeforeTheRunsEvents(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	// The reply is held back until the run has ended: its events are in the stream by then.
	undo := httpapi.SetBeforeAnswer(func() {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if _, active := e.runs.Active(sid); !active {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	defer undo()
	for i, frame := range []string{
		`{"type":"user_message","id":"m1","data":{"text":"Hi"}}`,
		`{"type":"user_message","id":"m2","data":{"text":"Again"}}`,
	} {
		c.send(frame)
		if f := c.read(); f.Type != "control_response" || f.ID != fmt.Sprintf("m%d", i+1) {
			t.Fatalf("frame %d: the first frame after it is %s (seq %d) %s, not its reply", i+1, f.Type, f.Seq, f.Data)
		}
		evs, other := c.untilDone()
		if len(other) != 0 || evs[0].event(t).Type != parley.EventStart {
			t.Fatalf("frame %d: then %d events from %s, and %d other frames", i+1, len(evs), evs[0].Data, len(other))
		}
	}
}

// TestBroadcastAndJoinMidRun: every client of a conversation sees a run live, whichever started
// it; one that joins mid-run gets status, then what the run produced so far, then live events,
// with no duplicate and no gap.
func TestBroadcastAndJoinMidRun(t *testing.T) {
	e := newEnv(t, nil)
	step := make(chan struct{})
	stepAgent(e, step)
	sid := e.newSession(t, "alice")
	c1 := e.ws(t, "alice", "?convId="+sid)
	c2 := e.ws(t, "alice", "?convId="+sid)
	c1.expect("status", "")
	c2.expect("status", "")
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream?until=done")
	defer resp.Body.Close()

	// The run is started over HTTP: no WebSocket client started it.
	starter := e.stream(t, context.Background(), `{"message":"go","session_id":"`+sid+`"}`)
	defer starter.Body.Close()
	var seen1, seen2 []frame
	for _, x := range []struct {
		c    *wsClient
		seen *[]frame
	}{{c1, &seen1}, {c2, &seen2}} {
		for {
			f := x.c.read()
			*x.seen = append(*x.seen, f)
			if f.Type == "llm_chunk" {
				break
			}
		}
	}
	// c3 joins now, mid-run.
	c3 := e.ws(t, "alice", "?convId="+sid)
	st := c3.expect("status", "")
	if st.field(t, "active_run") == nil {
		t.Fatalf("a client joining mid-run is not told of the run: %s", st.Data)
	}
	step <- struct{}{}
	step <- struct{}{}
	rest1, _ := c1.untilDone()
	rest2, _ := c2.untilDone()
	all3, _ := c3.untilDone()
	all1, all2 := append(seen1, rest1...), append(seen2, rest2...)
	sse, _ := readEvents(t, resp.Body, nil)
	for who, fs := range map[string][]frame{"c1": all1, "c2": all2, "c3": all3} {
		consecutive(t, who, fs, 1)
		if len(fs) != 6 { // start, user, one, two, answer, done
			t.Fatalf("%s saw %v", who, seqs(fs))
		}
	}
	if len(sse) != 6 || sse[0].id != "1" || sse[5].name != "done" {
		t.Fatalf("SSE follower saw %+v", sse)
	}
}

// TestResume: a client names the last event it saw and gets exactly the rest: from memory while
// the run is live, and from the store after it ended, even on a restarted server. A run goes on
// when every client has left.
func TestResume(t *testing.T) {
	e := newEnv(t, nil)
	step := make(chan struct{})
	stepAgent(e, step)
	sid := e.newSession(t, "alice")
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	c.send(`{"type":"user_message","id":"m1","data":{"text":"Hi"}}`)
	var last int64
	for {
		f := c.read()
		if f.Seq > 0 {
			last = f.Seq
		}
		if f.Type == "llm_chunk" {
			break
		}
	}
	c.c.CloseNow() // every client leaves mid-run

	// SSE resume from memory, with Last-Event-ID, while the run is live.
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream?until=done", "Last-Event-ID", fmt.Sprint(last))
	step <- struct{}{}
	step <- struct{}{}
	live, _ := readEvents(t, resp.Body, nil)
	resp.Body.Close()
	if len(live) != 3 || live[0].id != fmt.Sprint(last+1) || live[2].name != "done" {
		t.Fatalf("resumed after %d: %+v", last, live)
	}
	// The run went on without clients; its answer is stored.
	if msgs, _ := e.store.History(context.Background(), sid); len(msgs) != 2 || msgs[1].Content.String() != "onetwo" {
		t.Fatalf("history after the run: %+v", msgs)
	}

	// WebSocket reconnect naming the last seq, after the run ended (memory).
	c2 := e.ws(t, "alice", fmt.Sprintf("?convId=%s&after=%d", sid, last))
	c2.expect("status", "")
	rest, _ := c2.untilDone()
	consecutive(t, "ws resume", rest, last+1)
	for i := range rest {
		if string(rest[i].Data) != live[i].raw {
			t.Fatalf("resumed event %d differs: %s vs %s", i, rest[i].Data, live[i].raw)
		}
	}
	// Nothing more comes: no duplicate of what was sent.
	if f, err := c2.tryRead(100 * time.Millisecond); err == nil {
		t.Fatalf("unexpected frame after done: %+v", f)
	}

	// A restarted server holds no run in memory: the rest comes from the store.
	url := e.restart(t)
	resp2, _ := e.sseAt(t, url, "alice", fmt.Sprintf("/api/v1/sessions/%s/stream?after=%d&until=done", sid, last))
	stored, _ := readEvents(t, resp2.Body, nil)
	resp2.Body.Close()
	if len(stored) != len(live) {
		t.Fatalf("from the store: %+v", stored)
	}
	for i := range stored {
		if stored[i].id != live[i].id || stored[i].raw != live[i].raw {
			t.Fatalf("stored event %d: %s %s, live %s %s", i, stored[i].id, stored[i].raw, live[i].id, live[i].raw)
		}
	}
	// And the whole stream from the start, from the store, is consecutive from 1.
	resp3, _ := e.sseAt(t, url, "alice", "/api/v1/sessions/"+sid+"/stream?after=0&until=done")
	whole, _ := readEvents(t, resp3.Body, nil)
	resp3.Body.Close()
	for i, ev := range whole {
		if ev.id != fmt.Sprint(i+1) {
			t.Fatalf("stored stream ids: event %d has id %s", i, ev.id)
		}
	}

	// Bad resume points are a 400 with the reason.
	for _, bad := range []string{"-1", "abc", "1e3", "99999999999999999999"} {
		r, body := e.raw(t, "GET", "/api/v1/sessions/"+sid+"/stream", "", "Authorization", "Bearer "+e.key(t, "alice"), "Last-Event-ID", bad)
		if r.StatusCode != 400 || !strings.Contains(body, "Last-Event-ID") {
			t.Fatalf("Last-Event-ID %q: %d %s", bad, r.StatusCode, body)
		}
	}
	if r, body := e.raw(t, "GET", "/api/ws?convId="+sid+"&after=x", "", "Authorization", "Bearer "+e.key(t, "alice")); r.StatusCode != 400 || !strings.Contains(body, "after") {
		t.Fatalf("after=x: %d %s", r.StatusCode, body)
	}
}

// TestControl: abort stops the run and frees the session; pause holds the run at its next step
// until resume; a pause that lasts too long aborts the run; a second message during a run is
// refused.
func TestControl(t *testing.T) {
	// Long enough for the pause and resume below on a loaded machine; short enough to wait for
	// at the end, where a pause outlives it.
	e := newEnvWith(t, runs.Options{PauseTimeout: 2 * time.Second}, nil)
	step := make(chan struct{}, 4)
	stepAgent(e, step)
	sid := e.newSession(t, "alice")
	c := e.ws(t, "alice", "?convId="+sid)
	watcher := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	watcher.expect("status", "")

	// Pause, then let the run reach its gate: it waits there until resumed.
	c.send(`{"type":"user_message","id":"m1","data":{"text":"Hi"}}`)
	waitFor(t, c, "llm_chunk")
	c.send(`{"type":"user_message","id":"m2","data":{"text":"again"}}`)
	if f := waitFor(t, c, "error"); f.ID != "m2" || f.field(t, "code") != "conflict" {
		t.Fatalf("second message during a run: %s", f.Data)
	}
	c.send(`{"type":"control","id":"c1","data":{"action":"pause"}}`)
	if f := waitFor(t, c, "control_response"); f.field(t, "state") != "paused" {
		t.Fatalf("pause: %s", f.Data)
	}
	// Every client sees the pause.
	for {
		f := waitFor(t, watcher, "status")
		if f.Seq > 0 && f.event(t).State == parley.RunPaused {
			break
		}
	}
	step <- struct{}{}              // the agent streams "two" and reaches the gate
	f := waitFor(t, c, "llm_chunk") // "two": the step under way finishes
	if f.event(t).Content != "two" {
		t.Fatalf("chunk %s", f.Data)
	}
	step <- struct{}{} // would let the run finish, but it is held at the gate
	if f, err := c.tryRead(100 * time.Millisecond); err == nil {
		t.Fatalf("a paused run went on: %s %s", f.Type, f.Data)
	}
	// Over HTTP, the same control.
	if code, out := e.do(t, "POST", "/api/v1/sessions/"+sid+"/resume", ""); code != 200 || out["state"] != "running" {
		t.Fatalf("resume: %d %v", code, out)
	}
	if f := waitFor(t, c, "status"); f.event(t).State != parley.RunResumed {
		t.Fatalf("resumed status: %s", f.Data)
	}
	evs, _ := c.untilDone()
	if last := evs[len(evs)-1].event(t); last.FinishReason != parley.FinishStop {
		t.Fatalf("after resume: %s", evs[len(evs)-1].Data)
	}

	// Abort: the run ends as aborted and the session is free again.
	c.send(`{"type":"user_message","id":"m3","data":{"text":"Stop me"}}`)
	waitFor(t, c, "llm_chunk")
	c.send(`{"type":"control","id":"c2","data":{"action":"abort"}}`)
	evs, _ = c.untilDone()
	if last := evs[len(evs)-1].event(t); last.FinishReason != parley.FinishAborted {
		t.Fatalf("after abort: %s", evs[len(evs)-1].Data)
	}
	if code, _ := e.do(t, "POST", "/api/v1/sessions/"+sid+"/abort", ""); code != 409 {
		t.Fatalf("abort without a run: %d", code)
	}

	// A pause longer than the pause timeout (2 s here) aborts the run, with an error event.
	c.send(`{"type":"user_message","id":"m4","data":{"text":"Pause me"}}`)
	waitFor(t, c, "llm_chunk")
	if code, _ := e.do(t, "POST", "/api/v1/sessions/"+sid+"/pause", ""); code != 200 {
		t.Fatal("pause over HTTP")
	}
	step <- struct{}{}
	evs, _ = c.untilDone()
	var sawTimeout bool
	for _, f := range evs {
		if ev := f.event(t); ev.Type == parley.EventError && ev.Error.Code == parley.ECTimeout {
			sawTimeout = true
		}
	}
	if last := evs[len(evs)-1].event(t); !sawTimeout || last.FinishReason != parley.FinishAborted {
		t.Fatalf("a long pause: %v", seqs(evs))
	}
	// Every message has its place: the history is user, assistant, user, user (aborted runs
	// stored no answer in this fake), user.
	msgs, _ := e.store.History(context.Background(), sid)
	if len(msgs) != 4 {
		t.Fatalf("history: %d messages", len(msgs))
	}
}

// waitFor reads frames until one of type typ.
func waitFor(t *testing.T, c *wsClient, typ string) frame {
	t.Helper()
	for {
		if f := c.read(); f.Type == typ {
			return f
		}
	}
}

// TestStreamLimits: a maximum of streams per user, idle and lifetime timeouts, heartbeats, and
// slow clients dropped without holding up the run, then resuming.
func TestStreamLimits(t *testing.T) {
	t.Run("max streams per user", func(t *testing.T) {
		e := newEnv(t, func(d *httpapi.Deps) { d.MaxStreamsPerUser = 2 })
		sid := e.newSession(t, "alice")
		a := e.ws(t, "alice", "?convId="+sid)
		e.ws(t, "alice", "?convId="+sid)
		if _, resp, err := e.dialWS(t, "alice", "?convId="+sid); err == nil || resp == nil || resp.StatusCode != 429 {
			t.Fatalf("third stream: %v", err)
		}
		r, body := e.raw(t, "GET", "/api/v1/sessions/"+sid+"/stream", "", "Authorization", "Bearer "+e.key(t, "alice"))
		if r.StatusCode != 429 || !strings.Contains(body, "too many open streams") || r.Header.Get("Retry-After") == "" {
			t.Fatalf("third stream over SSE: %d %s", r.StatusCode, body)
		}
		// Bob has his own budget.
		e.ws(t, "bob", "")
		a.c.Close(websocket.StatusNormalClosure, "")
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, _, err := e.dialWS(t, "alice", "?convId="+sid); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a closed stream did not give its slot back")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("idle and lifetime", func(t *testing.T) {
		e := newEnv(t, func(d *httpapi.Deps) { d.StreamIdle = 150 * time.Millisecond; d.Heartbeat = 20 * time.Millisecond })
		sid := e.newSession(t, "alice")
		c := e.ws(t, "alice", "?convId="+sid)
		c.expect("status", "")
		_, err := c.tryRead(5 * time.Second)
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure || !strings.Contains(err.Error(), "idle timeout") {
			t.Fatalf("idle WebSocket: %v", err)
		}
		resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
		_, comments := readEvents(t, resp.Body, nil) // ends when the server closes it
		resp.Body.Close()
		if len(comments) < 2 || comments[0] != ": ping" || !strings.Contains(comments[len(comments)-1], "idle timeout") {
			t.Fatalf("idle SSE stream: heartbeats and close: %v", comments)
		}

		e2 := newEnv(t, func(d *httpapi.Deps) { d.StreamLifetime = 200 * time.Millisecond; d.Heartbeat = 20 * time.Millisecond })
		sid2 := e2.newSession(t, "alice")
		c2 := e2.ws(t, "alice", "?convId="+sid2)
		c2.expect("status", "")
		start := time.Now()
		for { // keep the connection busy: it still ends at its lifetime
			if c2.c.Write(context.Background(), websocket.MessageText, []byte(`{"type":"ping"}`)) != nil {
				break
			}
			if _, err = c2.tryRead(5 * time.Second); err != nil {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatal("a busy connection outlived its lifetime")
			}
		}
		for i := 0; i < 100 && (err == nil || errors.Is(err, errNoFrame)); i++ {
			_, err = c2.tryRead(5 * time.Second)
		}
		if !strings.Contains(err.Error(), "lifetime reached") {
			t.Fatalf("lifetime: %v", err)
		}
	})
	t.Run("unanswered pings", func(t *testing.T) {
		e := newEnv(t, func(d *httpapi.Deps) {
			d.MaxStreamsPerUser = 1
			d.Heartbeat = 20 * time.Millisecond
			d.WriteTimeout = 100 * time.Millisecond
		})
		// A client that never reads never answers a ping: it is dropped, and its slot freed.
		if _, _, err := e.dialWSOpts(t, "alice", "", nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, _, err := e.dialWS(t, "alice", ""); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a client that answers no ping was not dropped")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("slow client", func(t *testing.T) {
		// Nothing here depends on how fast the machine is: every wait is for a condition (with a
		// generous bound), and a reading client that a busy machine slows past the write timeout
		// is dropped too, so the resuming client resumes again until it has every event.
		e := newEnv(t, func(d *httpapi.Deps) {
			d.WriteTimeout = time.Second
			d.MaxStreamsPerUser = 1 // the slot comes free when the slow client is dropped
		})
		const chunks, size = 300, 64 << 10
		e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
			text := strings.Repeat("x", size) // 19 MB in all, far more than the sockets hold
			for range chunks {
				emit(parley.Event{Type: parley.EventChunk, Content: text})
			}
			return &agent.Result{FinishReason: parley.FinishStop}, nil
		}
		sid := e.newSession(t, "alice")
		// A client with a small socket buffer that reads nothing until the run is over.
		small := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				err = conn.(*net.TCPConn).SetReadBuffer(32 << 10)
			}
			return conn, err
		}}}
		slow, _, err := e.dialWSOpts(t, "alice", "?convId="+sid, small)
		if err != nil {
			t.Fatal(err)
		}
		slow.send(`{"type":"user_message","id":"m1","data":{"text":"flood me"}}`)
		// The slow client reads nothing; the run is not held up by it: it ends.
		deadline := time.Now().Add(60 * time.Second)
		for {
			run, ok := e.runs.Latest(sid)
			if ok {
				if f, _ := run.Result(); f == parley.FinishStop {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the run waited for a slow client")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// It is dropped: its slot comes free while it still reads nothing.
		deadline = time.Now().Add(60 * time.Second)
		for {
			c, _, err := e.dialWSOpts(t, "alice", "", nil)
			if err == nil {
				c.c.CloseNow()
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the slow client was not dropped")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Reading ends in an error once the buffered frames are read.
		slow.startReading()
		var last int64
		for {
			f, err := slow.tryRead(30 * time.Second)
			if errors.Is(err, errNoFrame) {
				t.Fatalf("the slow client's connection is still open (last %d)", last)
			}
			if err != nil {
				break
			}
			if f.Seq > 0 {
				last = f.Seq
			}
		}
		run, _ := e.runs.Latest(sid)
		end := run.LastSeq()
		if last >= end {
			t.Fatalf("the slow client got every event (%d of %d): it was not dropped", last, end)
		}
		// It resumes after the last event it got, and gets the rest, in order: resuming again
		// from where it was cut, should the busy machine slow it past the write timeout.
		var rest []frame
		from := last
		for attempt := 0; from < end; attempt++ {
			if attempt == 20 {
				t.Fatalf("resumed 20 times and still at %d of %d", from, end)
			}
			again := e.dialUntilFree(t, "alice", fmt.Sprintf("?convId=%s&after=%d", sid, from))
			for {
				f, err := again.tryRead(30 * time.Second)
				if err != nil {
					break // cut (or stuck): resume from the last event
				}
				if f.Seq == 0 {
					continue
				}
				rest = append(rest, f)
				from = f.Seq
				if f.event(t).Type == parley.EventDone {
					break
				}
			}
			again.c.CloseNow()
		}
		consecutive(t, "resumed slow client", rest, last+1)
		if rest[len(rest)-1].Seq != end {
			t.Fatalf("resumed up to %d, want %d", rest[len(rest)-1].Seq, end)
		}
	})
}

// dialUntilFree dials a WebSocket, waiting for a stream slot the server is still giving back.
func (e *env) dialUntilFree(t *testing.T, user, query string) *wsClient {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, resp, err := e.dialWS(t, user, query)
		if err == nil {
			return c
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", query, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWebSocketAuth: a browser's way to send the key (the subprotocol), no key, another user's
// conversation, and a page of a foreign origin.
func TestWebSocketAuth(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	url := strings.Replace(e.url, "http", "ws", 1) + "/api/ws?convId=" + sid
	dial := func(h http.Header, protocols ...string) (*websocket.Conn, int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h, Subprotocols: protocols})
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return c, code, err
	}
	c, _, err := dial(nil, "parley.v1", "parley.auth."+e.key(t, "alice"))
	if err != nil {
		t.Fatalf("key as subprotocol: %v", err)
	}
	if c.Subprotocol() != "parley.v1" {
		t.Fatalf("the server picked %q: it must never echo the key", c.Subprotocol())
	}
	c.CloseNow()
	if _, code, err := dial(nil, "parley.v1"); err == nil || code != 401 {
		t.Fatalf("no key: %d %v", code, err)
	}
	if _, code, err := dial(nil, "parley.v1", "parley.auth.pk_wrong"); err == nil || code != 401 {
		t.Fatalf("bad key: %d %v", code, err)
	}
	if _, code, err := dial(http.Header{"Authorization": {"Bearer " + e.key(t, "bob")}}, "parley.v1"); err == nil || code != 403 {
		t.Fatalf("bob on alice's conversation: %d %v", code, err)
	}
	h := http.Header{"Authorization": {"Bearer " + e.key(t, "alice")}, "Origin": {"https://evil.example"}}
	if _, code, err := dial(h, "parley.v1"); err == nil || code != 403 {
		t.Fatalf("a foreign origin: %d %v", code, err)
	}

	// Bob's own connection, open while alice chats, carries nothing of hers: not her run's
	// events, not her history; and his messages go to a session of his own.
	bob := e.ws(t, "bob", "")
	var got []string
	got = append(got, string(bob.expect("status", "").Data))
	alice := e.ws(t, "alice", "?convId="+sid)
	alice.expect("status", "")
	alice.send(`{"type":"user_message","data":{"text":"alice-secret-question"}}`)
	alice.untilDone()
	bob.send(`{"type":"control","id":"h","data":{"action":"get_history"}}`)
	h1 := bob.expect("control_response", "h")
	got = append(got, string(h1.Data))
	bob.send(`{"type":"user_message","id":"m","data":{"text":"bob's own"}}`)
	evs, other := bob.untilDone()
	for _, f := range append(evs, other...) {
		got = append(got, string(f.Data))
	}
	for _, raw := range got {
		if strings.Contains(raw, "alice-secret-question") || strings.Contains(raw, sid) {
			t.Fatalf("bob's connection carries alice's data: %s", raw)
		}
	}
	if msgs, _ := h1.field(t, "messages").([]any); len(msgs) != 0 {
		t.Fatalf("bob's history before his first message: %s", h1.Data)
	}
	if s, _ := e.store.GetSession(context.Background(), evs[0].event(t).SessionID); s == nil || s.Owner != "bob" {
		t.Fatalf("bob's message went to %+v", s)
	}
}

// sse opens an SSE stream as user and checks it is one.
func (e *env) sse(t *testing.T, user, path string, hdr ...string) (*http.Response, error) {
	t.Helper()
	return e.sseAt(t, e.url, user, path, hdr...)
}

func (e *env) sseAt(t *testing.T, base, user, path string, hdr ...string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.key(t, user))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp, nil
}

// restart starts a second server on the env's database, as after a restart: it holds no run in
// memory. It returns its URL.
func (e *env) restart(t *testing.T) string {
	t.Helper()
	mgr := runs.NewManager(runs.Options{Events: e.store})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mgr.Shutdown(ctx)
	})
	svc := &chat.Service{Store: e.store, Runs: mgr, Agent: e.agent, DefaultModel: "mock"}
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Deps{Store: e.store, Chat: svc, Runs: mgr, Auth: &auth.Authenticator{Store: e.store}}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// When the server shuts down, a WebSocket is closed with 1001 (going away) and a reason, so that
// the client reconnects, to another instance, and resumes.
func TestWebSocketClosedAtShutdown(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	e.shutdown()
	f, err := c.tryRead(5 * time.Second)
	if errors.Is(err, errNoFrame) || err == nil {
		t.Fatalf("the connection is still open after shutdown (frame %+v)", f)
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != "server shutting down" {
		t.Fatalf("closed with %v, want 1001 \"server shutting down\"", err)
	}
}

// A WebSocket accepted while the server is already shutting down is closed with 1001 at once.
// The shutdown's callback then runs on another goroutine while the handler still sets the
// connection up: it must be registered only once the pump it kicks exists (under -race, the
// registration before the pump was a data race).
func TestWebSocketAcceptedDuringShutdown(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	e := newEnv(t, func(d *httpapi.Deps) { d.Lifetime = gone })
	sid := e.newSession(t, "alice")
	for i := range 5 {
		c := e.ws(t, "alice", "?convId="+sid)
		var err error
		for err == nil { // a status frame may come first
			_, err = c.tryRead(5 * time.Second)
		}
		if websocket.CloseStatus(err) != websocket.StatusGoingAway || !strings.Contains(err.Error(), "server shutting down") {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
}
