package onewrite

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// body is a Body, as provider/internal/upstream's request body is.
type body struct{ b []byte }

func (r *body) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
func (r *body) Close() error { return nil }
func (r *body) Len() int     { return len(r.b) }
func (r *body) WriteTo(w io.Writer) (int64, error) {
	b := r.b
	r.b = nil
	n, err := w.Write(b)
	return int64(n), err
}

// echo is a server answering each request with its method and body, and the transport to it
// whose connections are Conns (kept in conns).
type echo struct {
	srv   *httptest.Server
	tr    *http.Transport
	mu    sync.Mutex
	conns []*Conn
}

func newEcho(t *testing.T, tlsServer bool) *echo {
	e := &echo{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write([]byte(r.Method + " "))
		w.Write(b)
	})
	if tlsServer {
		e.srv = httptest.NewTLSServer(h)
	} else {
		e.srv = httptest.NewServer(h)
	}
	t.Cleanup(e.srv.Close)
	var d net.Dialer
	// The write buffer of Parley's connections to the model (cmd/parley): smaller than the bodies.
	e.tr = &http.Transport{WriteBufferSize: 1 << 10, TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			w := Wrap(c)
			e.mu.Lock()
			e.conns = append(e.conns, w)
			e.mu.Unlock()
			return w, nil
		}}
	t.Cleanup(e.tr.CloseIdleConnections)
	return e
}

// do sends req and checks that the server got its method and want as the body.
func (e *echo) do(t *testing.T, req *http.Request, want string) {
	t.Helper()
	resp, err := e.tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != req.Method+" "+want {
		t.Fatalf("the server got %.60q…, want %.60q…", got, req.Method+" "+want)
	}
}

func (e *echo) writes() (conns int, writes int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.conns {
		writes += c.Writes()
	}
	return len(e.conns), writes
}

func post(t *testing.T, url string, b io.Reader, n int64) *http.Request {
	req, err := http.NewRequest(http.MethodPost, url, b)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	return req
}

// A request whose body is a Body goes out in one write, head and body together, request after
// request on the same connection (net/http alone: two, the head flushed first).
func TestHeadAndBodyInOneWrite(t *testing.T) {
	e := newEcho(t, false)
	for i := range 5 {
		b := strings.Repeat("conversation ", 300+i) // 3.9 KB: more than the write buffer
		e.do(t, post(t, e.srv.URL+"/v1/chat", &body{b: []byte(b)}, int64(len(b))), b)
		if conns, writes := e.writes(); conns != 1 || writes != int64(i+1) {
			t.Fatalf("after %d requests: %d connections, %d writes; want 1 and %d", i+1, conns, writes, i+1)
		}
	}
}

// Whatever else net/http writes goes through intact, and requests after it too: requests without
// a body, a body net/http copies in parts, a chunked body, Expect: 100-continue, TLS.
func TestOtherRequestsGoThrough(t *testing.T) {
	for _, tlsServer := range []bool{false, true} {
		e := newEcho(t, tlsServer)
		long := strings.Repeat("x", 5000)
		get, _ := http.NewRequest(http.MethodGet, e.srv.URL, nil)
		e.do(t, get, "")
		e.do(t, post(t, e.srv.URL, &body{b: []byte("short")}, 5), "short")
		e.do(t, post(t, e.srv.URL, bytes.NewReader([]byte(long)), int64(len(long))), long)  // in memory: no head flush
		e.do(t, post(t, e.srv.URL, struct{ io.Reader }{strings.NewReader(long)}, -1), long) // chunked
		cont := post(t, e.srv.URL, &body{b: []byte(long)}, int64(len(long)))
		cont.Header.Set("Expect", "100-continue")
		e.do(t, cont, long)
		e.do(t, post(t, e.srv.URL, &body{b: []byte(long)}, int64(len(long))), long)
		get, _ = http.NewRequest(http.MethodGet, e.srv.URL, nil)
		e.do(t, get, "")
	}
}

func TestRequestHead(t *testing.T) {
	for _, c := range []struct {
		head string
		n    int64
		ok   bool
	}{
		{"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 3412\r\nContent-Type: application/json\r\n\r\n", 3412, true},
		{"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", 0, true},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 0, true},
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\n", 0, false},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", 0, false}, // a head with body bytes
		{"POST / HTTP/1.1\r\nHost: a\r\n", 0, false},                               // half a head
		{"Host: a\r\nContent-Length: 5\r\n\r\n", 0, false},                         // a head's second half
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, false},                             // HTTP/2's preface
		{"\x16\x03\x01\x00 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 0, false},       // not a method
		{"POST HTTP/1.1\r\n\r\n", 0, false},                                        // "POST" then " HTTP/1.1": no target, still a line
		{"", 0, false},
	} {
		n, ok := requestHead([]byte(c.head))
		if n != c.n || ok != c.ok {
			t.Errorf("requestHead(%q) = %d, %v; want %d, %v", c.head, n, ok, c.n, c.ok)
		}
	}
}

// parts is a Body in parts, as provider/internal/upstream's request body is when a provider
// shares part of it between requests: it writes them in one WriteBuffers when it can.
type parts struct{ bufs net.Buffers }

func (r *parts) Read(p []byte) (int, error) { return r.bufs.Read(p) }
func (r *parts) Close() error               { return nil }
func (r *parts) Len() int {
	n := 0
	for _, b := range r.bufs {
		n += len(b)
	}
	return n
}
func (r *parts) WriteTo(w io.Writer) (int64, error) {
	if bw, ok := w.(BuffersWriter); ok {
		return bw.WriteBuffers(&r.bufs)
	}
	return r.bufs.WriteTo(w)
}

// A body in parts goes out with its head in one write too, request after request, whole.
func TestPartsWithHeadInOneWrite(t *testing.T) {
	e := newEcho(t, false)
	shared := []byte(strings.Repeat("tools ", 700)) // 4.2 KB, the same in every request
	for i := range 5 {
		head := []byte(strings.Repeat("conversation ", 10+i))
		tail := []byte("}")
		want := string(head) + string(shared) + string(tail)
		e.do(t, post(t, e.srv.URL+"/v1/chat", &parts{bufs: net.Buffers{head, shared, tail}}, int64(len(want))), want)
		if conns, writes := e.writes(); conns != 1 || writes != int64(i+1) {
			t.Fatalf("after %d requests: %d connections, %d writes; want 1 and %d", i+1, conns, writes, i+1)
		}
	}
	if string(shared) != strings.Repeat("tools ", 700) {
		t.Fatal("the shared part was written to")
	}
}

// discard is a connection that takes every write.
type discard struct{ net.Conn }

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A request's head and body go out with one allocation: the list of the two (on the code
// before, the list and its slice were two).
func TestHeadAndBodyAllocateOnce(t *testing.T) {
	c := Wrap(discard{})
	head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
	body := []byte("hello")
	if n := testing.AllocsPerRun(100, func() {
		c.Write(head)
		c.Write(body)
	}); n > 1 {
		t.Fatalf("%v allocations a request, want at most 1", n)
	}
	if c.Writes() != 101 {
		t.Fatalf("%d writes for 101 requests", c.Writes())
	}
}
