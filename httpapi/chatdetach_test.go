package httpapi_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/httpapi"
)

// startChatStream sends a streamed chat to base on c and reads its response's head (200).
func startChatStream(t *testing.T, base string, c net.Conn, br *bufio.Reader, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/v1/chat/stream", strings.NewReader(`{"message":"hi"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	return resp
}

// postChatStream sends a streamed chat on c and reads its response: the events, whole (the
// chunked body to its end).
func postChatStream(t *testing.T, e *env, c net.Conn, br *bufio.Reader, key string) []event {
	t.Helper()
	resp := startChatStream(t, e.url, c, br, key)
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.Close {
		t.Fatalf("transfer encoding %v, close %v; want chunked, kept alive", resp.TransferEncoding, resp.Close)
	}
	evs, _ := readEvents(t, resp.Body, nil)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil { // the chunked body's end
		t.Fatalf("the response did not end whole: %v", err)
	}
	resp.Body.Close()
	return evs
}

// A streamed chat still streaming after the delay is taken over from net/http: its events, as
// before, in a chunked response that ends whole; then the connection closes (the client's next
// request goes on another), where a chat that ends before the delay keeps its connection. On
// main a streamed chat always kept its connection: the read after the response waited for the
// read deadline instead of the connection's end.
func TestStreamedChatDetached(t *testing.T) {
	e := newEnv(t, nil)
	key := e.key(t, "alice")
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}
	check := func(evs []event) {
		t.Helper()
		var names []string
		for _, ev := range evs {
			names = append(names, ev.name)
		}
		if got := strings.Join(names, " "); got != "start record chunk chunk record usage done" {
			t.Fatalf("events %q", got)
		}
	}

	undo := httpapi.SetChatDetachAfter(time.Hour) // a short chat: the connection is kept
	c, br := open()
	check(postChatStream(t, e, c, br, key))
	check(postChatStream(t, e, c, br, key))
	undo()

	defer httpapi.SetChatDetachAfter(0)() // taken over at its first write
	c, br = open()
	check(postChatStream(t, e, c, br, key))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after a detached chat's response: read %d, %v; want the connection's end", n, err)
	}
}
