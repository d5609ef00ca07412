package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// TestReadSSE: events are split on blank lines with their id, type and data; comments are
// skipped; a body that ends without the callback stopping is an unexpected end.
func TestReadSSE(t *testing.T) {
	body := "id: 1\nevent: start\ndata: {\"seq\":1}\n\n: ping\n\nid: 2\nevent: chunk\ndata: {\"content\":\"a\"}\n\nid: 3\nevent: done\ndata: {}\n\n"
	var got []event
	err := readSSE(strings.NewReader(body), func(ev event) bool { got = append(got, ev); return ev.typ != "done" })
	if err != nil || len(got) != 3 {
		t.Fatalf("%d events, %v", len(got), err)
	}
	if got[1].seq != 2 || got[1].typ != "chunk" || got[1].data != `{"content":"a"}` {
		t.Errorf("second event %+v", got[1])
	}
	if got[0].kept().sum == got[1].kept().sum || got[1].kept().data != "" {
		t.Error("kept events: different data must hash differently, and the data is dropped")
	}
	err = readSSE(strings.NewReader("id: 1\nevent: start\ndata: {}\n\n"), func(event) bool { return true })
	if err != io.ErrUnexpectedEOF {
		t.Errorf("a stream cut before done: %v", err)
	}
}

func TestSummarize(t *testing.T) {
	rs := []streamResult{{done: true, chunks: 5}, {done: true, chunks: 4}, {done: false, chunks: 5}, {err: io.EOF}}
	failed, short, first := summarize(rs, 5)
	if failed != 2 || short != 1 || first == nil {
		t.Errorf("failed %d short %d first %v; want 2, 1, an error", failed, short, first)
	}
	if n := liveEvents([]streamResult{{done: true, events: make([]event, 3)}, {err: io.EOF, events: make([]event, 7)}}); n != 3 {
		t.Errorf("liveEvents counted %d, want only the 3 of the chat that ended", n)
	}
}

// goMem reads the go_memstats_ gauges of a metrics page and reads the page to its end, so that
// its connection serves the next reading (the benchmark polls four times a second).
func TestGoMemReusesItsConnection(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# HELP x\ngo_memstats_heap_inuse_bytes 1.5e+06\ngo_memstats_stack_inuse_bytes 65536\ngo_goroutines 7\n")
		io.WriteString(w, strings.Repeat("# padding after the gauges\n", 2000))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	for range 3 {
		m := goMem(hc, srv.URL)
		if m["go_memstats_heap_inuse_bytes"] != 1_500_000 || m["go_memstats_stack_inuse_bytes"] != 65536 || len(m) != 2 {
			t.Fatalf("read %v", m)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("3 readings opened %d connections, want 1", n)
	}
}

// The breakdown of the resident memory: the file-backed part is read from the process's status
// (a running Go test has its binary's pages resident), and what is outside Go's accounting is
// resident less file-backed less what the runtime holds.
func TestResidentBreakdown(t *testing.T) {
	pid := os.Getpid()
	if f := fileRSS(pid); f <= 0 {
		t.Fatalf("file-backed resident memory of this test: %d bytes, want > 0", f)
	}
	s := sample{rss: 100 << 20, file: 30 << 20, goSys: 60 << 20}
	if got := s.anonOutside(); got != 10<<20 {
		t.Fatalf("anonOutside = %d, want %d", got, 10<<20)
	}
}
