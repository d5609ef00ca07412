package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The serve flags of issue 18 reach the server: --max-conns-per-addr bounds one address's
// connections at accept, and --body-timeout ends a body that does not arrive.
func TestServeBoundsConnectionsAndBodies(t *testing.T) {
	// Two servers: a connection the body check ends is given back only once the server has seen
	// it closed, which on one server would race with the connections counted next.
	get := func(addr, req string) (string, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + resp.Header.Get("Retry-After") + " " + string(b), nil
	}
	// A body that never arrives is a 400 once the body timeout passes.
	slow := strings.TrimPrefix(startInProcess(t, nil, "--body-timeout", "500ms"), "http://")
	got, err := get(slow, "POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{")
	if err != nil || !strings.HasPrefix(got, "400") || !strings.Contains(got, "not received within 500ms") {
		t.Fatalf("slow body: %q %v", got, err)
	}
	// Two connections that send nothing hold the address's two slots; a third is refused.
	addr := strings.TrimPrefix(startInProcess(t, nil, "--max-conns-per-addr", "2"), "http://")
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := get(addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if err == nil && strings.HasPrefix(got, "503") {
			if !strings.HasPrefix(got, "503 Service Unavailable 5 ") {
				t.Fatalf("refused connection: %q, want 503 with Retry-After: 5", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("third connection: %q %v, want 503", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
