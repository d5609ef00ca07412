package httpapi

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/internal/logctx"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/stream"
)

// opaqueListener hands out connections the idle poller cannot watch (not sockets to it).
type opaqueListener struct{ net.Listener }

type opaqueConn struct{ net.Conn }

func (l opaqueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return opaqueConn{c}, nil
}

// closeMetrics reports each stream's end (StreamClose) on closed, with how many stream slots
// its user still holds then.
type closeMetrics struct {
	s      *server
	closed chan int
}

func (closeMetrics) Request(string, string, int, time.Duration) {}
func (closeMetrics) StreamOpen(string)                          {}
func (m closeMetrics) StreamClose(string) {
	m.s.slots.mu.Lock()
	n := m.s.slots.byUser["u"]
	m.s.slots.mu.Unlock()
	m.closed <- n
}

// detachedServer serves detached SSE streams of session "s" on conns the poller watches, or
// (opaque) cannot; each stream's end is reported on released, with the slots its user holds then.
func detachedServer(t *testing.T, opaque bool) (url string, shutdown func(), released chan int) {
	m := runs.NewManager(runs.Options{})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	life, shutdown := context.WithCancel(context.Background())
	t.Cleanup(shutdown)
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour, StreamLifetime: time.Hour, WriteTimeout: time.Minute,
		Heartbeat: time.Hour, Lifetime: life, Log: slog.New(slog.DiscardHandler)}, idle: newIdlePoller(),
		slots: streamSlots{byUser: map[string]int{}}}
	released = make(chan int, 10)
	s.Metrics = closeMetrics{s: s, closed: released}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.takeStream("u"); err != nil {
			t.Error(err)
			return
		}
		if !s.streamDetached(w, r, "s", stream.Join, false, "u") {
			t.Error("the stream was not detached")
		}
	}))
	if opaque {
		srv.Listener = opaqueListener{srv.Listener}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, shutdown, released
}

// openDetached opens a stream and reads its head.
func openDetached(t *testing.T, url string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	return c, br
}

// waitReleased waits for the end of the server's one stream, which gives back its slot.
func waitReleased(t *testing.T, released chan int, what string) {
	select {
	case n := <-released:
		if n != 0 {
			t.Fatalf("%s: the stream ended holding its slot (%d held)", what, n)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the stream did not end", what)
	}
}

// A detached SSE stream lets go of its slot when its client leaves and ends at the server's
// shutdown, whether the poller watches its connection or (where it cannot) a goroutine reads it;
// and one opened after the shutdown began ends at once.
func TestDetachedSSEStreamEnds(t *testing.T) {
	for _, opaque := range []bool{false, true} {
		url, shutdown, released := detachedServer(t, opaque)
		c, _ := openDetached(t, url)
		c.Close()
		waitReleased(t, released, "client left")

		_, br := openDetached(t, url)
		shutdown()
		if _, err := io.Copy(io.Discard, br); err != nil { // the response's end, then EOF
			t.Fatal(err)
		}
		waitReleased(t, released, "shutdown")

		_, br = openDetached(t, url)
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatal(err)
		}
		waitReleased(t, released, "opened after the shutdown")
	}
}

// A detached stream's context carries the request's identity and log attributes, and ends once.
func TestStreamCtx(t *testing.T) {
	id := auth.Identity{User: "alice", KeyID: "k1"}
	r := context.WithValue(logctx.With(context.Background(), "request_id", "r1"), identityKey, id)
	var c streamCtx
	c.from(r)
	if got, _ := c.Value(identityKey).(auth.Identity); got != id {
		t.Fatalf("identity %+v, want %+v", got, id)
	}
	if as := logctx.Attrs(&c); len(as) != 1 || as[0].Key != "request_id" {
		t.Fatalf("log attributes %v", as)
	}
	if c.Value(bodyKey) != nil || c.Err() != nil {
		t.Fatal("a value it does not carry, or ended before its cancel")
	}
	done := c.Done()
	c.cancel()
	c.cancel()
	<-done
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err %v", c.Err())
	}
	var empty streamCtx
	empty.from(context.Background())
	if empty.Value(identityKey) != nil || logctx.Attrs(&empty) != nil {
		t.Fatal("values from an empty context")
	}
	empty.cancel()
	<-empty.Done()
}

// parkedBare waits until the server's one detached stream has parked (at most 20 s) and reports
// whether it parked holding neither a timer of its loop nor its context's Done channel, which a
// pump that parks from its wait makes and keeps for the stream's life.
func parkedBare(t *testing.T, s *server) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.detached.mu.Lock()
		st := s.detached.head
		s.detached.mu.Unlock()
		if st != nil {
			st.mu.Lock()
			parked := st.started && !st.running
			timer := st.timer
			st.mu.Unlock()
			if parked {
				st.ctx.mu.Lock()
				done := st.ctx.done
				st.ctx.mu.Unlock()
				return timer == nil && done == nil
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream did not park")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An idle detached stream parks from its first work, and again after each heartbeat, without
// waiting on a timer or on its context: it keeps neither (issue 25: an idle SSE stream's memory).
// It still sees its end: its client leaving, and the server's shutdown.
func TestDetachedStreamParksBare(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	life, shutdown := context.WithCancel(context.Background())
	t.Cleanup(shutdown)
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour, StreamLifetime: time.Hour, WriteTimeout: time.Minute,
		Heartbeat: 50 * time.Millisecond, Lifetime: life, Log: slog.New(slog.DiscardHandler)}, idle: newIdlePoller(),
		slots: streamSlots{byUser: map[string]int{}}}
	released := make(chan int, 10)
	s.Metrics = closeMetrics{s: s, closed: released}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.takeStream("u"); err != nil {
			t.Error(err)
			return
		}
		s.streamDetached(w, r, "s", stream.Join, false, "u")
	}))
	t.Cleanup(srv.Close)

	c, br := openDetached(t, srv.URL)
	if !parkedBare(t, s) {
		t.Fatal("parked after its first work holding a timer or a Done channel")
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for pings := 0; pings < 3; { // heartbeats: each wakes the pump, which parks again
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ": ping") {
			pings++
		}
	}
	if !parkedBare(t, s) {
		t.Fatal("parked after heartbeats holding a timer or a Done channel")
	}
	c.Close()
	waitReleased(t, released, "client left")

	_, br = openDetached(t, srv.URL)
	parkedBare(t, s)
	shutdown()
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, released, "shutdown")
}
