package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
)

// writeCounter is a net.Conn that counts its writes.
type writeCounter struct {
	net.Conn
	mu     sync.Mutex
	writes int
	bytes  strings.Builder
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.bytes.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *writeCounter) count() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.bytes.String()
}

type countingListener struct {
	net.Listener
	conns chan *writeCounter
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &writeCounter{Conn: c}
	l.conns <- wc
	return wc, nil
}

// A corked connection gathers its writes and sends them in one when uncorked; one past corkMax
// goes out at once, after what was gathered.
func TestCorkGathersWrites(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	w := &writeCounter{Conn: a}
	c := &corkConn{Conn: w}
	go func() { // the pipe's reader
		buf := make([]byte, 1<<20)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	c.cork()
	for _, s := range []string{"one ", "two ", "three"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := w.count(); n != 0 {
		t.Fatalf("%d writes while corked, want 0", n)
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	if n, got := w.count(); n != 1 || got != "one two three" {
		t.Fatalf("uncork: %d writes of %q, want 1 of %q", n, got, "one two three")
	}
	c.cork()
	c.Write([]byte("a"))
	c.Write(make([]byte, corkMax)) // past the bound: what was gathered, then this
	if n, _ := w.count(); n != 3 {
		t.Fatalf("a write past corkMax: %d writes in all, want 3", n)
	}
	c.uncork()
	if n, _ := w.count(); n != 3 {
		t.Fatalf("uncork with nothing gathered wrote: %d writes, want 3", n)
	}
	c.Write([]byte("uncorked"))
	if n, _ := w.count(); n != 4 {
		t.Fatalf("an uncorked write: %d writes, want 4", n)
	}
}

// A batch of events reaches a WebSocket client in one write to the connection, each event its own
// frame.
func TestWebSocketBatchIsOneWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *writeCounter, 1)
	sent := make(chan error, 1)
	batch := make(chan []*stream.Frame, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkingWriter{ResponseWriter: w}
		c, err := websocket.Accept(cw, r, nil)
		if err != nil {
			sent <- err
			return
		}
		defer c.CloseNow()
		ws := &wsConn{s: &server{Deps: Deps{WriteTimeout: 5 * time.Second}}, c: c, conn: cw.conn,
			cancel: func(error) {}}
		sent <- ws.sendEvents(context.Background(), <-batch)
		c.Read(context.Background()) // until the client closes
	}))
	srv.Listener = countingListener{Listener: ln, conns: conns}
	srv.Start()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseNow()
	wc := <-conns
	before, _ := wc.count() // the handshake's response
	var frames []*stream.Frame
	for i := range 5 {
		ev := parley.Event{Seq: int64(i + 1), Type: parley.EventChunk, Content: "x"}
		frames = append(frames, stream.NewFrame(ev, []byte(`{"seq":`+strconv.Itoa(i+1)+`}`)))
	}
	batch <- frames
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if after, _ := wc.count(); after-before != 1 {
		t.Fatalf("a batch of 5 events took %d writes, want 1", after-before)
	}
	for i := range 5 {
		_, b, err := client.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"type":"llm_chunk","seq":` + strconv.Itoa(i+1) + `,"data":{"seq":` + strconv.Itoa(i+1) + `}}`
		if string(b) != want {
			t.Fatalf("frame %d: %s, want %s", i, b, want)
		}
	}
}

// Every write to the connection underneath has a deadline: a client that takes nothing is not
// waited on past it.
func TestCorkedWritesHaveADeadline(t *testing.T) {
	a, b := net.Pipe() // nobody reads b
	defer a.Close()
	defer b.Close()
	c := &corkConn{Conn: a, timeout: 50 * time.Millisecond}
	for _, corked := range []bool{false, true} {
		done := make(chan error, 1)
		go func() {
			if corked {
				c.cork()
				c.Write([]byte("gathered"))
				done <- c.uncork()
				return
			}
			_, err := c.Write([]byte("direct"))
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("corked %v: write to a client that reads nothing: %v, want a deadline error", corked, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("corked %v: the write waited for a client that reads nothing", corked)
		}
	}
}
