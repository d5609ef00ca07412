package openai

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/golden"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// The golden forms of a stream, shared by every adapter's tests.
type (
	goldenEvent = golden.Event
	goldenEnd   = golden.End
)

func drain(t *testing.T, s parley.Stream) golden.Stream { t.Helper(); return golden.Drain(t, s) }

func TestStreamGolden(t *testing.T) {
	golden.EachStream(t, ".sse", func(body io.ReadCloser) parley.Stream { return NewStream(body) })
}

func TestStreamEndsInvariants(t *testing.T) {
	// Facts the golden files must show, checked by name so that a wrongly accepted golden
	// file cannot hide them.
	tests := []struct {
		file      string
		eof       bool
		code      parley.ErrorCode
		unexpEOF  bool
		calls     int
		finish    string
		usage     bool
		reasoning bool
	}{
		{file: "text", eof: true, finish: "stop"},
		{file: "usage", eof: true, finish: "stop", usage: true},
		{file: "reasoning_glm", eof: true, finish: "stop", usage: true, reasoning: true},
		{file: "parallel_tools", eof: true, calls: 2, finish: "tool_calls", usage: true},
		{file: "vllm_reasoning_tools", eof: true, calls: 1, finish: "tool_calls", usage: true, reasoning: true},
		{file: "ollama_tools", eof: true, calls: 2, finish: "tool_calls", usage: true, reasoning: true},
		{file: "cut", code: parley.ECUpstream, unexpEOF: true},
		{file: "error", code: parley.ECUpstream},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "stream", tt.file+".sse"))
			if err != nil {
				t.Fatal(err)
			}
			g := drain(t, NewStream(io.NopCloser(bytes.NewReader(raw))))
			r := g.Response
			if g.End.EOF != tt.eof || g.End.Code != tt.code || g.End.UnexpectedEOF != tt.unexpEOF {
				t.Errorf("end = %+v", g.End)
			}
			if len(r.ToolCalls) != tt.calls || r.FinishReason != tt.finish || (r.Usage != nil) != tt.usage || (r.Reasoning != "") != tt.reasoning {
				t.Errorf("response = %+v", r)
			}
			for _, c := range r.ToolCalls {
				if c.ID == "" || c.Function.Name == "" || !strings.HasPrefix(c.Function.Arguments, "{") || !strings.HasSuffix(c.Function.Arguments, "}") {
					t.Errorf("incomplete tool call %+v", c)
				}
			}
		})
	}
}

func TestStreamErrorNeverLeaksUpstreamText(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "stream", "error.sse"))
	if err != nil {
		t.Fatal(err)
	}
	g := drain(t, NewStream(io.NopCloser(bytes.NewReader(raw))))
	if strings.Contains(g.End.Message, "Sorry") || !strings.Contains(g.End.Log, "Sorry about that") {
		t.Errorf("client message %q, log %q: the upstream text belongs in the log only", g.End.Message, g.End.Log)
	}
}

func TestStreamEventsAndEdgeCases(t *testing.T) {
	ev := func(typ parley.StreamEventType) goldenEvent { return goldenEvent{Type: typ} }
	content := func(s string) goldenEvent { e := ev(parley.StreamContent); e.Content = s; return e }
	call := func(i int, id, name, args string) goldenEvent {
		e := ev(parley.StreamToolCall)
		e.ToolCall = &parley.ToolCallDelta{Index: i, ID: id, Name: name, Arguments: args}
		return e
	}
	tests := []struct {
		name string
		in   string
		want []goldenEvent
		end  parley.ErrorCode // "" for io.EOF
	}{
		{
			name: "tool calls without index",
			in: `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{"}}]}}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}` + "\n\n" +
				"data: [DONE]\n\n",
			want: []goldenEvent{call(0, "a", "f", "{"), call(0, "", "", "}"), call(1, "b", "g", "{}")},
		},
		{
			name: "arguments as an object",
			in:   `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":{"x": 1}}}]}}]}` + "\n\ndata: [DONE]\n\n",
			want: []goldenEvent{call(0, "a", "f", `{"x":1}`)},
		},
		{
			name: "empty tool-call delta is dropped",
			in:   `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}` + "\n\ndata: [DONE]\n\n",
		},
		{
			name: "other choices ignored",
			in:   `data: {"choices":[{"index":1,"delta":{"content":"no"}},{"index":0,"delta":{"content":"yes"}}]}` + "\n\ndata: [DONE]\n\n",
			want: []goldenEvent{content("yes")},
		},
		{
			name: "refusal is content",
			in:   `data: {"choices":[{"index":0,"delta":{"content":null,"refusal":"I can't help with that."}}]}` + "\n\ndata: [DONE]\n\n",
			want: []goldenEvent{content("I can't help with that.")},
		},
		{
			name: "reasoning and content in one delta: reasoning first",
			in:   `data: {"choices":[{"index":0,"delta":{"content":"B","reasoning_content":"A"}}]}` + "\n\ndata: [DONE]\n\n",
			want: []goldenEvent{{Type: parley.StreamReasoning, Reasoning: "A"}, content("B")},
		},
		{
			name: "reasoning field that is not a string is ignored",
			in:   `data: {"choices":[{"index":0,"delta":{"content":"x","reasoning":{"effort":"low"}}}]}` + "\n\ndata: [DONE]\n\n",
			want: []goldenEvent{content("x")},
		},
		{
			name: "null error field is no error",
			in:   `data: {"choices":[{"index":0,"delta":{"content":"x"}}],"error":null}` + "\n\ndata: [DONE]\n\n",
			want: []goldenEvent{content("x")},
		},
		{
			name: "event: error",
			in:   "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\nevent: error\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":503}}\n\n",
			want: []goldenEvent{content("x")},
			end:  parley.ECUpstream,
		},
		{
			name: "invalid chunk",
			in:   "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {not json}\n\ndata: [DONE]\n\n",
			want: []goldenEvent{content("x")},
			end:  parley.ECUpstream,
		},
		{
			name: "DONE without a final blank line",
			in:   "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n",
			want: []goldenEvent{content("x")},
		},
		{
			name: "events after DONE are not read",
			in:   "data: [DONE]\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n",
		},
		{
			name: "usage repeated in every chunk is reported once, last value",
			in: `data: {"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n" +
				"data: [DONE]\n\n",
			want: []goldenEvent{content("a"), content("b"), {Type: parley.StreamFinish, FinishReason: "stop"},
				{Type: parley.StreamUsage, Usage: &parley.Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7}}},
		},
		{
			name: "empty body",
			in:   "",
			end:  parley.ECUpstream,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := drain(t, NewStream(io.NopCloser(strings.NewReader(tt.in))))
			if string(indentJSON(t, g.Events)) != string(indentJSON(t, tt.want)) {
				t.Errorf("events:\n%s\nwant:\n%s", indentJSON(t, g.Events), indentJSON(t, tt.want))
			}
			if tt.end == "" && !g.End.EOF || tt.end != "" && g.End.Code != tt.end {
				t.Errorf("end = %+v, want %q", g.End, tt.end)
			}
		})
	}
}

// blockingBody blocks reads until it is closed, like an idle HTTP body.
type blockingBody struct {
	done chan struct{}
	once atomic.Bool
}

func (b *blockingBody) Read([]byte) (int, error) {
	<-b.done
	return 0, errors.New("read on closed body")
}
func (b *blockingBody) Close() error {
	if !b.once.Swap(true) {
		close(b.done)
	}
	return nil
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	body := &blockingBody{done: make(chan struct{})}
	s := NewStream(body)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Next()
		errc <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if parley.CodeOf(err) != parley.ECCanceled {
			t.Errorf("Next after Close = %v, want canceled", err)
		}
	case <-timeout(t):
		t.Fatal("Next still blocked after Close")
	}
	if _, err := s.Next(); parley.CodeOf(err) != parley.ECCanceled {
		t.Errorf("Next after Close = %v", err)
	}
}

func TestStreamContextCanceledDuringRead(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := newStream(ctx, io.NopCloser(iotest.ErrReader(context.Canceled)))
	_, err := s.Next()
	if parley.CodeOf(err) != parley.ECCanceled || !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want canceled wrapping context.Canceled", err)
	}
}

func TestStreamReadError(t *testing.T) {
	s := NewStream(io.NopCloser(io.MultiReader(strings.NewReader("data: {\"choices\":[]}\n\n"), iotest.ErrReader(errors.New("connection reset")))))
	_, err := s.Next()
	if parley.CodeOf(err) != parley.ECUpstream || !strings.Contains(err.Error(), "connection reset") || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %v", err)
	}
}

func TestStreamEventTooLarge(t *testing.T) {
	in := "data: " + strings.Repeat("x", upstream.MaxEventSize) + "\n\n"
	_, err := NewStream(io.NopCloser(strings.NewReader(in))).Next()
	if parley.CodeOf(err) != parley.ECUpstream || parley.MessageOf(err) != "provider stream event too large" {
		t.Errorf("got %v", err)
	}
}

// openaiAnswer is a streamed Chat Completions answer of n content deltas in the shape OpenAI
// sends them, then the finish, the usage chunk and [DONE].
func openaiAnswer(n int) []byte {
	var sb strings.Builder
	head := `data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,"delta":`
	sb.WriteString(head + `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for range n {
		sb.WriteString(head + `{"content":"Hello, wörld "},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(head + `{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n")
	sb.WriteString(`data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":25,"completion_tokens":1000,"total_tokens":1025}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	return []byte(sb.String())
}

// BenchmarkStream decodes an answer of 1,000 content deltas: the adapter's cost per streamed
// event.
func BenchmarkStream(b *testing.B) {
	golden.BenchStream(b, openaiAnswer(1000), 1002, NewStream)
}

// BenchmarkStreamShort decodes an answer of 3 content deltas (bench/gateway's): what every
// streamed model call costs besides its events.
func BenchmarkStreamShort(b *testing.B) {
	golden.BenchStream(b, openaiAnswer(3), 5, NewStream)
}
