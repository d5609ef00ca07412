package httpapi

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"unsafe"
)

// A stream that outlives its handler keeps the method and protocol of its request, not the
// request line they are read from (net/http's strings point into it).
func TestDetachedRequestKeepsNoRequestLine(t *testing.T) {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET /api/v1/sessions/s1/stream?after=12 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	d := detachedRequest(req, context.Background())
	if d.Method != "GET" || d.Proto != "HTTP/1.1" || d.ProtoMajor != 1 || d.ProtoMinor != 1 || d.Header.Get("Authorization") != "Bearer k" {
		t.Fatalf("detached request: %s %s %d.%d %v", d.Method, d.Proto, d.ProtoMajor, d.ProtoMinor, d.Header)
	}
	if unsafe.StringData(d.Method) == unsafe.StringData(req.Method) || unsafe.StringData(d.Proto) == unsafe.StringData(req.Proto) {
		t.Error("the detached request's method or protocol is the request's string, which keeps its request line")
	}
}
