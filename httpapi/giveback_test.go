package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/httpapi"
)

// countingListener counts the connections its listener accepts; they are handed out as they
// are, so that the idle poller watches them.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// streamEnds reports each stream's end (StreamClose).
type streamEnds chan struct{}

func (streamEnds) Request(string, string, int, time.Duration) {}
func (streamEnds) StreamOpen(string)                          {}
func (m streamEnds) StreamClose(string)                       { m <- struct{}{} }

// giveBackEnv is an env whose API is also served by an http.Server of its own on a
// GiveBackListener (as parley serve's), with its connections counted and the connections given
// back counted too; streams' ends are reported on ends.
type giveBackEnv struct {
	*env
	addr   string
	inner  *countingListener
	given  atomic.Int32
	ends   streamEnds
	gl     *httpapi.GiveBackListener
	served chan error
	srv    *http.Server
}

func newGiveBackEnv(t *testing.T) *giveBackEnv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &giveBackEnv{inner: &countingListener{Listener: ln}, ends: make(streamEnds, 10), served: make(chan error, 1)}
	g.gl = httpapi.ListenGiveBack(g.inner)
	g.env = newEnv(t, func(d *httpapi.Deps) {
		d.Metrics = g.ends
		d.GiveBack = func(c net.Conn) bool { g.given.Add(1); return g.gl.GiveBack(c) }
	})
	g.addr = ln.Addr().String()
	g.srv = &http.Server{Handler: g.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() { g.served <- g.srv.Serve(g.gl) }()
	t.Cleanup(func() { g.stop(t) })
	return g
}

// stop shuts the server down; Serve returns, its listener closed.
func (g *giveBackEnv) stop(t *testing.T) {
	t.Helper()
	// Less than the 5 s for which net/http waits for a connection accepted with nothing read.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := g.srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-g.served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	g.served <- http.ErrServerClosed // stop again: the same
}

func (g *giveBackEnv) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// waitEnd waits for a stream's end.
func (g *giveBackEnv) waitEnd(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.ends:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the stream did not end", what)
	}
}

// A streamed chat taken over from net/http gives its connection back to the HTTP server once
// its response has ended: the client's next requests on that connection (another streamed chat,
// taken over too, then a plain GET) are answered, and the server accepted one connection. On
// main the connection closed after the first response: the second request failed.
func TestStreamedChatConnectionGivenBack(t *testing.T) {
	defer httpapi.SetChatDetachAfter(0)() // taken over at its first write
	g := newGiveBackEnv(t)
	key := g.key(t, "alice")
	c, br := g.dial(t)
	for i := 0; i < 2; i++ {
		evs := postChatStream(t, g.env, c, br, key)
		if len(evs) == 0 || evs[len(evs)-1].name != "done" {
			t.Fatalf("chat %d: events %v", i, evs)
		}
		g.waitEnd(t, "chat")
	}
	req, _ := http.NewRequest("GET", "http://"+g.addr+"/api/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("the request after the chats: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the request after the chats: %d", resp.StatusCode)
	}
	if n, given := g.inner.n.Load(), g.given.Load(); n != 1 || given != 2 {
		t.Fatalf("%d connections accepted, %d given back; want 1, 2", n, given)
	}

	// Given back again, the connection is the server's: its shutdown closes it, nothing read
	// from it, without waiting (stop's bound).
	postChatStream(t, g.env, c, br, key)
	g.waitEnd(t, "chat")
	g.stop(t)
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the shutdown: read %d, %v; want the connection's end", n, err)
	}
}

// A taken-over chat's stream that does not end whole is not given back, its connection closed:
// the client leaving mid-answer, or the server shutting down mid-answer (its response ends, then
// the connection).
func TestStreamedChatNotGivenBack(t *testing.T) {
	defer httpapi.SetChatDetachAfter(0)()
	for _, how := range []string{"client left", "shutdown"} {
		g := newGiveBackEnv(t)
		gate := make(chan struct{})
		g.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
			emit(parley.Event{Type: parley.EventChunk, Content: "Hel"})
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil, context.Canceled
		}
		key := g.key(t, "alice")
		c, br := g.dial(t)
		resp := startChatStream(t, "http://"+g.addr, c, br, key)
		readEvents(t, resp.Body, func(ev event) bool { return ev.name == "chunk" })
		if how == "client left" {
			c.Close()
		} else {
			g.shutdown() // the server's Lifetime: its streams end
			if _, err := io.Copy(io.Discard, br); err != nil {
				t.Fatalf("%s: after the response: %v; want its end, then the connection's", how, err)
			}
		}
		g.waitEnd(t, how)
		close(gate)
		if n := g.given.Load(); n != 0 {
			t.Fatalf("%s: %d connections given back; want none", how, n)
		}
	}
}

// idleListener accepts nothing until it is closed.
type idleListener struct {
	closed chan struct{}
}

func (l idleListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}
func (l idleListener) Close() error   { close(l.closed); return nil }
func (l idleListener) Addr() net.Addr { return &net.TCPAddr{} }

// A GiveBackListener's Accept returns the connections given back; Close closes those not yet
// accepted, ends its goroutine, and refuses any given back after; Accept then fails.
func TestGiveBackListenerClose(t *testing.T) {
	before := runtime.NumGoroutine()
	l := httpapi.ListenGiveBack(idleListener{closed: make(chan struct{})})
	a, b := net.Pipe()
	if !l.GiveBack(a) {
		t.Fatal("refused before Close")
	}
	if c, err := l.Accept(); err != nil || c.(interface{ NetConn() net.Conn }).NetConn() != a {
		t.Fatalf("Accept: %v, %v; want the connection given back", c, err)
	}
	pa, pb := net.Pipe()
	l.GiveBack(pa) // pending at Close
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_ = pb.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := pb.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection pending at Close: read %v; want it closed", err)
	}
	if l.GiveBack(b) {
		t.Fatal("taken after Close")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	a.Close()
	b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before", n, before)
	}
}
