package httpapi

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func waitFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not call back")
	}
}

// A watch calls back once per arm when its connection has bytes to read and when the peer leaves;
// readNow then reads without waiting. Once nothing is watched, the poller's goroutine ends.
func TestIdlePollerWatch(t *testing.T) {
	p := newIdlePoller()
	server, client := tcpPair(t)
	fired := make(chan struct{}, 4)
	// Through a wrapper that says what it wraps, as the per-address limit's does.
	w := p.watch(&limitedConn{Conn: server}, func() { fired <- struct{}{} })
	if w == nil {
		t.Fatal("a TCP connection cannot be watched")
	}
	if !w.arm() {
		t.Fatal("arm failed")
	}
	if _, err := client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	waitFired(t, fired)
	b := make([]byte, 16)
	if n, err := w.readNow(b); err != nil || string(b[:n]) != "hello" {
		t.Fatalf("readNow: %q, %v", b[:n], err)
	}
	if _, err := w.readNow(b); !errors.Is(err, errWouldBlock) {
		t.Fatalf("readNow with nothing to read: %v, want errWouldBlock", err)
	}
	if !w.arm() {
		t.Fatal("arm again failed")
	}
	client.Close()
	waitFired(t, fired)
	if _, err := w.readNow(b); err != io.EOF {
		t.Fatalf("readNow after the peer left: %v, want EOF", err)
	}
	w.close()
	if w.arm() {
		t.Fatal("a closed watch armed")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		p.mu.Lock()
		stopped := p.epfd < 0 && len(p.watches) == 0
		p.mu.Unlock()
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the poller still runs with nothing to watch")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// It starts again for the next watch.
	server2, client2 := tcpPair(t)
	w2 := p.watch(server2, func() { fired <- struct{}{} })
	if !w2.arm() {
		t.Fatal("arm after the poller stopped failed")
	}
	client2.Write([]byte("x"))
	waitFired(t, fired)
	w2.close()
}

// A watch closed while armed calls back no more and leaves nothing in the poller.
func TestIdlePollerCloseArmed(t *testing.T) {
	p := newIdlePoller()
	server, client := tcpPair(t)
	w := p.watch(server, func() { t.Error("called back after close") })
	if !w.arm() {
		t.Fatal("arm failed")
	}
	w.close()
	p.mu.Lock()
	left := len(p.watches)
	p.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d watches left after close", left)
	}
	client.Write([]byte("x"))
	client.Close()
	server.Close()
}

// Only sockets read directly can be watched.
func TestIdlePollerWatchesSocketsOnly(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if w := newIdlePoller().watch(a, func() {}); w != nil {
		t.Fatal("a pipe was watched")
	}
}
