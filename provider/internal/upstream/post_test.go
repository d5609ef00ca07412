package upstream

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/onewrite"
)

// A streamed answer does not hold its request (the conversation so far, often the largest thing
// a run has) for its whole length: once Post returns, the request keeps nothing of the body.
func TestPostLetsGoOfTheRequestBody(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if len(got) != 256<<10 || got[0] != 'x' || got[len(got)-1] != 'x' {
			t.Errorf("the request arrived with %d bytes", len(got))
		}
		w.Write([]byte("data: {}\n\n"))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	ep := Endpoint{Client: srv.Client()}

	var collected atomic.Bool
	resp := func() *http.Response {
		arr := new([256 << 10]byte)
		copy(arr[:], bytes.Repeat([]byte("x"), len(arr)))
		runtime.AddCleanup(arr, func(b *atomic.Bool) { b.Store(true) }, &collected)
		resp, err := ep.Post(context.Background(), srv.URL, http.Header{"Content-Type": {"application/json"}}, arr[:])
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}()
	defer resp.Body.Close()
	// The answer is streaming (its first event is readable), and the request is still held by
	// the response (resp.Request) and the connection.
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !collected.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the request's body is still held while its answer streams")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(resp)
}

// A request sent again (a 307 redirect, as when a kept connection had been closed) sends the
// whole body again: the copy for that is let go only once the response came.
func TestPostSendsTheBodyAgainOnARedirect(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if string(got) != `{"q":"hello"}` || r.ContentLength != int64(len(got)) {
			t.Errorf("call %d: body %q, Content-Length %d", calls.Load()+1, got, r.ContentLength)
		}
		if calls.Add(1) == 1 {
			http.Redirect(w, r, "/again", http.StatusTemporaryRedirect)
			return
		}
		w.Write([]byte("data: {}\n\n"))
	}))
	defer srv.Close()
	resp, err := Endpoint{Client: srv.Client()}.Post(context.Background(), srv.URL, nil, []byte(`{"q":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2 (the redirect followed with the body)", calls.Load())
	}
}

// onewriteTransport is a transport whose connections are onewrite connections, each appended to
// conns as it is dialled.
func onewriteTransport(conns *[]*onewrite.Conn) *http.Transport {
	var d net.Dialer
	return &http.Transport{WriteBufferSize: 1 << 10, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		w := onewrite.Wrap(c)
		*conns = append(*conns, w)
		return w, nil
	}}
}

// Post's body is handed to a onewrite connection whole: the request's head and body go out in one
// write (the body is an io.ReadCloser and a onewrite.Body, so net/http does not wrap it).
func TestPostSendsHeadAndBodyInOneWrite(t *testing.T) {
	body := bytes.Repeat([]byte("m"), 3500)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, _ := io.ReadAll(r.Body); !bytes.Equal(got, body) {
			t.Errorf("the request arrived with %d bytes", len(got))
		}
		w.Write([]byte("data: {}\n\n"))
	}))
	defer srv.Close()
	var conns []*onewrite.Conn
	tr := onewriteTransport(&conns)
	defer tr.CloseIdleConnections()
	ep := Endpoint{Client: &http.Client{Transport: tr}}
	for i := range 3 {
		resp, err := ep.Post(context.Background(), srv.URL, http.Header{"Content-Type": {"application/json"}}, body)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if len(conns) != 1 || conns[0].Writes() != int64(i+1) {
			t.Fatalf("after %d requests: %d connections, %d writes on the first; want 1 and %d", i+1, len(conns), conns[0].Writes(), i+1)
		}
	}
}

// A body in parts arrives whole, the parts untouched: in one write with the head on a onewrite
// connection, in reads on another, and sent again on a redirect.
func TestPostPartsSendsTheWholeBody(t *testing.T) {
	head, shared, tail := []byte(`{"messages":[],"tools":`), bytes.Repeat([]byte("t"), 4000), []byte(`,"stream":true}`)
	want := string(head) + string(shared) + string(tail)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if string(got) != want || r.ContentLength != int64(len(want)) {
			t.Errorf("the request arrived with %d bytes (Content-Length %d), want %d", len(got), r.ContentLength, len(want))
		}
		if calls.Add(1) == 1 && r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/again", http.StatusTemporaryRedirect)
			return
		}
		w.Write([]byte("data: {}\n\n"))
	}))
	defer srv.Close()
	var conns []*onewrite.Conn
	tr := onewriteTransport(&conns)
	defer tr.CloseIdleConnections()
	post := func(ep Endpoint, path string) {
		t.Helper()
		resp, err := ep.PostParts(context.Background(), srv.URL+path, http.Header{"Content-Type": {"application/json"}}, head, shared, tail)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 3 {
		post(Endpoint{Client: &http.Client{Transport: tr}}, "/")
		if len(conns) != 1 || conns[0].Writes() != int64(i+1) {
			t.Fatalf("after %d requests: %d connections, %d writes on the first; want 1 and %d", i+1, len(conns), conns[0].Writes(), i+1)
		}
	}
	calls.Store(0)
	post(Endpoint{Client: srv.Client()}, "/redirect") // read through net/http's copy, then GetBody
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2 (the redirect followed with the body)", calls.Load())
	}
	if string(head)+string(shared)+string(tail) != want || !bytes.Equal(shared, bytes.Repeat([]byte("t"), 4000)) {
		t.Fatal("a part was written to")
	}
}

// requestBody reads its parts in order across reads of any size, and then io.EOF.
func TestRequestBodyReadsItsParts(t *testing.T) {
	for _, size := range []int{1, 3, 7, 64} {
		rb := &requestBody{}
		parts := [][]byte{[]byte("ab"), nil, []byte("cdefg"), []byte("h")}[:maxParts]
		n := copy(rb.parts[:], parts)
		rb.left = rb.parts[:n:n]
		if rb.Len() != 7 {
			t.Fatalf("Len = %d, want 7", rb.Len())
		}
		var got []byte
		buf := make([]byte, size)
		for {
			n, err := rb.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil || n == 0 {
				t.Fatalf("read %d, %v", n, err)
			}
		}
		if string(got) != "abcdefg" {
			t.Fatalf("reads of %d: %q, want abcdefg", size, got)
		}
	}
}

// A request has no Host of its own (the URL's host is sent: the server sees it), so that
// http.Client does not copy its URL on every call (it does for a request whose Host is set).
func TestPostLeavesHostToTheURL(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Host)
		w.Write([]byte("data: {}\n\n"))
	}))
	defer srv.Close()
	var host string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		host = r.Host
		return srv.Client().Transport.RoundTrip(r)
	})}
	resp, err := Endpoint{Client: hc}.Post(context.Background(), srv.URL, nil, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if host != "" || got.Load() != srv.Listener.Addr().String() {
		t.Fatalf("the request's Host is %q (want none), the server got %q (want %q)", host, got.Load(), srv.Listener.Addr().String())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A request is given the adapter's header map as it is (no map filled on every call), and the
// map is not changed; with a cookie jar, which adds to a request's headers, it gets a copy.
func TestPostSharesTheHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("the server got headers %v", r.Header)
		}
		http.SetCookie(w, &http.Cookie{Name: "c", Value: "v"})
		w.Write([]byte("data: {}\n\n"))
	}))
	defer srv.Close()
	h := http.Header{"Authorization": {"Bearer k"}, "Content-Type": {"application/json"}}
	jar, _ := cookiejar.New(nil)
	for _, withJar := range []bool{false, true} {
		var shared bool
		hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			shared = reflect.ValueOf(r.Header).UnsafePointer() == reflect.ValueOf(h).UnsafePointer()
			return srv.Client().Transport.RoundTrip(r)
		})}
		if withJar {
			hc.Jar = jar
		}
		for range 2 { // the second call carries the jar's cookie
			resp, err := Endpoint{Client: hc}.Post(context.Background(), srv.URL, h, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if shared == withJar {
			t.Errorf("with a jar %v: the request's header map is the one given: %v", withJar, shared)
		}
		if len(h) != 2 || h.Get("Cookie") != "" {
			t.Fatalf("the given headers were changed: %v", h)
		}
	}
}
