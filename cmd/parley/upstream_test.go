package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/parleyhq/parley/internal/onewrite"
)

// TestUpstreamTransportKeepsConnections: calls to a provider, many at once, find the
// connections of the calls before them idle instead of dialing anew (net/http's default keeps
// 2 per host, so the second round would dial 14 of its 16).
func TestUpstreamTransportKeepsConnections(t *testing.T) {
	const inFlight = 16
	var dialed atomic.Int64
	arrived := make(chan struct{}, inFlight)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Write([]byte("data: [DONE]\n\n"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	hc := &http.Client{Transport: upstreamTransport()}
	defer hc.CloseIdleConnections()

	round := func() {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				resp, err := hc.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				var b [64]byte
				for {
					if _, err := resp.Body.Read(b[:]); err != nil {
						break
					}
				}
				resp.Body.Close()
			})
		}
		// All of them in flight at once, so that each needs a connection of its own.
		for range inFlight {
			<-arrived
		}
		for range inFlight {
			release <- struct{}{}
		}
		wg.Wait()
	}
	round()
	round()
	round()
	if n := dialed.Load(); n != inFlight {
		t.Errorf("%d connections for 3 rounds of %d calls at once, want %d (one per call in flight)", n, inFlight, inFlight)
	}
}

// TestUpstreamConnectionWriteBuffer: a connection to a provider holds its write buffer for as
// long as it lives, a streamed answer's whole length included; the buffer is 1 KiB, not
// net/http's 4 KiB (issue 25: memory per active stream), and a request larger than it, in its
// headers and its body, still arrives whole.
func TestUpstreamConnectionWriteBuffer(t *testing.T) {
	const calls = 20
	body := strings.Repeat("b", 100<<10)
	header := strings.Repeat("h", 3<<10)
	arrived := make(chan struct{}, calls)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if string(got) != body || r.Header.Get("X-Long") != header {
			t.Errorf("the request arrived with %d bytes of body and %d of the long header", len(got), len(r.Header.Get("X-Long")))
		}
		w.Write([]byte("data: {}\n\n"))
		w.(http.Flusher).Flush()
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	hc := &http.Client{Transport: upstreamTransport()}
	defer hc.CloseIdleConnections()

	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = rate }()
	for range calls {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		req.Header.Set("X-Long", header)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		<-arrived
	}
	// The write buffers of the connections now streaming answers.
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for k, _ := runtime.MemProfile(nil, true); ; k += 100 {
		recs = make([]runtime.MemProfileRecord, k)
		if n, ok := runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	var held int64
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		var writer, dial bool
		for {
			f, more := frames.Next()
			writer = writer || f.Function == "bufio.NewWriterSize"
			dial = dial || f.Function == "net/http.(*Transport).dialConn"
			if !more {
				break
			}
		}
		if writer && dial {
			held += r.InUseBytes()
		}
	}
	per := held / calls
	t.Logf("%d bytes of write buffer per connection streaming an answer", per)
	// The buffer and bufio.Writer's own 64 bytes.
	if per == 0 || per > 1<<10+64 {
		t.Fatalf("a connection streaming an answer holds %d bytes of write buffer, want 1 KiB (and bufio.Writer's 64 bytes) at most, and some: the profile must see it", per)
	}
}

// TestUpstreamTransportWritesARequestOnce: the connections to a provider are onewrite's, so that
// a model call's head and body go in one write (see internal/onewrite's tests), and a call
// through them arrives whole.
func TestUpstreamTransportWritesARequestOnce(t *testing.T) {
	body := strings.Repeat("b", 3500)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got, _ := io.ReadAll(r.Body); string(got) != body {
			t.Errorf("the request arrived with %d bytes of body", len(got))
		}
	}))
	defer srv.Close()
	tr := upstreamTransport()
	var conns []net.Conn
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		conns = append(conns, c)
		return c, err
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(srv.URL, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(conns) != 1 {
		t.Fatalf("%d connections dialed, want 1", len(conns))
	}
	if _, ok := conns[0].(*onewrite.Conn); !ok {
		t.Fatalf("the connection is a %T, want a *onewrite.Conn", conns[0])
	}
}
