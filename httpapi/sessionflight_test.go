package httpapi_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/httpapi"
)

// heldStore holds each read of one session until released, and counts them.
type heldStore struct {
	parley.Store
	id       atomic.Pointer[string]
	reads    atomic.Int32
	progress chan struct{} // a value for each read of the session held
	release  chan struct{}
}

func (h *heldStore) GetSession(ctx context.Context, id string) (*parley.Session, error) {
	if p := h.id.Load(); p != nil && *p == id {
		h.reads.Add(1)
		h.progress <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Store.GetSession(ctx, id)
}

// Clients that connect to one session's stream at once share one read of the session: a burst of
// them does not take one of the store's pooled connections each (issue 25, memory per idle SSE
// stream: the SQLite pool opened to its bound for them).
func TestSessionStreamConnectsShareTheirLookup(t *testing.T) {
	const clients = 8
	hs := &heldStore{progress: make(chan struct{}, clients), release: make(chan struct{})}
	e := newEnv(t, func(d *httpapi.Deps) { hs.Store = d.Store; d.Store = hs })
	code, out := e.do(t, "POST", "/api/v1/sessions", `{"title":"busy"}`)
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("creating the session: %d %v", code, out)
	}
	id := out["id"].(string)
	hs.id.Store(&id)
	defer httpapi.SetOnSessionJoin(func() { hs.progress <- struct{}{} })()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	status := make(chan int, clients)
	for range clients {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/sessions/"+id+"/stream", nil)
		e.authorize(t, req)
		wg.Go(func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				status <- 0
				return
			}
			status <- resp.StatusCode
			<-ctx.Done()
			resp.Body.Close()
		})
	}
	// Every client has either read the session or joined a read that is held.
	for i := range clients {
		select {
		case <-hs.progress:
		case <-time.After(10 * time.Second):
			t.Fatalf("after %d of %d clients, no other read or wait of the session", i, clients)
		}
	}
	close(hs.release)
	for range clients {
		if s := <-status; s != http.StatusOK {
			t.Errorf("a stream's status: %d, want 200", s)
		}
	}
	if n := hs.reads.Load(); n != 1 {
		t.Errorf("%d clients connecting at once read the session %d times, want once", clients, n)
	}
	cancel()
	wg.Wait()
}
