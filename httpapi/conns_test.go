package httpapi_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// Issue 18 §5: one address holds at most Max connections; the next one is answered 503 with
// Retry-After without being read, and a slot frees up when a connection ends.
func TestConnectionsPerAddress(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mgr := runs.NewManager(runs.Options{Events: st})
	srv := httptest.NewUnstartedServer(httpapi.NewServer(httpapi.Deps{Store: st, Runs: mgr, BodyTimeout: time.Minute}))
	srv.Listener = httpapi.LimitConnsPerAddr(srv.Listener, 2, nil)
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	// Two slow clients: each sends its headers and one byte of a body.
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		held = append(held, c)
	}
	// The third connection from the same address is refused at once.
	status := func() (string, http.Header) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err.Error(), nil
		}
		resp.Body.Close()
		return resp.Status, resp.Header
	}
	// Until the server has accepted both slow connections, a probe may still get in.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, hdr := status()
		if strings.HasPrefix(st, "503") {
			if hdr.Get("Retry-After") == "" {
				t.Fatalf("503 without Retry-After: %v", hdr)
			}
			break
		}
		if !strings.HasPrefix(st, "200") || time.Now().After(deadline) {
			t.Fatalf("third connection: %s, want 503", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// One slow client leaves: its slot frees up once the server has closed its side.
	held[0].Close()
	for {
		st, _ := status()
		if strings.HasPrefix(st, "200") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a client left: %s, want 200", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
