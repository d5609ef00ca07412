package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// The golden transcripts of the OpenAI-compatible API (package httpapi/openaiapi): scripted
// requests to a real `parley serve` (SQLite, the fake upstream of provider/llmtest), each
// exchange pinned byte for byte in testdata/openai/<scenario>.txtar: the request, the status,
// the headers a client reads (Content-Type, Retry-After, X-Parley-Session, X-Parley-Run) and
// the body, whole or every chunk of the stream. Normalized as the stream goldens are (ids,
// times), plus "created" (a Unix time). `go test ./cmd/parley -run TestOpenAIGolden -update`
// rewrites them.

var createdRE = regexp.MustCompile(`"created":\d+`)

// oaExchange sends one request and returns its transcript section pair.
func (s *goldenServer) oaExchange(t *testing.T, ctx context.Context, name, method, path, body string, hdr ...string) []section {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	reqText := method + " " + path + "\n"
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
		reqText += hdr[i] + ": " + hdr[i+1] + "\n"
	}
	if body != "" {
		reqText += "\n" + body + "\n"
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d\n", resp.StatusCode)
	var names []string
	for _, h := range []string{"Content-Type", "Retry-After", "X-Parley-Session", "X-Parley-Run"} {
		if resp.Header.Get(h) != "" {
			names = append(names, h)
		}
	}
	sort.Strings(names)
	for _, h := range names {
		fmt.Fprintf(&out, "%s: %s\n", h, resp.Header.Get(h))
	}
	out.WriteString("\n")
	out.Write(raw)
	return []section{{name + ": request", reqText}, {name + ": response", out.String()}}
}

// checkOpenAIGolden compares the sections with testdata/openai/<name>.txtar, or rewrites it.
func checkOpenAIGolden(t *testing.T, name, comment string, secs []section) {
	t.Helper()
	got := []byte(createdRE.ReplaceAllString(normalize(string(formatTxtar(comment, secs))), `"created":<time>`))
	path := filepath.Join("testdata", "openai", name+".txtar")
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
		t.Fatalf("%v (run go test ./cmd/parley -run TestOpenAIGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept a meant change)\n%s", path, lineDiff(string(want), string(got)))
	}
}

// upstreamSection is what the fake model received in its last request: the messages and tools,
// as a gateway request must pass them on.
func upstreamSection(t *testing.T, fake *llmtest.Server) section {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream received no request")
	}
	last := reqs[len(reqs)-1]
	b, _ := json.MarshalIndent(map[string]any{"messages": last.Messages, "tools": last.Tools, "tool_choice": last.ToolChoice}, "", "  ")
	return section{"upstream received", string(b) + "\n"}
}

func TestOpenAIGolden(t *testing.T) {
	s := startGoldenServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const intro = "Golden transcript of the OpenAI-compatible API (see cmd/parley/openai_golden_test.go:\n" +
		"ids and times normalized; -update rewrites it).\n"
	const model = "openai/gpt-4o-mini"
	ask := `{"model":"` + model + `","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 6*7?"}]`

	t.Run("stateless", func(t *testing.T) {
		var secs []section
		s.up.fake.Enqueue(toolTurns()...)
		secs = append(secs, s.oaExchange(t, ctx, "whole, with tool activity", "POST", "/v1/chat/completions",
			ask+`,"parley":{"tool_activity":true}}`)...)
		s.up.fake.Enqueue(toolTurns()...)
		secs = append(secs, s.oaExchange(t, ctx, "streamed, with usage and tool activity", "POST", "/v1/chat/completions",
			ask+`,"stream":true,"stream_options":{"include_usage":true},"parley":{"tool_activity":true}}`)...)
		s.up.fake.Enqueue(llmtest.Turn{Content: "Forty-two.", Usage: usage1})
		secs = append(secs, s.oaExchange(t, ctx, "streamed, no tools offered", "POST", "/v1/chat/completions",
			ask+`,"stream":true,"parley":{"tools":[]}}`)...)
		secs = append(secs, upstreamSection(t, s.up.fake))
		checkOpenAIGolden(t, "stateless", intro+"No tools in the request: Parley's calculator runs in Parley's loop; the caller sees the\n"+
			"tool activity it asked for. Then the same with parley.tools = [] (the model is offered none).\n", secs)
	})

	t.Run("gateway", func(t *testing.T) {
		var secs []section
		tools := `,"tools":[{"type":"function","function":{"name":"lookup","description":"Looks a city up.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
		q := `{"model":"` + model + `","messages":[{"role":"user","content":"Weather in Paris?"}]` + tools
		call := llmtest.Turn{Usage: usage1, ToolCalls: []parley.ToolCall{{ID: "call_c1", Type: "function",
			Function: parley.FunctionCall{Name: "lookup", Arguments: `{"city":"Paris"}`}}}}
		s.up.fake.Enqueue(call)
		secs = append(secs, s.oaExchange(t, ctx, "whole: the model's tool call", "POST", "/v1/chat/completions", q+`,"tool_choice":"auto"}`)...)
		secs = append(secs, upstreamSection(t, s.up.fake))
		s.up.fake.Enqueue(call)
		secs = append(secs, s.oaExchange(t, ctx, "streamed: the model's tool call", "POST", "/v1/chat/completions", q+`,"stream":true,"stream_options":{"include_usage":true}}`)...)
		s.up.fake.Enqueue(llmtest.Turn{Content: "Sunny, 21 °C in Paris.", Usage: usage1})
		secs = append(secs, s.oaExchange(t, ctx, "whole: the caller's result, the answer", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"Weather in Paris?"},`+
				`{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_c1","type":"function","function":{"name":"lookup","arguments":"{\"city\":\"Paris\"}"}}]},`+
				`{"role":"tool","tool_call_id":"call_c1","content":"sunny, 21 C"}]`+tools+`}`)...)
		secs = append(secs, upstreamSection(t, s.up.fake))
		// Neither a stateless nor a gateway request stored anything: no session exists.
		if n := s.sessionCount(t, ctx); n != 0 {
			t.Fatalf("stateless and gateway requests left %d sessions", n)
		}
		checkOpenAIGolden(t, "gateway", intro+"Tools in the request: the model's tool call goes back to the caller (finish_reason\n"+
			"tool_calls), whole and streamed; the caller sends the result and gets the answer. Nothing is stored.\n", secs)
	})

	t.Run("stateful", func(t *testing.T) {
		var secs []section
		sess := s.oaExchange(t, ctx, "a session", "POST", "/api/v1/sessions", `{"title":"OpenAI client"}`)
		secs = append(secs, sess...)
		var created struct{ ID string }
		body := sess[1].body[strings.Index(sess[1].body, "\n\n")+2:]
		if err := json.Unmarshal([]byte(body), &created); err != nil || created.ID == "" {
			t.Fatalf("session: %q", body)
		}
		if n := s.sessionCount(t, ctx); n != 1 {
			t.Fatalf("%d sessions, want the one just made", n)
		}
		s.up.fake.Enqueue(toolTurns()...)
		secs = append(secs, s.oaExchange(t, ctx, "a turn, streamed", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"What is 6*7?"}]}`, "X-Parley-Session", created.ID)...)
		s.up.fake.Enqueue(llmtest.Turn{Content: "It is 42 again.", Usage: usage1})
		secs = append(secs, s.oaExchange(t, ctx, "a second turn, whole, session in metadata", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"ignored: the history comes from the session"},{"role":"user","content":"And again?"}],"metadata":{"session_id":"`+created.ID+`"}}`)...)
		secs = append(secs, upstreamSection(t, s.up.fake))
		secs = append(secs, s.oaExchange(t, ctx, "the stored history", "GET", "/api/v1/sessions/"+created.ID+"/messages", "")...)
		checkOpenAIGolden(t, "stateful", intro+"X-Parley-Session (or metadata.session_id): the last user message is a turn of the\n"+
			"session; the model is sent the stored history; the turn is stored like any chat.\n", secs)
	})

	t.Run("errors", func(t *testing.T) {
		var secs []section
		s.up.fake.Enqueue(llmtest.Turn{Status: 429, RetryAfter: "7", ErrorMessage: "Rate limit reached for requests"})
		secs = append(secs, s.oaExchange(t, ctx, "the model's 429, gateway", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)...)
		s.up.fake.Enqueue(llmtest.Turn{Status: 500, ErrorMessage: "boom"})
		secs = append(secs, s.oaExchange(t, ctx, "the model's 500, stateless", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)...)
		sess := s.oaExchange(t, ctx, "a session", "POST", "/api/v1/sessions", `{}`)
		var created struct{ ID string }
		_ = json.Unmarshal([]byte(sess[1].body[strings.Index(sess[1].body, "\n\n")+2:]), &created)
		s.up.fake.Enqueue(llmtest.Turn{Status: 500, ErrorMessage: "boom"})
		secs = append(secs, s.oaExchange(t, ctx, "the model's 500, stateful, streamed", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "X-Parley-Session", created.ID)...)
		secs = append(secs, s.oaExchange(t, ctx, "a bad request", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"hi"},{"role":"tool","content":"x"}]}`)...)
		secs = append(secs, s.oaExchange(t, ctx, "stream_options without stream", "POST", "/v1/chat/completions",
			`{"model":"`+model+`","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)...)
		checkOpenAIGolden(t, "errors", intro+"Errors in OpenAI's shape: the model's 429 (with Retry-After) and 500, before and\n"+
			"inside a stream; bad requests (400 with param).\n", secs)
	})

	t.Run("models", func(t *testing.T) {
		checkOpenAIGolden(t, "models", intro+"GET /v1/models: the configured provider/model names.\n",
			s.oaExchange(t, ctx, "the models", "GET", "/v1/models", ""))
	})
}

// sessionCount is the number of sessions of the (single) user.
func (s *goldenServer) sessionCount(t *testing.T, ctx context.Context) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/api/v1/sessions?limit=100", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return len(out.Sessions)
}
