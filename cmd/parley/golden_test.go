package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/stream")

// The golden transcripts pin Parley's two stream protocols byte for byte: scripted chats run
// through a real server (`parley serve`, SQLite, the fake OpenAI-compatible upstream of
// provider/llmtest) and every byte of each SSE response, and every WebSocket frame (one JSON text a
// line), is compared with testdata/stream/<scenario>.txtar. Any change of event order, names,
// fields or framing fails them; `go test ./cmd/parley -run TestStreamGolden -update` rewrites
// them after a change that is meant.
//
// What is inherently variable is normalized, and nothing else (see normalize):
//   - ids (UUIDv7 of sessions, runs, messages) become <id1>, <id2>, … numbered by first appearance
//     in the file, so that the same id in two places is still pinned as the same;
//   - timestamps (RFC 3339 strings) become "<time>";
//   - "latency_ms" is measured and omitted when 0, so it is removed.
//
// WebSocket replies to client frames (control_response, pong: frames without "seq") are written
// from their own queue, so their place among the run's events depends on scheduling: they are
// pinned, in order, in their own section ("ws replies"), and the run's frames in theirs.

// gatedUpstream is the fake model behind a gate: a request armed with hold stops before writing
// its at-th stream frame until the gate opens, so a test can act at a known point of a run.
type gatedUpstream struct {
	fake *llmtest.Server
	mu   sync.Mutex
	at   int
	gate chan struct{}
}

// hold arms the next request to stop before its at-th frame; closing the channel lets it go on.
func (g *gatedUpstream) hold(at int) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.at, g.gate = at, make(chan struct{})
	return g.gate
}

func (g *gatedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	at, gate := g.at, g.gate
	if r.URL.Path != "/v1/models" {
		g.at, g.gate = 0, nil
	}
	g.mu.Unlock()
	if at > 0 {
		w = &gatedWriter{ResponseWriter: w, at: at, gate: gate, done: r.Context().Done()}
	}
	g.fake.ServeHTTP(w, r)
}

type gatedWriter struct {
	http.ResponseWriter
	n, at int
	gate  chan struct{}
	done  <-chan struct{}
}

func (w *gatedWriter) Write(b []byte) (int, error) {
	w.n++
	if w.n == w.at {
		select {
		case <-w.gate:
		case <-w.done:
			return 0, io.ErrClosedPipe
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *gatedWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// goldenServer is a parley serve process (in this test binary) on the gated fake upstream.
type goldenServer struct {
	url string
	up  *gatedUpstream
}

func startGoldenServer(t *testing.T, extra ...string) *goldenServer {
	t.Helper()
	up := &gatedUpstream{fake: llmtest.NewServer(llmtest.WithChunkSize(8))}
	hs := httptest.NewServer(up)
	t.Cleanup(hs.Close)
	url, _ := startGolden(t, hs.URL, filepath.Join(t.TempDir(), "p.db"), extra...)
	return &goldenServer{url: url, up: up}
}

// startGolden runs parley serve in this process on the SQLite file db with the fake upstream at
// upstream, and returns its URL and a function that stops it (as SIGTERM does) and waits; the
// test's end stops it too.
func startGolden(t *testing.T, upstream, db string, extra ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	env := map[string]string{"PARLEY_OPENAI_BASE_URL": upstream + "/v1"}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--heartbeat", "1h",
		"--provider-attempts", "1", "--rate-limit", "off"}
	args = append(args, extra...)
	go func() {
		err := run(ctx, args, func(k string) string { return env[k] }, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	var logs bytes.Buffer
	url := waitListening(t, pr, &logs)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve returned %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("serve did not stop within 20s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return url, stop
}

var usage1 = &parley.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}

// toolTurns is a model turn with reasoning and a calculator call, then the answer.
func toolTurns() []llmtest.Turn {
	return []llmtest.Turn{
		{Reasoning: "The user wants a product; I will use the calculator.", Usage: usage1,
			ToolCalls: []parley.ToolCall{{ID: "call_g1", Type: "function",
				Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}},
		{Content: "6*7 = 42.", Usage: &parley.Usage{PromptTokens: 30, CompletionTokens: 5, TotalTokens: 35}},
	}
}

// sseStream reads an SSE response event by event and keeps every byte it read.
type sseStream struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
	raw  bytes.Buffer
}

func (s *goldenServer) sse(t *testing.T, ctx context.Context, method, path, body string, hdr ...string) *sseStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return &sseStream{t: t, resp: resp, r: bufio.NewReader(resp.Body)}
}

// next reads up to the end of the next event (a blank line) and returns the event's data, or nil
// at the end of the body.
func (s *sseStream) next() *parley.Event {
	s.t.Helper()
	var data string
	for {
		line, err := s.r.ReadString('\n')
		s.raw.WriteString(line)
		if err != nil {
			if err == io.EOF && line == "" {
				return nil
			}
			s.t.Fatalf("SSE read: %v (read so far:\n%s)", err, s.raw.String())
		}
		switch {
		case line == "\n":
			if data == "" {
				continue
			}
			var ev parley.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				s.t.Fatalf("bad data %q: %v", data, err)
			}
			return &ev
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimSuffix(strings.TrimPrefix(line, "data: "), "\n")
		}
	}
}

// until reads events up to and including the first for which stop is true.
func (s *sseStream) until(stop func(*parley.Event) bool) *parley.Event {
	s.t.Helper()
	for {
		ev := s.next()
		if ev == nil {
			s.t.Fatalf("the stream ended early:\n%s", s.raw.String())
		}
		if stop(ev) {
			return ev
		}
	}
}

// rest reads the body to its end and returns every byte read.
func (s *sseStream) rest() string {
	s.t.Helper()
	for s.next() != nil {
	}
	return s.raw.String()
}

func isType(typ parley.EventType) func(*parley.Event) bool {
	return func(ev *parley.Event) bool { return ev.Type == typ }
}

func (s *goldenServer) post(t *testing.T, path string) {
	t.Helper()
	resp, err := http.Post(s.url+path, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
}

// wsStream is a WebSocket client that keeps every frame: run frames (with a seq, and the connected
// status) and replies apart.
type wsStream struct {
	t       *testing.T
	c       *websocket.Conn
	ctx     context.Context
	frames  []string
	replies []string
}

type wsFrame struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Seq  int64           `json:"seq"`
	Data json.RawMessage `json:"data"`
}

func (s *goldenServer) ws(t *testing.T, ctx context.Context, query string) *wsStream {
	t.Helper()
	url := "ws" + strings.TrimPrefix(s.url, "http") + "/api/ws" + query
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"parley.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(8 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsStream{t: t, c: c, ctx: ctx}
}

func (w *wsStream) send(typ, id string, data any) {
	w.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": typ, "id": id, "data": data})
	if err := w.c.Write(w.ctx, websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
}

// until reads frames up to and including the first run event for which stop is true.
func (w *wsStream) until(stop func(*parley.Event) bool) *parley.Event {
	w.t.Helper()
	for {
		_, b, err := w.c.Read(w.ctx)
		if err != nil {
			w.t.Fatalf("WebSocket read: %v (frames so far:\n%s)", err, strings.Join(w.frames, "\n"))
		}
		var f wsFrame
		if err := json.Unmarshal(b, &f); err != nil {
			w.t.Fatalf("bad frame %q: %v", b, err)
		}
		if f.Seq == 0 && f.Type != "status" {
			w.replies = append(w.replies, string(b))
			continue
		}
		w.frames = append(w.frames, string(b))
		if f.Seq == 0 {
			continue // the connected status
		}
		var ev parley.Event
		if err := json.Unmarshal(f.Data, &ev); err != nil {
			w.t.Fatalf("bad frame data %q: %v", b, err)
		}
		if stop(&ev) {
			return &ev
		}
	}
}

// replyCount waits until n replies have arrived (reading run frames meanwhile).
func (w *wsStream) waitReplies(n int) {
	w.t.Helper()
	for len(w.replies) < n {
		_, b, err := w.c.Read(w.ctx)
		if err != nil {
			w.t.Fatalf("WebSocket read: %v", err)
		}
		var f wsFrame
		if err := json.Unmarshal(b, &f); err != nil {
			w.t.Fatalf("bad frame %q: %v", b, err)
		}
		if f.Seq == 0 && f.Type != "status" {
			w.replies = append(w.replies, string(b))
		} else {
			w.frames = append(w.frames, string(b))
		}
	}
}

func (w *wsStream) transcript() (frames, replies string) {
	join := func(l []string) string {
		if len(l) == 0 {
			return ""
		}
		return strings.Join(l, "\n") + "\n"
	}
	return join(w.frames), join(w.replies)
}

var (
	uuidRE    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRE    = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`)
	latencyRE = regexp.MustCompile(`,"latency_ms":\d+`)
)

// normalize replaces what varies from run to run, and only that (see the comment at the top).
func normalize(s string) string {
	ids := map[string]string{}
	s = uuidRE.ReplaceAllStringFunc(s, func(id string) string {
		if n, ok := ids[id]; ok {
			return n
		}
		n := "<id" + strconv.Itoa(len(ids)+1) + ">"
		ids[id] = n
		return n
	})
	s = timeRE.ReplaceAllString(s, `"<time>"`)
	return latencyRE.ReplaceAllString(s, "")
}

// section is one file of a txtar archive.
type section struct{ name, body string }

// formatTxtar writes a txtar archive: the comment, then each section as "-- name --" and its body.
func formatTxtar(comment string, secs []section) []byte {
	var b bytes.Buffer
	b.WriteString(comment)
	for _, s := range secs {
		fmt.Fprintf(&b, "-- %s --\n", s.name)
		b.WriteString(s.body)
		if s.body != "" && !strings.HasSuffix(s.body, "\n") {
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// checkGolden compares the normalized sections with testdata/stream/<name>.txtar, or rewrites it
// with -update.
func checkGolden(t *testing.T, name, comment string, secs ...section) {
	t.Helper()
	got := []byte(normalize(string(formatTxtar(comment, secs))))
	path := filepath.Join("testdata", "stream", name+".txtar")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/parley -run TestStreamGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept a meant change)\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first differing line of two transcripts with some context.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("first difference at line %d:\n want: %s\n  got: %s\n--- got in full\n%s", i+1, w, g, got)
		}
	}
	return ""
}

// TestStreamGolden runs each scripted chat over SSE and over a WebSocket and compares both
// transcripts with its golden file.
func TestStreamGolden(t *testing.T) {
	s := startGoldenServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const intro = "Golden transcript of Parley's stream protocols (see cmd/parley/golden_test.go:\n" +
		"ids, timestamps and latency_ms normalized; -update rewrites it).\n"

	t.Run("plain", func(t *testing.T) {
		s.up.fake.Enqueue(llmtest.Turn{Content: "Hello there, how can I help?", Usage: usage1})
		sse := s.sse(t, ctx, "POST", "/api/v1/chat/stream", `{"message":"Hi"}`).rest()

		s.up.fake.Enqueue(llmtest.Turn{Content: "Hello there, how can I help?", Usage: usage1})
		ws := s.ws(t, ctx, "")
		ws.send("user_message", "m1", map[string]any{"text": "Hi"})
		ws.until(isType(parley.EventDone))
		ws.waitReplies(1)
		ws.send("ping", "p1", nil)
		ws.waitReplies(2)
		frames, replies := ws.transcript()
		checkGolden(t, "plain", intro+"A plain answer: POST /api/v1/chat/stream, and a WebSocket user_message then a ping.\n",
			section{"sse", sse}, section{"ws", frames}, section{"ws replies", replies})
	})

	var toolSession string
	t.Run("tools", func(t *testing.T) {
		s.up.fake.Enqueue(toolTurns()...)
		st := s.sse(t, ctx, "POST", "/api/v1/chat/stream", `{"message":"What is 6*7?"}`)
		toolSession = st.until(isType(parley.EventStart)).SessionID
		sse := st.rest()

		s.up.fake.Enqueue(toolTurns()...)
		ws := s.ws(t, ctx, "")
		ws.send("user_message", "m1", map[string]any{"text": "What is 6*7?"})
		ws.until(isType(parley.EventDone))
		ws.waitReplies(1)
		frames, replies := ws.transcript()
		checkGolden(t, "tools", intro+"Reasoning, a calculator call and its result, then the answer.\n",
			section{"sse", sse}, section{"ws", frames}, section{"ws replies", replies})
	})

	t.Run("resume", func(t *testing.T) {
		if toolSession == "" {
			t.Skip("the tools scenario failed")
		}
		p := "/api/v1/sessions/" + toolSession + "/stream"
		byHeader := s.sse(t, ctx, "GET", p+"?until=done", "", "Last-Event-ID", "6").rest()
		byAfter := s.sse(t, ctx, "GET", p+"?until=done&after=15", "").rest()
		ws := s.ws(t, ctx, "?convId="+toolSession+"&after=6")
		ws.until(isType(parley.EventDone))
		frames, _ := ws.transcript()
		checkGolden(t, "resume", intro+"The tools session resumed after a finished run: SSE with Last-Event-ID: 6, with ?after=15, and a WebSocket with after=6.\n",
			section{"sse last-event-id", byHeader}, section{"sse after", byAfter}, section{"ws after", frames})
	})

	t.Run("resume-store", func(t *testing.T) {
		// A restarted server has no run in memory: the events come from the database.
		up := &gatedUpstream{fake: llmtest.NewServer(llmtest.WithChunkSize(8))}
		hs := httptest.NewServer(up)
		defer hs.Close()
		db := filepath.Join(t.TempDir(), "p.db")
		url, stop := startGolden(t, hs.URL, db)
		first := &goldenServer{url: url, up: up}
		up.fake.Enqueue(toolTurns()...)
		st := first.sse(t, ctx, "POST", "/api/v1/chat/stream", `{"message":"What is 6*7?"}`)
		sid := st.until(isType(parley.EventStart)).SessionID
		live := st.rest()
		stop()

		url, _ = startGolden(t, hs.URL, db)
		again := &goldenServer{url: url, up: up}
		p := "/api/v1/sessions/" + sid + "/stream"
		byHeader := again.sse(t, ctx, "GET", p+"?until=done", "", "Last-Event-ID", "6").rest()
		ws := again.ws(t, ctx, "?convId="+sid+"&after=6")
		ws.until(isType(parley.EventDone))
		frames, _ := ws.transcript()
		checkGolden(t, "resume-store", intro+"A run streamed live, then, after a restart, resumed from the database: SSE with Last-Event-ID: 6 and a WebSocket with after=6.\n",
			section{"sse live", live}, section{"sse last-event-id after a restart", byHeader}, section{"ws after=6 after a restart", frames})
	})

	t.Run("abort", func(t *testing.T) {
		// The answer stops after its first piece (frame 1 is the role, frame 2 the first piece).
		turn := llmtest.Turn{Content: "A long answer that will be cut short by an abort.", Usage: usage1}
		gate := s.up.hold(3)
		s.up.fake.Enqueue(turn)
		st := s.sse(t, ctx, "POST", "/api/v1/chat/stream", `{"message":"Tell me a story"}`)
		sid := st.until(isType(parley.EventChunk)).SessionID
		s.post(t, "/api/v1/sessions/"+sid+"/abort")
		sse := st.rest()
		close(gate)

		gate = s.up.hold(3)
		s.up.fake.Enqueue(turn)
		ws := s.ws(t, ctx, "")
		ws.send("user_message", "m1", map[string]any{"text": "Tell me a story"})
		ws.until(isType(parley.EventChunk))
		ws.send("control", "c1", map[string]any{"action": "abort"})
		ws.until(isType(parley.EventDone))
		ws.waitReplies(2)
		close(gate)
		frames, replies := ws.transcript()
		checkGolden(t, "abort", intro+"An answer aborted after its first chunk: over HTTP for SSE, with a control frame on the WebSocket.\n",
			section{"sse", sse}, section{"ws", frames}, section{"ws replies", replies})
	})

	t.Run("pause", func(t *testing.T) {
		// The model's first turn stops after its first reasoning piece; the run is paused there, the
		// turn goes on, and the run holds before its tool call until it is resumed.
		gate := s.up.hold(3)
		s.up.fake.Enqueue(toolTurns()...)
		st := s.sse(t, ctx, "POST", "/api/v1/chat/stream", `{"message":"What is 6*7?"}`)
		sid := st.until(isType(parley.EventReasoning)).SessionID
		s.post(t, "/api/v1/sessions/"+sid+"/pause")
		st.until(isType(parley.EventStatus))
		close(gate)
		st.until(isType(parley.EventToolCallsStart))
		s.post(t, "/api/v1/sessions/"+sid+"/resume")
		sse := st.rest()

		gate = s.up.hold(3)
		s.up.fake.Enqueue(toolTurns()...)
		ws := s.ws(t, ctx, "")
		ws.send("user_message", "m1", map[string]any{"text": "What is 6*7?"})
		ws.until(isType(parley.EventReasoning))
		ws.send("control", "c1", map[string]any{"action": "pause"})
		ws.until(isType(parley.EventStatus))
		close(gate)
		ws.until(isType(parley.EventToolCallsStart))
		ws.send("control", "c2", map[string]any{"action": "resume"})
		ws.until(isType(parley.EventDone))
		ws.waitReplies(3)
		frames, replies := ws.transcript()
		checkGolden(t, "pause", intro+"A run paused during its first model call and resumed before its tool call.\n",
			section{"sse", sse}, section{"ws", frames}, section{"ws replies", replies})
	})

	t.Run("upstream-error", func(t *testing.T) {
		turn := llmtest.Turn{Content: "This answer is cut in the middle by the upstream.", CutAfter: 3, Usage: usage1}
		s.up.fake.Enqueue(turn)
		sse := s.sse(t, ctx, "POST", "/api/v1/chat/stream", `{"message":"Tell me a story"}`).rest()

		s.up.fake.Enqueue(turn)
		ws := s.ws(t, ctx, "")
		ws.send("user_message", "m1", map[string]any{"text": "Tell me a story"})
		ws.until(isType(parley.EventDone))
		ws.waitReplies(1)
		frames, replies := ws.transcript()
		checkGolden(t, "upstream-error", intro+"The upstream stream is cut after two pieces of the answer: an error event, then done.\n",
			section{"sse", sse}, section{"ws", frames}, section{"ws replies", replies})
	})
}
