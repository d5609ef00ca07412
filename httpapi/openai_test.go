package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/httpapi/openaiapi"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/runs"
)

// oaError decodes an error answer in OpenAI's shape, failing the test on any other shape.
func oaError(t *testing.T, raw string) (message, typ, code string, param any) {
	t.Helper()
	var out struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil || out.Error == nil {
		t.Fatalf("not an OpenAI error: %q", raw)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := out.Error[k]; !ok {
			t.Fatalf("error without %q: %s", k, raw)
		}
	}
	message, _ = out.Error["message"].(string)
	typ, _ = out.Error["type"].(string)
	code, _ = out.Error["code"].(string)
	return message, typ, code, out.Error["param"]
}

// TestOpenAIPipelineErrors: every step of the pipeline answers the /v1 routes in OpenAI's error
// shape, with the native API's statuses, and Retry-After on 429 and 503.
func TestOpenAIPipelineErrors(t *testing.T) {
	e := newEnvWith(t, runs.Options{MaxActive: 1}, func(d *httpapi.Deps) {
		d.Limiter = limit.NewMemory()
		d.UserRate = limit.Rate{Count: 100, Per: time.Hour, Burst: 100}
		d.GuestRate = limit.Rate{Count: 2, Per: time.Hour, Burst: 2}
		d.RealIPHeader = "X-Real-IP"
	})
	alice := "Bearer " + e.key(t, "alice")
	chatBody := `{"model":"mock","messages":[{"role":"user","content":"hi"}],"metadata":{"session_id":"` + e.newSession(t, "alice") + `"}}`
	ct := "application/json"
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		typ, code, reason, param string
		header                   string
	}{
		{"no key", "POST", "/v1/chat/completions", `{"model":`, []string{"X-Real-IP", "192.0.2.1"}, 401, "invalid_request_error", "invalid_api_key", "authentication required", "", "Www-Authenticate"},
		{"a bad key", "GET", "/v1/models", "", []string{"X-Real-IP", "192.0.2.1", "Authorization", "Bearer pk_nope"}, 401, "invalid_request_error", "invalid_api_key", "invalid, revoked or expired", "", ""},
		{"past the guest rate", "GET", "/v1/models", "", []string{"X-Real-IP", "192.0.2.1"}, 429, "requests", "rate_limit_exceeded", "rate limit of guests", "", "Retry-After"},
		{"bad JSON", "POST", "/v1/chat/completions", `{"model":`, []string{"Authorization", alice, "Content-Type", ct}, 400, "invalid_request_error", "invalid_value", "truncated JSON", "", ""},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"mock","messages":[]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "messages: must hold at least one message", "messages", ""},
		{"an unknown field", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"hi"}],"logit_bias":{}}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", `unknown field "logit_bias"`, "logit_bias", ""},
		{"an unknown model", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "unknown model", "model", ""},
		{"a bad role", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"wizard","content":"hi"}]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "messages[0].role: must be", "messages[0].role", ""},
		{"a NUL in a message", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"a\u0000b"}]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "messages[0].content", "messages[0].content", ""},
		{"a message over the limit", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"` + strings.Repeat("x", 51) + `"}]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "51 characters, the limit is 50", "messages[0].content", ""},
		{"an unknown Parley tool", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"hi"}],"parley":{"tools":["rm"]}}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", `parley.tools: unknown tool "rm"`, "parley.tools", ""},
		{"a tool without a name", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{}}]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "tools[0].function.name: required", "tools[0].function.name", ""},
		{"n of 2", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"hi"}],"n":2}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "n: only 1", "n", ""},
		{"a body over the limit", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "larger than 4096 bytes", "", ""},
		{"session and client tools", "POST", "/v1/chat/completions", strings.Replace(chatBody, `"metadata"`, `"tools":[{"type":"function","function":{"name":"f"}}],"metadata"`, 1), []string{"Authorization", alice}, 400, "invalid_request_error", "invalid_value", "client-side tools are for requests without a session", "tools", ""},
		{"an unknown session", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"hi"}]}`, []string{"Authorization", alice, "X-Parley-Session", "01a20c00-54bf-765c-ae10-6aa60fb30b61"}, 404, "invalid_request_error", "not_found", "not found", "", ""},
		{"a session id that is no id", "POST", "/v1/chat/completions", `{"model":"mock","messages":[{"role":"user","content":"hi"}]}`, []string{"Authorization", alice, "X-Parley-Session", "../../etc"}, 404, "invalid_request_error", "not_found", "not found", "", ""},
		{"an unknown route", "GET", "/v1/embeddings", "", nil, 404, "invalid_request_error", "not_found", "no route", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, raw := e.raw(t, c.method, c.path, c.body, c.hdr...)
			if resp.StatusCode != c.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, raw, c.status)
			}
			msg, typ, code, param := oaError(t, raw)
			if typ != c.typ || code != c.code || !strings.Contains(msg, c.reason) {
				t.Fatalf("type %q code %q message %q; want %q %q containing %q", typ, code, msg, c.typ, c.code, c.reason)
			}
			if c.param != "" && param != c.param {
				t.Fatalf("param %v, want %q", param, c.param)
			}
			if c.header != "" && resp.Header.Get(c.header) == "" {
				t.Fatalf("no %s header", c.header)
			}
		})
	}

	// The run budget (1) spent: a chat is 503 with Retry-After, in OpenAI's shape.
	e.blockRuns(t)
	hold, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(hold, "POST", e.url+"/api/v1/chat/stream", strings.NewReader(`{"message":"hold"}`))
	req.Header.Set("Authorization", "Bearer "+e.key(t, "dave"))
	held, err := http.DefaultClient.Do(req)
	if err != nil || held.StatusCode != 200 {
		t.Fatalf("holding run: %v %v", held, err)
	}
	defer held.Body.Close()
	waitActive(t, e, 1)
	resp, raw := e.raw(t, "POST", "/v1/chat/completions", chatBody, "Authorization", alice, "Content-Type", ct)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the run budget: %d %s (Retry-After %q)", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	if _, typ, _, _ := oaError(t, raw); typ != "server_error" {
		t.Fatalf("503 type %q", typ)
	}
}

// waitActive polls until n runs are active.
func waitActive(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.runs.ActiveCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs active, want %d", e.runs.ActiveCount(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOpenAIStatefulOnAnotherUsersSession: a stateful request on alice's session, named in the
// header or in metadata, is 403 for bob, stores nothing and starts nothing; alice's own request
// is a turn of her session, stored and answered.
func TestOpenAIStatefulOnAnotherUsersSession(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	body := `{"model":"mock","messages":[{"role":"user","content":"mine now"}]}`
	bob := "Bearer " + e.key(t, "bob")
	for _, hdr := range [][]string{
		{"X-Parley-Session", sid},
		{"X-Parley-Session", strings.ToUpper(sid)}, // not the id: not found
	} {
		resp, raw := e.raw(t, "POST", "/v1/chat/completions", body, "Authorization", bob, "Content-Type", "application/json", hdr[0], hdr[1])
		if resp.StatusCode != 403 && resp.StatusCode != 404 {
			t.Fatalf("bob on alice's session (%s): %d %s", hdr[1], resp.StatusCode, raw)
		}
		oaError(t, raw)
	}
	resp, raw := e.raw(t, "POST", "/v1/chat/completions", body, "Authorization", bob, "Content-Type", "application/json", "X-Parley-Session", sid)
	if resp.StatusCode != 403 {
		t.Fatalf("bob on alice's session: %d %s", resp.StatusCode, raw)
	}
	if h, _ := e.store.History(ctx, sid); len(h) != 0 {
		t.Fatalf("bob's request stored %d messages in alice's session", len(h))
	}
	if _, ok := e.runs.Active(sid); ok {
		t.Fatal("bob's request started a run on alice's session")
	}
	// The header and the body must agree.
	resp, raw = e.raw(t, "POST", "/v1/chat/completions", strings.Replace(body, `]}`, `],"metadata":{"session_id":"`+e.newSession(t, "alice")+`"}}`, 1),
		"Authorization", "Bearer "+e.key(t, "alice"), "Content-Type", "application/json", "X-Parley-Session", sid)
	if resp.StatusCode != 400 {
		t.Fatalf("header and metadata disagree: %d %s", resp.StatusCode, raw)
	}

	// Alice's own: a turn of her session, streamed.
	resp, raw = e.raw(t, "POST", "/v1/chat/completions", strings.Replace(body, `"messages"`, `"stream":true,"messages"`, 1),
		"Authorization", "Bearer "+e.key(t, "alice"), "Content-Type", "application/json", "X-Parley-Session", sid)
	if resp.StatusCode != 200 || resp.Header.Get("X-Parley-Session") != sid || resp.Header.Get("X-Parley-Run") == "" {
		t.Fatalf("alice's stateful stream: %d %v %s", resp.StatusCode, resp.Header, raw)
	}
	var text strings.Builder
	sc := bufio.NewScanner(strings.NewReader(raw))
	var last string
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		last = line
		if line == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("bad chunk %q", line)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if text.String() != "Hello there" || last != "[DONE]" {
		t.Fatalf("streamed %q, last %q:\n%s", text.String(), last, raw)
	}
	h, _ := e.store.History(ctx, sid)
	if len(h) != 2 || h[0].Content.String() != "mine now" || h[1].Content.String() != "Hello there" {
		t.Fatalf("alice's session after her turn: %+v", h)
	}
}

// TestOpenAIStatefulClientLeaving: a client that leaves a stateful request mid-answer does not
// stop the turn: the run goes on and its answer is stored, as with the native chat.
func TestOpenAIStatefulClientLeaving(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	release := make(chan struct{})
	started := make(chan struct{})
	finish := answer(e.store, "the answer")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return finish(ctx, in, emit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"mock","stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+e.key(t, "alice"))
	req.Header.Set("X-Parley-Session", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stateful stream: %v %v", resp, err)
	}
	<-started
	// The first chunk (the assistant role) is out: the client leaves.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"role":"assistant"`) {
		t.Fatalf("first line %q: %v", line, err)
	}
	cancel()
	resp.Body.Close()
	close(release)

	deadline := time.Now().Add(20 * time.Second)
	for {
		msgs, _ := e.store.History(context.Background(), sid)
		if len(msgs) == 2 && msgs[1].Content.String() == "the answer" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn's answer was not stored after the client left: %+v", msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heldProvider is a model whose calls wait until release is closed, then answer "ok".
type heldProvider struct {
	entered chan struct{}
	release chan struct{}
}

func (p *heldProvider) Stream(ctx context.Context, req *parley.ChatRequest) (parley.Stream, error) {
	p.entered <- struct{}{}
	select {
	case <-p.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &oneChunk{}, nil
}

type oneChunk struct{ n int }

func (s *oneChunk) Next() (parley.StreamEvent, error) {
	s.n++
	switch s.n {
	case 1:
		return parley.StreamEvent{Type: parley.StreamContent, Content: "ok"}, nil
	case 2:
		return parley.StreamEvent{Type: parley.StreamFinish, FinishReason: "stop"}, nil
	}
	return parley.StreamEvent{}, io.EOF
}

func (s *oneChunk) Close() error { return nil }

// TestOpenAIInlineBound: stateless and gateway requests run in their HTTP request, outside the
// run manager, and are bounded on their own: past MaxInline at once, 503 with Retry-After.
func TestOpenAIInlineBound(t *testing.T) {
	prov := &heldProvider{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, func(d *httpapi.Deps) {
		d.OpenAI = &openaiapi.Backend{MaxInline: 1, Resolve: func(string) (parley.Provider, string, error) { return prov, "m", nil }}
	})
	body := `{"model":"mock","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	first := make(chan string, 1)
	go func() {
		_, raw := e.raw(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+e.key(t, "alice"), "Content-Type", "application/json")
		first <- raw
	}()
	<-prov.entered
	resp, raw := e.raw(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+e.key(t, "alice"), "Content-Type", "application/json")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the bound: %d %s (Retry-After %q)", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	if _, typ, code, _ := oaError(t, raw); typ != "server_error" || code != "overloaded" {
		t.Fatalf("503: %s", raw)
	}
	close(prov.release)
	if raw := <-first; !strings.Contains(raw, `"content":"ok"`) || !strings.Contains(raw, `"finish_reason":"stop"`) {
		t.Fatalf("the first request: %s", raw)
	}
	// The slot is free again.
	go func() { <-prov.entered }()
	if resp, raw := e.raw(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+e.key(t, "alice"), "Content-Type", "application/json"); resp.StatusCode != 200 {
		t.Fatalf("after the first ended: %d %s", resp.StatusCode, raw)
	}
}

// TestOpenAIStatefulHeartbeat: a stateful stream whose run is quiet gets keep-alive comments (an
// SSE comment line, which the SDKs skip), then the answer.
func TestOpenAIStatefulHeartbeat(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.Heartbeat = 20 * time.Millisecond })
	sid := e.newSession(t, "alice")
	release := make(chan struct{})
	finish := answer(e.store, "the answer")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return finish(ctx, in, emit)
	}
	req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"mock","stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+e.key(t, "alice"))
	req.Header.Set("X-Parley-Session", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stateful stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before a keep-alive: %v", err)
		}
		if line == ": ping\n" {
			break
		}
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"content":"the a"`) || !strings.Contains(string(rest), `"content":"nswer"`) {
		t.Fatalf("no answer after the keep-alives: %s", rest)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream did not end with [DONE]: %s", rest)
	}
}

// TestOpenAIStatelessHeartbeat: a stateless stream whose model is quiet gets keep-alive comments,
// then the answer; the loop runs on the request's messages and stores nothing.
func TestOpenAIStatelessHeartbeat(t *testing.T) {
	prov := &heldProvider{entered: make(chan struct{}, 1), release: make(chan struct{})}
	ag := agent.New(agent.Config{Resolve: func(string) (parley.Provider, string, error) { return prov, "m", nil }})
	e := newEnv(t, func(d *httpapi.Deps) {
		d.Heartbeat = 20 * time.Millisecond
		d.OpenAI = &openaiapi.Backend{Agent: ag}
	})
	req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"mock","stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+e.key(t, "alice"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stateless stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	<-prov.entered
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before a keep-alive: %v", err)
		}
		if line == ": ping\n" {
			break
		}
	}
	close(prov.release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"delta":{"content":"ok"}`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("after the keep-alives: %s", rest)
	}
	if list, _, _ := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 5}); len(list) != 0 {
		t.Fatalf("a stateless request left %d sessions", len(list))
	}
}
