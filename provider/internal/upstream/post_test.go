package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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
