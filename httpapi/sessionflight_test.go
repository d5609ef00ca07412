package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
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
	t.Run("sse", func(t *testing.T) {
		connectsShareTheirLookup(t, func(e *env, ctx context.Context, id, key string) (int, error) {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/sessions/"+id+"/stream", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err
			}
			go func() { <-ctx.Done(); resp.Body.Close() }()
			return resp.StatusCode, nil
		})
	})
	// The same for a WebSocket opened on the session (convId).
	t.Run("websocket", func(t *testing.T) {
		connectsShareTheirLookup(t, func(e *env, ctx context.Context, id, key string) (int, error) {
			dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			c, resp, err := websocket.Dial(dctx, strings.Replace(e.url, "http", "ws", 1)+"/api/ws?convId="+id, &websocket.DialOptions{
				HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}, Subprotocols: []string{"parley.v1"},
			})
			if err != nil {
				return 0, err
			}
			go func() { <-ctx.Done(); c.CloseNow() }()
			return resp.StatusCode, nil
		})
	})
}

// connectsShareTheirLookup connects clients to one session at once with connect, the store's
// read of the session held until all have read it or joined a read, and checks that it was read
// once and every connect succeeded (200, or 101 for a WebSocket).
func connectsShareTheirLookup(t *testing.T, connect func(e *env, ctx context.Context, id, key string) (int, error)) {
	const clients = 8
	hs := &heldStore{progress: make(chan struct{}, clients), release: make(chan struct{})}
	e := newEnv(t, func(d *httpapi.Deps) { hs.Store = d.Store; d.Store = hs })
	code, out := e.do(t, "POST", "/api/v1/sessions", `{"title":"busy"}`)
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("creating the session: %d %v", code, out)
	}
	id := out["id"].(string)
	key := e.key(t, "alice")
	hs.id.Store(&id)
	defer httpapi.SetOnSessionJoin(func() { hs.progress <- struct{}{} })()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	status := make(chan int, clients)
	for range clients {
		go func() {
			code, err := connect(e, ctx, id, key)
			if err != nil {
				t.Error(err)
			}
			status <- code
		}()
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
		if s := <-status; s != http.StatusOK && s != http.StatusSwitchingProtocols {
			t.Errorf("a connect's status: %d", s)
		}
	}
	if n := hs.reads.Load(); n != 1 {
		t.Errorf("%d clients connecting at once read the session %d times, want once", clients, n)
	}
}
