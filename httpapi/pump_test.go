package httpapi

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/stream"
)

// recordingTransport records the frames a pump writes, and which of them each flush sent.
type recordingTransport struct {
	mu      sync.Mutex
	seqs    []int64
	pending []int64   // gathered since the last flush
	flushed [][]int64 // what each flush sent
	idled   bool
}

func (t *recordingTransport) frames(fs []*stream.Frame) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range fs {
		t.seqs = append(t.seqs, f.Seq)
		t.pending = append(t.pending, f.Seq)
	}
	return false, nil
}
func (t *recordingTransport) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flushed = append(t.flushed, t.pending)
	t.pending = nil
	return nil
}
func (t *recordingTransport) heartbeat() error { return nil }
func (t *recordingTransport) failed(error)     {}
func (t *recordingTransport) revoked(error)    {}
func (t *recordingTransport) idle()            { t.mu.Lock(); t.idled = true; t.mu.Unlock() }
func (t *recordingTransport) lifetime()        {}

func (p *pump) parked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.running && !p.ended
}

// A pump started with park set gives back its goroutine when it has nothing to do, and the
// subscription starts it again: each event reaches the client; the end of its context ends it.
func TestParkedPumpWakesForEvents(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour}}
	tr := &recordingTransport{}
	ended := make(chan error, 1)
	p := &pump{s: s, r: httptest.NewRequest("GET", "/", nil), t: tr, park: time.Millisecond,
		onEnd: func(err error) { ended <- err }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p.subscribe(ctx, "s1", stream.Join)
	p.start(ctx)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within the deadline", what)
			case <-time.After(time.Millisecond):
			}
		}
	}
	waitFor("parked before any event", p.parked)
	for i := range 3 {
		r, err := m.Begin(ctx, runs.Spec{Session: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		r.Go(func(context.Context, func(parley.Event)) (string, error) { return parley.FinishStop, nil })
		<-r.Done()
		waitFor("the run's events written", func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return len(tr.seqs) == 2*(i+1)
		})
		waitFor("parked again", p.parked)
	}
	tr.mu.Lock()
	for i, seq := range tr.seqs {
		if seq != int64(i+1) {
			t.Fatalf("frames %v, want 1..6", tr.seqs)
		}
	}
	tr.mu.Unlock()
	// Parked, it still ends when its context does.
	cancel()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("a parked pump did not end with its context")
	}
	<-p.done
}

// A pump parks as soon as its first work is done, not after its park time: connections opened
// together do not each hold a goroutine (and leave its stack behind) for that long. Woken by
// events, it waits its park time again before it parks.
func TestStartedPumpParksAtOnce(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour}}
	tr := &recordingTransport{}
	p := &pump{s: s, r: httptest.NewRequest("GET", "/", nil), t: tr, park: time.Hour, onEnd: func(error) {}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer func() { cancel(); <-p.done }()
	p.subscribe(ctx, "s1", stream.Join)
	p.start(ctx)
	for !p.parked() {
		select {
		case <-ctx.Done():
			t.Fatal("a started pump with nothing to do did not park before its park time (an hour)")
		case <-time.After(time.Millisecond):
		}
	}
	tr.mu.Lock()
	if len(tr.flushed) != 1 {
		t.Errorf("flushes before parking: %v, want one (the stream's head)", tr.flushed)
	}
	tr.mu.Unlock()
	r, err := m.Begin(ctx, runs.Spec{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	r.Go(func(context.Context, func(parley.Event)) (string, error) { return parley.FinishStop, nil })
	<-r.Done()
	for {
		tr.mu.Lock()
		n := len(tr.seqs)
		tr.mu.Unlock()
		if n == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the run's events did not reach the parked pump: %d of 2", n)
		case <-time.After(time.Millisecond):
		}
	}
	if p.parked() {
		t.Error("a pump woken by events parked at once, not after its park time")
	}
}

// An SSE stream holds no write buffer between batches.
func TestSSEWriterBorrowsItsBuffer(t *testing.T) {
	rec := httptest.NewRecorder()
	sse, err := newSSEWriter(rec, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sse.event(stream.NewFrame(parley.Event{Seq: 7, Type: parley.EventChunk}, []byte(`{"seq":7}`)))
	if sse.buf == nil {
		t.Fatal("no buffer while a batch is gathered")
	}
	if err := sse.flush(); err != nil {
		t.Fatal(err)
	}
	if sse.buf != nil {
		t.Fatal("the stream kept its buffer after the flush")
	}
	if got, want := rec.Body.String(), "id: 7\nevent: chunk\ndata: {\"seq\":7}\n\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
}

// A hijacked connection gets small buffers of its own, and reads first what net/http had read
// ahead of the request.
func TestHijackedConnectionBuffers(t *testing.T) {
	got := make(chan string, 1)
	sizes := make(chan [2]int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkingWriter{ResponseWriter: w}
		c, brw, err := cw.Hijack()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		sizes <- [2]int{brw.Reader.Size(), brw.Writer.Size()}
		line, _ := brw.Reader.ReadString('\n')
		got <- line
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The request and the bytes after it in one write: net/http reads them together.
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nafter the request\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case sz := <-sizes:
		if sz[0] != hijackReadBuffer || sz[1] != hijackWriteBuffer {
			t.Fatalf("buffers of %d and %d bytes, want %d and %d", sz[0], sz[1], hijackReadBuffer, hijackWriteBuffer)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not hijacked")
	}
	if line := <-got; line != "after the request\n" {
		t.Fatalf("read %q after the request, want what the client sent", line)
	}
}

// A parked pump still ends at its idle deadline: a timer starts it for it.
func TestParkedPumpEndsWhenIdle(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: 100 * time.Millisecond}}
	tr := &recordingTransport{}
	ended := make(chan error, 1)
	p := &pump{s: s, r: httptest.NewRequest("GET", "/", nil), t: tr, park: time.Millisecond,
		onEnd: func(err error) { ended <- err }}
	p.subscribe(context.Background(), "s1", stream.Join)
	p.start(context.Background())
	select {
	case err := <-ended:
		if err != errIdle {
			t.Fatalf("ended with %v, want the idle timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a parked pump did not end at its idle deadline")
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.idled {
		t.Fatal("the client was not told the stream was idle")
	}
}

// A pump whose context ended before it started (its kick then did nothing: a WebSocket shut down
// as it opened) ends, rather than parking at once past its end. Each start is one draw of the
// loop's select between its park time and its context's end: twenty starts catch a pump that
// can park.
func TestPumpWhoseContextEndedBeforeStartEnds(t *testing.T) {
	m := runs.NewManager(runs.Options{})
	defer m.Shutdown(context.Background())
	s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour}}
	for i := range 20 {
		p := &pump{s: s, r: httptest.NewRequest("GET", "/", nil), t: &recordingTransport{}, park: time.Hour, ownKick: true, onEnd: func(error) {}}
		ctx, cancel := context.WithCancel(context.Background())
		p.subscribe(ctx, "s1", stream.Join)
		cancel()
		p.kick() // before start: does nothing
		p.start(ctx)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("start %d: the pump did not end (parked: %v)", i, p.parked())
		}
	}
}

// A batch of usage events alone is not written at once: it waits for what follows it (the
// model call's record, a store write later), and both go out in one flush. Other events are
// flushed before the pump waits, as before; a usage event that nothing follows goes out after
// usageWait.
func TestPumpHoldsUsageForWhatFollows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := runs.NewManager(runs.Options{})
		defer m.Shutdown(context.Background())
		s := &server{Deps: Deps{Runs: m, StreamIdle: time.Hour}}
		r, err := m.Begin(context.Background(), runs.Spec{Session: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		steps := make(chan struct{})
		r.Go(func(_ context.Context, emit func(parley.Event)) (string, error) {
			emit(parley.Event{Type: parley.EventChunk, Content: "x"}) // seq 2 (after start)
			<-steps
			emit(parley.Event{Type: parley.EventUsage, Usage: &parley.Usage{PromptTokens: 1}}) // 3
			<-steps
			emit(parley.Event{Type: parley.EventChunk, Content: "y"}) // 4
			<-steps
			emit(parley.Event{Type: parley.EventUsage, Usage: &parley.Usage{PromptTokens: 1}}) // 5
			<-steps
			return parley.FinishStop, nil // done: 6
		})
		tr := &recordingTransport{}
		p := &pump{s: s, r: httptest.NewRequest("GET", "/", nil), t: tr}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p.subscribe(ctx, "s1", 0)
		ended := make(chan struct{})
		go func() { defer close(ended); _ = p.run(ctx) }()
		flushes := func() [][]int64 {
			synctest.Wait()
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return slices.Clone(tr.flushed)
		}
		if f := flushes(); !slices.Equal(slices.Concat(f...), []int64{1, 2}) {
			t.Fatalf("flushed %v, want start and the chunk (1, 2)", f)
		}
		before := len(flushes())
		steps <- struct{}{} // the usage
		if f := flushes(); len(f) != before {
			t.Fatalf("the usage event alone was flushed at once: %v", f)
		}
		steps <- struct{}{} // a chunk follows: both go out together
		if f := flushes(); !slices.Equal(f[len(f)-1], []int64{3, 4}) {
			t.Fatalf("flushes %v, want the usage and the chunk that followed it in one (3, 4)", f)
		}
		steps <- struct{}{} // another usage, which nothing follows for longer than usageWait
		start := time.Now()
		time.Sleep(usageWait / 2)
		if f := flushes(); slices.Contains(slices.Concat(f...), 5) {
			t.Fatalf("the usage event went out before usageWait: %v", f)
		}
		time.Sleep(usageWait)
		f := flushes()
		if !slices.Equal(f[len(f)-1], []int64{5}) {
			t.Fatalf("flushes %v, want the usage event alone after usageWait", f)
		}
		if d := time.Since(start); d < usageWait {
			t.Fatalf("waited %v", d)
		}
		steps <- struct{}{}
		<-r.Done()
		if f := flushes(); !slices.Equal(slices.Concat(f...), []int64{1, 2, 3, 4, 5, 6}) {
			t.Fatalf("flushed %v, want 1..6 in order", f)
		}
		cancel()
		<-ended
	})
}
