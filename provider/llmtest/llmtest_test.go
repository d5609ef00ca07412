package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/openai"
)

var update = flag.Bool("update", false, "rewrite golden files")

// both runs fn against s over the in-process transport and over a real loopback server.
func both(t *testing.T, s *Server, fn func(t *testing.T, c *openai.Client, base string, hc *http.Client)) {
	t.Run("transport", func(t *testing.T) {
		hc := &http.Client{Transport: Transport(s)}
		fn(t, openai.New(openai.Config{BaseURL: "http://mock.invalid/v1", HTTPClient: hc}), "http://mock.invalid/v1", hc)
	})
	t.Run("http", func(t *testing.T) {
		ts := httptest.NewServer(s)
		defer ts.Close()
		fn(t, openai.New(openai.Config{BaseURL: ts.URL + "/v1", HTTPClient: ts.Client()}), ts.URL+"/v1", ts.Client())
	})
}

func userReq(text string, tools ...string) *parley.ChatRequest {
	r := &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text(text)}}}
	for _, n := range tools {
		r.Tools = append(r.Tools, parley.ToolSpec{Name: n, Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return r
}

// collect reads a stream to its end, returning the events and the assembled response.
func collect(t *testing.T, c *openai.Client, req *parley.ChatRequest) ([]parley.StreamEvent, *parley.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Stream(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	var evs []parley.StreamEvent
	var b parley.ResponseBuilder
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return evs, b.Response(), nil
		}
		if err != nil {
			return evs, b.Response(), err
		}
		evs = append(evs, ev)
		b.Add(ev)
	}
}

func count(evs []parley.StreamEvent, typ parley.StreamEventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// rawStream posts a streamed request and returns the raw SSE body.
func rawStream(t *testing.T, hc *http.Client, base, body string) string {
	t.Helper()
	resp, err := hc.Post(base+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return string(b)
}

func TestTextStream(t *testing.T) {
	s := NewServer()
	both(t, s, func(t *testing.T, c *openai.Client, base string, hc *http.Client) {
		s.Enqueue(Turn{Content: "Hello, wörld! Streaming works."})
		evs, resp, err := collect(t, c, userReq("hi"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Content != "Hello, wörld! Streaming works." || resp.FinishReason != "stop" || count(evs, parley.StreamContent) < 2 {
			t.Fatalf("response %+v from %d content events", resp, count(evs, parley.StreamContent))
		}
		if resp.Usage == nil || resp.Usage.TotalTokens == 0 {
			t.Fatalf("usage missing although the adapter asks for it: %+v", resp.Usage)
		}
		s.Enqueue(Turn{Content: "abcdefgh"})
		raw := rawStream(t, hc, base, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
		if !strings.HasSuffix(raw, "data: [DONE]\n\n") || strings.Contains(raw, `"usage"`) {
			t.Fatalf("raw stream without include_usage:\n%s", raw)
		}
		frames := strings.Split(strings.TrimSuffix(raw, "\n\n"), "\n\n")
		if len(frames) != 5 { // role, "abcd", "efgh", finish, [DONE]
			t.Fatalf("%d frames:\n%s", len(frames), raw)
		}
		s.Enqueue(Turn{Content: "abc", Usage: &parley.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}})
		raw = rawStream(t, hc, base, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`)
		frames = strings.Split(strings.TrimSuffix(raw, "\n\n"), "\n\n")
		last := frames[len(frames)-2]
		if !strings.Contains(last, `"choices":[]`) || !strings.Contains(last, `"total_tokens":5`) || !strings.Contains(frames[1], `"usage":null`) {
			t.Fatalf("usage chunk:\n%s", raw)
		}
	})
}

func TestReasoningAndParallelToolCalls(t *testing.T) {
	s := NewServer(WithChunkSize(3))
	calls := []parley.ToolCall{
		{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris","unit":"c"}`}},
		{ID: "call_2", Type: "function", Function: parley.FunctionCall{Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`}},
	}
	both(t, s, func(t *testing.T, c *openai.Client, base string, hc *http.Client) {
		s.Enqueue(Turn{Reasoning: "Two things to look up.", ToolCalls: calls})
		evs, resp, err := collect(t, c, userReq("weather and time in Paris", "get_weather", "get_time"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Reasoning != "Two things to look up." || count(evs, parley.StreamReasoning) < 2 {
			t.Fatalf("reasoning %q in %d events", resp.Reasoning, count(evs, parley.StreamReasoning))
		}
		got, _ := json.Marshal(resp.ToolCalls)
		want, _ := json.Marshal(calls)
		if string(got) != string(want) || resp.FinishReason != "tool_calls" {
			t.Fatalf("tool calls %s (finish %s), want %s", got, resp.FinishReason, want)
		}
		perCall := map[int]int{}
		for _, e := range evs {
			if e.Type == parley.StreamToolCall && e.ToolCall.Arguments != "" {
				perCall[e.ToolCall.Index]++
			}
		}
		if perCall[0] < 2 || perCall[1] < 2 {
			t.Fatalf("arguments not split across chunks: %v", perCall)
		}
	})
}

func TestNonStreamedGolden(t *testing.T) {
	s := NewServer()
	s.clock = func() time.Time { return time.Unix(1763800000, 0) }
	for _, tc := range []struct {
		name string
		turn Turn
	}{
		{"text", Turn{Content: "Hi there.", Usage: &parley.Usage{PromptTokens: 9, CompletionTokens: 3, TotalTokens: 12}}},
		{"tool_calls", Turn{Reasoning: "Need the weather.", Usage: &parley.Usage{PromptTokens: 20, CompletionTokens: 10, TotalTokens: 30, ReasoningTokens: 4},
			ToolCalls: []parley.ToolCall{{ID: "call_abc", Type: "function", Function: parley.FunctionCall{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.Enqueue(tc.turn)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)))
			if rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			var v any
			json.Unmarshal(rec.Body.Bytes(), &v)
			v.(map[string]any)["id"] = "chatcmpl-ID"
			got, _ := json.MarshalIndent(v, "", "  ")
			path := filepath.Join("testdata", tc.name+".golden.json")
			if *update {
				os.MkdirAll("testdata", 0o755)
				os.WriteFile(path, append(got, '\n'), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(append(got, '\n')) != string(want) {
				t.Fatalf("got:\n%s\nwant:\n%s", got, want)
			}
			// And the adapter reads it back.
			resp, err := openai.DecodeResponse(rec.Body.Bytes())
			if err != nil || len(resp.ToolCalls) != len(tc.turn.ToolCalls) || resp.Content != tc.turn.Content || resp.Reasoning != tc.turn.Reasoning {
				t.Fatalf("decoded %+v %v", resp, err)
			}
		})
	}
}

func TestErrorsAndCuts(t *testing.T) {
	s := NewServer()
	both(t, s, func(t *testing.T, c *openai.Client, base string, hc *http.Client) {
		s.Enqueue(Turn{Status: 429, RetryAfter: "7", ErrorMessage: "Rate limit reached"})
		_, _, err := collect(t, c, userReq("x"))
		var se *openai.StatusError
		if !errors.As(err, &se) || se.StatusCode != 429 || se.RetryAfter != 7*time.Second || parley.CodeOf(err) != parley.ECRateLimited {
			t.Fatalf("429: %#v", err)
		}
		s.Enqueue(Turn{Status: 500})
		if _, _, err := collect(t, c, userReq("x")); !errors.As(err, &se) || se.StatusCode != 500 || parley.CodeOf(err) != parley.ECUpstream {
			t.Fatalf("500: %v", err)
		}
		s.Enqueue(Turn{Content: "this answer will be cut off midway", CutAfter: 4})
		evs, resp, err := collect(t, c, userReq("x"))
		if err == nil || count(evs, parley.StreamContent) == 0 || resp.FinishReason != "" {
			t.Fatalf("cut stream: err=%v after %d content events, finish %q", err, count(evs, parley.StreamContent), resp.FinishReason)
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	s := NewServer()
	for body, want := range map[string]string{
		`{"model":`:                   "parse the JSON",
		`{"model":"m","messages":[]}`: "too short",
		`{"model":"m","messages":[{"role":"wizard","content":"x"}]}`: "Supported values",
		`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"y"}]}`: "call_9",
		`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_1","content":"r"}]}`:                                                                                                       "preceeding message with 'tool_calls'",
		`{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`:                                                                                                                     "only allowed when 'stream'",
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body)))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), `"type":"invalid_request_error"`) {
			t.Errorf("%.60s…: %d %s", body, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/nothing", nil))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "Unknown request URL") {
		t.Fatalf("404: %d %s", rec.Code, rec.Body)
	}
	if len(s.Requests()) != 0 {
		t.Fatal("invalid requests were recorded as served")
	}
}

// TestChunks: WithChunks answers an unscripted request with that many content chunks of the
// chunk size, and a scripted turn still wins.
func TestChunks(t *testing.T) {
	s := NewServer(WithChunks(25), WithChunkSize(3))
	c := openai.New(openai.Config{BaseURL: "http://mock.invalid/v1", HTTPClient: &http.Client{Transport: Transport(s)}})
	evs, resp, err := collect(t, c, userReq("What is 2+2? And the time?", "calculator", "get_current_time"))
	if err != nil {
		t.Fatal(err)
	}
	if n := count(evs, parley.StreamContent); n != 25 || len(resp.Content) != 75 || len(resp.ToolCalls) != 0 {
		t.Fatalf("%d content chunks, %d characters, %d tool calls; want 25, 75, 0", n, len(resp.Content), len(resp.ToolCalls))
	}
	s.Enqueue(Turn{Content: "scripted"})
	if _, resp, err := collect(t, c, userReq("x")); err != nil || resp.Content != "scripted" {
		t.Fatalf("a scripted turn under WithChunks: %q, %v", resp.Content, err)
	}
}

func TestTokenDelayAndCancel(t *testing.T) {
	s := NewServer(WithTokenDelay(20*time.Millisecond), WithChunkSize(1))
	c := openai.New(openai.Config{BaseURL: "http://mock.invalid/v1", HTTPClient: &http.Client{Transport: Transport(s)}})
	s.Enqueue(Turn{Content: "abcd"})
	start := time.Now()
	if _, resp, err := collect(t, c, userReq("x")); err != nil || resp.Content != "abcd" {
		t.Fatal(resp, err)
	}
	// role, 4 content chunks, finish, usage: six gaps of 20 ms at least.
	if el := time.Since(start); el < 120*time.Millisecond {
		t.Fatalf("stream took %s, the delay was not applied", el)
	}
	s.Enqueue(Turn{Content: strings.Repeat("x", 1000), Delay: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Stream(ctx, userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan error, 1)
	go func() { _, err := st.Next(); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("stream went on after cancel")
		}
	case <-time.After(500 * time.Millisecond):
		t.Fatal("cancel did not stop the stream promptly")
	}
	st.Close()
}

func TestDemoBrain(t *testing.T) {
	s := NewServer()
	c := openai.New(openai.Config{BaseURL: "http://mock.invalid/v1", HTTPClient: &http.Client{Transport: Transport(s)}})
	req := userReq("What is 12*(3+4)?", "calculator", "get_current_time")
	_, resp, err := collect(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Function.Name != "calculator" || resp.ToolCalls[0].Function.Arguments != `{"expression":"12*(3+4)"}` || resp.Reasoning == "" {
		t.Fatalf("first turn: %+v", resp)
	}
	req.Messages = append(req.Messages,
		parley.Message{Role: parley.RoleAssistant, ToolCalls: resp.ToolCalls},
		parley.Message{Role: parley.RoleTool, ToolCallID: resp.ToolCalls[0].ID, Content: parley.Text("84")})
	if _, resp, err = collect(t, c, req); err != nil || resp.Content != "12*(3+4) = 84." || len(resp.ToolCalls) != 0 {
		t.Fatalf("second turn: %+v %v", resp, err)
	}

	_, resp, _ = collect(t, c, userReq("What time is it in UTC, and what is 2+3?", "calculator", "get_current_time"))
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Function.Arguments != `{"expression":"2+3"}` || resp.ToolCalls[1].Function.Name != "get_current_time" {
		t.Fatalf("two calls: %+v", resp.ToolCalls)
	}
	// Tools that are not offered are not called.
	_, resp, _ = collect(t, c, userReq("What is 2+3?", "get_current_time"))
	if len(resp.ToolCalls) != 0 || !strings.Contains(resp.Content, "You said: What is 2+3?") {
		t.Fatalf("unoffered tool: %+v", resp)
	}
	// A failed tool is reported.
	req = userReq("what is 1/0", "calculator")
	req.Messages = append(req.Messages,
		parley.Message{Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"1/0"}`}}}},
		parley.Message{Role: parley.RoleTool, ToolCallID: "c1", Content: parley.Text("error: division by zero")})
	if _, resp, _ = collect(t, c, req); !strings.Contains(resp.Content, "calculator tool failed: error: division by zero") {
		t.Fatalf("failed tool: %q", resp.Content)
	}
	reqs := s.Requests()
	if len(reqs) != 5 || len(reqs[0].Tools) != 2 || reqs[0].Tools[0].Name != "calculator" || !reqs[0].Stream || !reqs[0].IncludeUsage {
		t.Fatalf("recorded: %+v", reqs[0])
	}
	s.Reset()
	if len(s.Requests()) != 0 {
		t.Fatal("Reset kept requests")
	}
}

func TestFindExpression(t *testing.T) {
	for in, want := range map[string]string{
		"What is 12*(3+4)?":        "12*(3+4)",
		"compute 2 + 3 please":     "2 + 3",
		"what is 1/0":              "1/0",
		"In 2026, what's 7.5 * 2?": "7.5 * 2",
		"no math here, just 42":    "",
		"-5 + 3 = ?":               "-5 + 3",
	} {
		if got := findExpression(in); got != want {
			t.Errorf("findExpression(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConcurrentScript(t *testing.T) {
	s := NewServer()
	c := openai.New(openai.Config{BaseURL: "http://mock.invalid/v1", HTTPClient: &http.Client{Transport: Transport(s)}})
	for range 20 {
		s.Enqueue(Turn{Content: "scripted"})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, resp, err := collect(t, c, userReq("x"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[resp.Content]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got["scripted"] != 20 {
		t.Fatalf("answers: %v", got)
	}
}

func TestListenAndServe(t *testing.T) {
	var logs syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ListenAndServe(ctx, "127.0.0.1:0", NewServer(), slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	addrRe := regexp.MustCompile(`msg=listening addr=(\S+)`)
	var addr string
	for deadline := time.Now().Add(3 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := addrRe.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no listening log: %s", logs.String())
	}
	resp, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte(`"id":"mock"`)) {
		t.Fatalf("models: %s", b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(6 * time.Second):
		t.Fatal("did not stop")
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
