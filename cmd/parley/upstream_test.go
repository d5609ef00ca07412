package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
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
