package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// TestModelCallsReuseConnections streams rounds of concurrent model calls through the providers
// newRouter builds and counts the connections the model accepted: the calls of later rounds go
// over the connections the first one opened. With Go's default transport (2 idle connections
// per host) each round dialled all but two of its calls anew.
func TestModelCallsReuseConnections(t *testing.T) {
	const (
		streams = 16
		rounds  = 4
	)
	var (
		accepted atomic.Int64
		mu       sync.Mutex
		arrived  int
		all      = make(chan struct{}) // every call of the round is in flight
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// Hold each call until the round's calls are all in flight, so that they need a
		// connection each.
		mu.Lock()
		arrived++
		round := all
		if arrived%streams == 0 {
			close(all)
			all = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-round:
		case <-time.After(30 * time.Second):
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
			"data: [DONE]\n\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	c := &config{Providers: []providerConfig{{Name: "oa", Kind: "openai", BaseURL: srv.URL + "/v1", APIKey: "k", Models: []string{"m"}}}}
	r, err := newRouter(c, func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	prov, model, err := r.Resolve("oa/m")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range rounds {
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				st, err := prov.Stream(ctx, &parley.ChatRequest{Model: model, Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hello")}}})
				if err != nil {
					t.Error(err)
					return
				}
				defer st.Close()
				for {
					if _, err := st.Next(); err != nil {
						if err != io.EOF {
							t.Error(err)
						}
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// The first round opens one connection per call; later rounds reuse them (a few may still
	// be on their way back to the pool as the next round starts). The default transport would
	// have opened streams + (rounds-1)*(streams-2) = 58.
	if n := accepted.Load(); n > 2*streams {
		t.Fatalf("the model accepted %d connections for %d rounds of %d concurrent calls: they were not reused", n, rounds, streams)
	}
	t.Logf("%d connections for %d calls", accepted.Load(), rounds*streams)
}
