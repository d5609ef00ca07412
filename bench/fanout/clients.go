package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// runData is what one run's subscribers and the fake model record, on the benchmark's clock
// (nanoseconds since the start).
type runData struct {
	n      int
	tokens int
	subs   int
	flush  []int64 // [token]: when the model flushed it (0: not yet)
	recv   []int64 // [subscriber*tokens+token]: when the subscriber read it (0: not yet)
	done   atomic.Int64
	dups   atomic.Int64 // a token read twice by one subscriber (must stay 0)
	stray  atomic.Int64 // a chunk of another run, or not ours (must stay 0)
}

func newRunData(n, tokens, subs int) *runData {
	return &runData{n: n, tokens: tokens, subs: subs, flush: make([]int64, tokens), recv: make([]int64, subs*tokens)}
}

// subscriber is one client of the session: a WebSocket or an SSE stream.
type subscriber struct {
	idx  int
	kind string // "ws" or "sse"
	run  *runData
	stop func() // closes the connection

	// For diagnosing a subscriber that did not see a run end.
	frames, dones atomic.Int64
	lastAt        atomic.Int64
	lastSeq       atomic.Int64 // the seq of the last event read
}

// subscribers holds every client and what they saw.
type subscribers struct {
	now func() int64
	// current is the run the benchmark started last: a subscriber that sees a run's start event
	// attributes its done event to it.
	current *atomic.Pointer[runData]
	closing atomic.Bool // the benchmark is closing the connections: their ends are not drops

	mu       sync.Mutex
	all      []*subscriber
	dropped  int
	dropErrs []string
	wg       sync.WaitGroup
}

func (s *subscribers) add(sub *subscriber) {
	s.mu.Lock()
	s.all = append(s.all, sub)
	s.mu.Unlock()
}

// lost records a connection that ended while the benchmark still needed it.
func (s *subscribers) lost(sub *subscriber, err error) {
	if s.closing.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped++
	if len(s.dropErrs) < 5 {
		s.dropErrs = append(s.dropErrs, fmt.Sprintf("%s #%d: %v", sub.kind, sub.idx, err))
	}
}

func (s *subscribers) droppedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// dropSummary describes the first connections that were dropped.
func (s *subscribers) dropSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.dropErrs, "; ")
}

// closeAll closes every connection and waits for their readers.
func (s *subscribers) closeAll() {
	s.closing.Store(true)
	s.mu.Lock()
	all := s.all
	s.mu.Unlock()
	for _, sub := range all {
		sub.stop()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// onStart, onChunk and onDone are called from the subscriber's own reader goroutine.
func (s *subscribers) onStart(sub *subscriber) { sub.run = s.current.Load() }

// frame notes that sub read something at at.
func (s *subscribers) frame(sub *subscriber, at int64) {
	sub.frames.Add(1)
	sub.lastAt.Store(at)
}

// stuck describes up to max subscribers that have not seen run rd's done event, and returns the
// last seq the first of them read.
func (s *subscribers) stuck(rd *runData, max int) (string, int64) {
	s.mu.Lock()
	all := s.all
	s.mu.Unlock()
	var out []string
	first := int64(-1)
	for _, sub := range all {
		if sub.dones.Load() >= int64(rd.n) {
			continue
		}
		if first < 0 {
			first = sub.lastSeq.Load()
		}
		got := 0
		for i := 0; i < rd.tokens; i++ {
			if atomic.LoadInt64(&rd.recv[sub.idx*rd.tokens+i]) != 0 {
				got++
			}
		}
		out = append(out, fmt.Sprintf("%s #%d: %d frames, %d of %d tokens, last read %.1f s ago, done events %d",
			sub.kind, sub.idx, sub.frames.Load(), got, rd.tokens, float64(s.now()-sub.lastAt.Load())/1e9, sub.dones.Load())+
			fmt.Sprintf(", last seq %d", sub.lastSeq.Load()))
		if len(out) == max {
			break
		}
	}
	return strings.Join(out, "\n"), first
}

func (s *subscribers) onChunk(sub *subscriber, content []byte, at int64) {
	n, tok, ok := parseToken(content)
	run := sub.run
	if !ok || run == nil || n != run.n || tok >= run.tokens {
		if run != nil {
			run.stray.Add(1)
		}
		return
	}
	p := &run.recv[sub.idx*run.tokens+tok]
	if atomic.LoadInt64(p) != 0 {
		run.dups.Add(1)
		return
	}
	atomic.StoreInt64(p, at)
}

func (s *subscribers) onDone(sub *subscriber) {
	sub.dones.Add(1)
	if sub.run != nil {
		sub.run.done.Add(1)
	}
}

var (
	contentKey = []byte(`"content":"`)
	seqKey     = []byte(`"seq":`)
	wsChunk    = []byte(`{"type":"llm_chunk"`)
	wsStatus   = []byte(`{"type":"status"`)
	evStart    = []byte(`"type":"start"`)
	evDone     = []byte(`"type":"done"`)
)

// dialWS opens a WebSocket on the session and waits for its "connected" status frame.
func (s *subscribers) dialWS(ctx context.Context, hc *http.Client, base, session string, idx int, timeout time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := "ws" + strings.TrimPrefix(base, "http") + "/api/ws?convId=" + session
	c, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"parley.v1"}})
	if err != nil {
		if resp != nil && resp.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			return fmt.Errorf("%w: HTTP %d %s", err, resp.StatusCode, bytes.TrimSpace(b))
		}
		return err
	}
	c.SetReadLimit(4 << 20)
	_, first, err := c.Read(dctx)
	if err != nil {
		c.CloseNow()
		return fmt.Errorf("first frame: %w", err)
	}
	if !bytes.HasPrefix(first, wsStatus) || !bytes.Contains(first, []byte(`"state":"connected"`)) {
		c.CloseNow()
		return fmt.Errorf("first frame is not the connected status: %.200s", first)
	}
	sub := &subscriber{idx: idx, kind: "ws", stop: func() { c.CloseNow() }}
	s.add(sub)
	s.wg.Add(1)
	go s.readWS(sub, c)
	return nil
}

// readWS reads the WebSocket's frames until it ends. Reads have no context (and so no per-read
// timer): the connection ends when the benchmark closes it, or the server does.
func (s *subscribers) readWS(sub *subscriber, c *websocket.Conn) {
	defer s.wg.Done()
	var buf bytes.Buffer
	for {
		_, r, err := c.Reader(context.Background())
		if err != nil {
			s.lost(sub, err)
			return
		}
		at := s.now()
		s.frame(sub, at)
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			s.lost(sub, err)
			return
		}
		b := buf.Bytes()
		if i := bytes.Index(b, seqKey); i >= 0 && i < 40 {
			if n, _, ok := digits(b[i+len(seqKey):]); ok {
				sub.lastSeq.Store(int64(n))
			}
		}
		switch {
		case bytes.HasPrefix(b, wsChunk):
			if i := bytes.Index(b, contentKey); i >= 0 {
				s.onChunk(sub, b[i+len(contentKey):], at)
			}
		case bytes.HasPrefix(b, wsStatus):
			if bytes.Contains(b, evStart) {
				s.onStart(sub)
			} else if bytes.Contains(b, evDone) {
				s.onDone(sub)
			}
		}
	}
}

// dialSSE opens GET /api/v1/sessions/{id}/stream; the stream is open once the 200 has come (the
// server sends its headers as soon as it follows the session).
func (s *subscribers) dialSSE(ctx context.Context, hc *http.Client, base, session string, idx int) error {
	sctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, base+"/api/v1/sessions/"+session+"/stream", nil)
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req) // the transport's ResponseHeaderTimeout bounds the wait
	if err != nil {
		cancel()
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		resp.Body.Close()
		cancel()
		return fmt.Errorf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	sub := &subscriber{idx: idx, kind: "sse", stop: func() { cancel(); resp.Body.Close() }}
	s.add(sub)
	s.wg.Add(1)
	go s.readSSE(sub, resp.Body)
	return nil
}

// readSSE reads the stream's events until it ends: "event: <type>" then "data: <json>".
func (s *subscribers) readSSE(sub *subscriber, body io.Reader) {
	defer s.wg.Done()
	br := bufio.NewReaderSize(body, 8<<10)
	var event string
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				// A long data line (a stored message): skip the rest of it.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = br.ReadSlice('\n')
				}
				if err == nil {
					continue
				}
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			s.lost(sub, err)
			return
		}
		at := s.now()
		s.frame(sub, at)
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			if n, _, ok := digits(line[len("id: "):]); ok {
				sub.lastSeq.Store(int64(n))
			}
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(bytes.TrimSpace(line[len("event: "):]))
			switch event {
			case "start":
				s.onStart(sub)
			case "done":
				s.onDone(sub)
			}
		case bytes.HasPrefix(line, []byte("data: ")) && event == "chunk":
			if i := bytes.Index(line, contentKey); i >= 0 {
				s.onChunk(sub, line[i+len(contentKey):], at)
			}
		}
	}
}

// probe opens one more WebSocket on the session resuming after seq `after` and reports what it
// reads within a few seconds: whether the server still has the events a stuck subscriber lacks.
func probe(ctx context.Context, hc *http.Client, base, session string, after int64) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(base, "http") + "/api/ws?convId=" + session + "&after=" + fmt.Sprint(after)
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return "probe: " + err.Error()
	}
	defer c.CloseNow()
	var order []string
	count := map[string]int{}
	n := 0
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			break
		}
		n++
		if i := bytes.Index(b, []byte(`"type":"`)); i >= 0 {
			t := b[i+8:]
			if j := bytes.IndexByte(t, '"'); j >= 0 {
				if count[string(t[:j])]++; count[string(t[:j])] == 1 {
					order = append(order, string(t[:j]))
				}
			}
		}
	}
	var parts []string
	for _, t := range order {
		parts = append(parts, fmt.Sprintf("%d %s", count[t], t))
	}
	return fmt.Sprintf("a new WebSocket resuming after seq %d read %d frames within 5 s: %s", after, n, strings.Join(parts, ", "))
}
