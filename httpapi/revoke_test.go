package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/httpapi"
)

// keyID is the id of the API key the env made for user.
func (e *env) keyID(t *testing.T, user string) string {
	t.Helper()
	e.key(t, user)
	keys, err := e.store.ListAPIKeys(context.Background(), user, 10)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys of %s: %v %v", user, keys, err)
	}
	return keys[0].ID
}

// wantRevokedClose reads frames until the connection ends and checks it ended with an
// unauthorized error frame and a 1008 close.
func wantRevokedClose(t *testing.T, c *wsClient, id string) {
	t.Helper()
	sawError := false
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		f, err := c.tryRead(time.Until(deadline))
		if errors.Is(err, errNoFrame) {
			break
		}
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "unauthorized: invalid, revoked or expired API key" {
				t.Fatalf("closed with %v, want 1008 and the reason", err)
			}
			if !sawError {
				t.Fatal("closed without an error frame")
			}
			return
		}
		if f.Type == "error" && f.field(t, "code") == "unauthorized" && (id == "" || f.ID == id) {
			sawError = true
		}
	}
	t.Fatal("the WebSocket is still open 15s after its key was revoked")
}

// Issue 18 §3: revoking a key ends the streams open with it, on every instance: a WebSocket and an
// SSE stream on one server end within seconds when the key is revoked through another server that
// shares the database (whose revocation this server's cache does not see until it expires).
func TestRevocationEndsOpenStreams(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) {
		d.Auth = &auth.Authenticator{Store: d.Store, CacheTTL: 100 * time.Millisecond}
		d.AuthRecheck = 50 * time.Millisecond
	})
	sid := e.newSession(t, "alice")
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	resp, _ := e.sse(t, "alice", "/api/v1/sessions/"+sid+"/stream")
	defer resp.Body.Close()
	sseEnded := make(chan []event, 1)
	go func() { evs, _ := readEvents(t, resp.Body, nil); sseEnded <- evs }()
	// Bob's stream is not touched by the revocation of alice's key.
	bobSession := e.newSession(t, "bob")
	bob := e.ws(t, "bob", "?convId="+bobSession)
	bob.expect("status", "")

	other := e.restart(t) // a second instance on the same database
	var once sync.Once
	revoke := func() {
		once.Do(func() {
			resp, _ := e.rawAt(t, other, "DELETE", "/api/v1/admin/keys/"+e.keyID(t, "alice"), "", "Authorization", "Bearer "+e.key(t, "admin"))
			if resp.StatusCode != 200 {
				t.Fatalf("revoke: %d", resp.StatusCode)
			}
		})
	}
	revoke()

	wantRevokedClose(t, c, "")
	select {
	case evs := <-sseEnded:
		if len(evs) == 0 || evs[len(evs)-1].name != "error" || evs[len(evs)-1].data.Error == nil || evs[len(evs)-1].data.Error.Code != parley.ECUnauth || evs[len(evs)-1].id != "" {
			t.Fatalf("SSE stream ended with %+v, want an unauthorized error event without an id", evs)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the SSE stream is still open 15s after its key was revoked")
	}
	// A new connection with the revoked key is refused; bob's is still open and answers.
	if _, r, err := e.dialWS(t, "alice", "?convId="+sid); err == nil || r == nil || r.StatusCode != 401 {
		t.Fatalf("dial with a revoked key: %v", err)
	}
	bob.send(`{"type":"ping","id":"p"}`)
	bob.expect("pong", "p")
}

// Issue 18 §3: a user_message on a WebSocket whose key was revoked (seen once the authenticator's
// cache expires, as on an instance that did not revoke it) starts no run.
func TestRevokedWebSocketStartsNoRun(t *testing.T) {
	for _, frame := range []string{
		`{"type":"user_message","id":"m1","data":{"text":"hello"}}`,
		`{"type":"control","id":"m1","data":{"action":"retry"}}`,
	} {
		t.Run(strings.SplitN(frame, `"`, 5)[3], func(t *testing.T) {
			var mu sync.Mutex
			now := time.Now()
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			e := newEnv(t, func(d *httpapi.Deps) {
				d.Auth = &auth.Authenticator{Store: d.Store, CacheTTL: time.Minute, Now: clock}
				d.AuthRecheck = time.Hour // only the frame checks
			})
			sid := e.newSession(t, "alice")
			c := e.ws(t, "alice", "?convId="+sid)
			c.expect("status", "")
			// Revoked in the database, as another instance does; this server's cache still holds the key.
			if _, err := e.store.RevokeAPIKey(context.Background(), e.keyID(t, "alice"), time.Now()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			now = now.Add(2 * time.Minute) // the cached lookup expires
			mu.Unlock()
			c.send(frame)
			wantRevokedClose(t, c, "m1")
			msgs, err := e.store.ListMessages(context.Background(), sid, 0, 10)
			if err != nil || len(msgs) != 0 || e.runs.ActiveCount() != 0 {
				t.Fatalf("a run started on a revoked key: messages %v, active runs %d", msgs, e.runs.ActiveCount())
			}
		})
	}
}
