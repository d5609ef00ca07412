package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/stream"
)

// endedRun runs a run on the session to its end, emitting n chunks: its events (start, the
// chunks, done) are in the session's stream at once.
func endedRun(t testing.TB, m *runs.Manager, session string, n int) {
	t.Helper()
	r, err := m.Begin(context.Background(), runs.Spec{Session: session})
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(_ context.Context, emit func(parley.Event)) (string, error) {
		for range n {
			emit(parley.Event{Type: parley.EventChunk, Content: "x"})
		}
		return parley.FinishStop, nil
	})
	<-r.Done()
}

// The pump sends the frames ready together in one flush, and flushes before it waits: events
// that were in the stream when it started go out at once, a later one in a flush of its own.
func TestPumpFlushesFramesReadyTogetherOnce(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour}}
	endedRun(t, m, "s1", 3) // seqs 1..5
	tr := &recordingTransport{}
	p := &pump{s: s, r: httptest.NewRequest("GET", "/", nil), t: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p.subscribe(ctx, "s1", 0)
	ended := make(chan struct{})
	go func() { defer close(ended); _ = p.run(ctx) }()
	// flushed waits until the flushes have sent n frames, and returns them.
	flushed := func(n int) [][]int64 {
		t.Helper()
		for {
			tr.mu.Lock()
			f, sent := slices.Clone(tr.flushed), 0
			tr.mu.Unlock()
			for _, b := range f {
				sent += len(b)
			}
			if sent >= n {
				return f
			}
			select {
			case <-ctx.Done():
				t.Fatalf("flushes sent %v, want %d frames", f, n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	if f := flushed(5); !slices.Equal(f[0], []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("the first flush sent %v, want the 5 events that were ready: 1..5", f[0])
	}
	endedRun(t, m, "s1", 0) // seqs 6, 7
	if f := flushed(7); !slices.Equal(slices.Concat(f[1:]...), []int64{6, 7}) {
		t.Fatalf("the later flushes sent %v, want 6, 7", f[1:])
	}
	cancel()
	<-ended
}

// An SSE stream of a run whose events are all there when it starts is written in one write: the
// response's head, the events and the end of the chunked body. (Before, the head, each batch
// and the end were a write each.)
func TestSSEStreamOfReadyEventsIsOneWrite(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour, StreamLifetime: time.Hour, WriteTimeout: time.Minute,
		Log: slog.New(slog.DiscardHandler)}}
	endedRun(t, m, "s1", 3)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.streamSession(w, r, "s1", 0, true)
	}))
	conns := make(chan *writeCounter, 1)
	srv.Listener = countingListener{Listener: srv.Listener, conns: conns}
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(body), "\nevent: "); n != 5 || !strings.HasSuffix(string(body), "event: done\ndata: "+
		`{"seq":5,"type":"done","run_id":"`+lastRunID(string(body))+`","session_id":"s1","finish_reason":"stop"}`+"\n\n") {
		t.Fatalf("%d events, want 5 ending with done:\n%s", n, body)
	}
	if n, _ := (<-conns).count(); n != 1 {
		t.Fatalf("%d writes, want 1", n)
	}
}

// lastRunID is the run_id of the last event in an SSE body.
func lastRunID(body string) string {
	i := strings.LastIndex(body, `"run_id":"`)
	if i < 0 {
		return ""
	}
	rest := body[i+len(`"run_id":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

// A detached stream's last batch and the end of its chunked body go out together (one writev on
// a TCP connection): its last chunk, then the empty one.
func TestSSEWriterEndsDetachedStream(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	sse := &sseWriter{conn: server, timeout: time.Minute}
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(client); got <- string(b) }()
	sse.event(stream.NewFrame(parley.Event{Seq: 3, Type: parley.EventDone}, []byte(`{"seq":3}`)))
	sse.end()
	if sse.err != nil {
		t.Fatal(sse.err)
	}
	server.Close()
	if want, b := "23\r\nid: 3\nevent: done\ndata: {\"seq\":3}\n\n\r\n0\r\n\r\n", <-got; b != want {
		t.Fatalf("wrote %q, want %q", b, want)
	}
}

// BenchmarkSSEReadyEvents streams, over loopback HTTP, a session whose run (start, 3 chunks,
// done) has ended: the events are ready together when the stream starts. It reports the writes
// the server made per stream.
func BenchmarkSSEReadyEvents(b *testing.B) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour, StreamLifetime: time.Hour, WriteTimeout: time.Minute,
		Log: slog.New(slog.DiscardHandler)}}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = "s" + strconv.Itoa(i)
		endedRun(b, m, ids[i], 3)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.streamSession(w, r, r.URL.Query().Get("s"), 0, true)
	}))
	conns := make(chan *writeCounter, 1)
	srv.Listener = countingListener{Listener: srv.Listener, conns: conns}
	srv.Start()
	defer srv.Close()
	client := srv.Client()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		resp, err := client.Get(srv.URL + "/?s=" + ids[i])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	b.StopTimer()
	n, _ := (<-conns).count()
	b.ReportMetric(float64(n)/float64(b.N), "writes/op")
}

// A stream that outlives StreamLifetime ends with the lifetime comment, its events sent before,
// whether or not it is busy (fake time: the test does not wait).
func TestSSEStreamEndsAtItsLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := runs.NewManager(runs.Options{})
		defer m.Shutdown(context.Background())
		s := &server{Deps: Deps{Runs: m, StreamIdle: 2 * time.Hour, StreamLifetime: time.Hour, Heartbeat: 25 * time.Minute,
			WriteTimeout: time.Minute, Log: slog.New(slog.DiscardHandler)}}
		endedRun(t, m, "s1", 2)
		rec := httptest.NewRecorder()
		start := time.Now()
		s.streamSession(rec, httptest.NewRequest(http.MethodGet, "/", nil), "s1", 0, false)
		if d := time.Since(start); d != time.Hour {
			t.Errorf("the stream ended after %v, want its lifetime (1h)", d)
		}
		body := rec.Body.String()
		if n := strings.Count(body, "\nevent: "); n != 4 || strings.Count(body, ": ping\n") != 2 ||
			!strings.HasSuffix(body, ": lifetime reached: reconnect with Last-Event-ID to go on\n\n") {
			t.Fatalf("%d events, then:\n%s", n, body)
		}
	})
}
