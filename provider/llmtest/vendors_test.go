package llmtest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/anthropic"
	"github.com/parleyhq/parley/provider/gemini"
	"github.com/parleyhq/parley/provider/ollama"
)

// post sends a raw request body to the fake and returns the status and body.
func post(t *testing.T, url, path string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFakeRefusesWhatTheVendorRefuses: the fake checks requests as each API does, so that a test
// passing against it means the request would pass the vendor's own checks.
func TestFakeRefusesWhatTheVendorRefuses(t *testing.T) {
	hs := httptest.NewServer(NewServer())
	defer hs.Close()
	av := map[string]string{"anthropic-version": "2023-06-01"}
	for _, tt := range []struct {
		name, path string
		header     map[string]string
		body, want string
	}{
		{"anthropic without version", "/v1/messages", nil, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version"},
		{"anthropic without max_tokens", "/v1/messages", av, `{"model":"c","messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{"anthropic roles not alternating", "/v1/messages", av, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, "alternate"},
		{"anthropic orphan tool_result", "/v1/messages", av, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]}`, "tool_use_id"},
		{"anthropic unanswered tool_use", "/v1/messages", av, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":"b"}]}`, "tool_result"},
		{"anthropic text before tool_result", "/v1/messages", av, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"toolu_1"}]}]}`, "first"},
		{"anthropic empty text", "/v1/messages", av, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "non-empty"},
		{"anthropic thinking loop without thinking", "/v1/messages", av, `{"model":"c","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"r"}]}]}`, "thinking"},
		{"anthropic forged signature", "/v1/messages", av, `{"model":"c","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"forged"},{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"r"}]}]}`, "signature"},
		{"gemini bad role", "/v1beta/models/gemini-2.5-flash:generateContent", nil, `{"contents":[{"role":"assistant","parts":[{"text":"a"}]}]}`, "valid role"},
		{"gemini missing function response", "/v1beta/models/gemini-2.5-flash:generateContent", nil, `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}},{"functionCall":{"name":"g","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`, "number of function response parts"},
		{"gemini 3 call without signature", "/v1beta/models/gemini-3-pro-preview:generateContent", nil, `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`, "thought_signature"},
		{"gemini stream without alt=sse", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", nil, `{"contents":[{"role":"user","parts":[{"text":"a"}]}]}`, "alt=sse"},
		{"ollama arguments not an object", "/api/chat", nil, `{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`, "object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, hs.URL, tt.path, tt.header, tt.body)
			if status != 400 || !strings.Contains(body, tt.want) {
				t.Fatalf("%d %s; want 400 mentioning %q", status, body, tt.want)
			}
		})
	}
}

// TestVendorErrorsReachTheAdapters: a scripted failure comes in each vendor's error shape, and
// each adapter turns it into a StatusError with the status, Retry-After and the vendor's type.
func TestVendorErrorsReachTheAdapters(t *testing.T) {
	fake := NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	req := &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}}}
	for _, tt := range []struct {
		name, key string
		p         parley.Provider
		status    int
		typ       string
	}{
		{"anthropic", "sk-ant-secret", anthropic.New(anthropic.Config{BaseURL: hs.URL, APIKey: "sk-ant-secret"}), 529, "overloaded_error"},
		{"gemini", "g-secret", gemini.New(gemini.Config{BaseURL: hs.URL + "/v1beta", APIKey: "g-secret"}), 429, "RESOURCE_EXHAUSTED"},
		{"ollama", "ol-secret", ollama.New(ollama.Config{BaseURL: hs.URL, APIKey: "ol-secret"}), 500, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake.Enqueue(Turn{Status: tt.status, RetryAfter: "3", ErrorMessage: "busy, key " + tt.key})
			_, err := tt.p.Stream(context.Background(), req)
			var se *parley.StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status || se.Type != tt.typ || se.RetryAfter.Seconds() != 3 {
				t.Fatalf("err %v (%+v)", err, se)
			}
			if strings.Contains(se.Message, tt.key) || !strings.Contains(se.Message, "[redacted]") {
				t.Fatalf("the API key reached the error: %q", se.Message)
			}
		})
	}
}

// TestVendorStreamsThroughTheAdapters: each wire's streamed answer, read by its adapter, gives the
// scripted text, reasoning and tool calls back.
func TestVendorStreamsThroughTheAdapters(t *testing.T) {
	fake := NewServer(WithChunkSize(2))
	hs := httptest.NewServer(fake)
	defer hs.Close()
	req := &parley.ChatRequest{Model: "m", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}}}
	turn := Turn{Content: "Grüße, 世界", Reasoning: "think", ToolCalls: []parley.ToolCall{
		{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: `{"a":1}`}},
		{ID: "call_2", Type: "function", Function: parley.FunctionCall{Name: "g", Arguments: `{}`}}}}
	for name, p := range map[string]parley.Provider{
		"anthropic": anthropic.New(anthropic.Config{BaseURL: hs.URL}),
		"gemini":    gemini.New(gemini.Config{BaseURL: hs.URL + "/v1beta"}),
		"ollama":    ollama.New(ollama.Config{BaseURL: hs.URL}),
	} {
		t.Run(name, func(t *testing.T) {
			fake.Enqueue(turn)
			s, err := p.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var b parley.ResponseBuilder
			for {
				ev, err := s.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				b.Add(ev)
			}
			r := b.Response()
			if r.Content != turn.Content || r.Reasoning != "think" || len(r.ToolCalls) != 2 || r.FinishReason != "tool_calls" || r.Usage == nil {
				t.Fatalf("response %+v", r)
			}
			if r.ToolCalls[0].Function.Name != "f" || r.ToolCalls[0].Function.Arguments != `{"a":1}` || r.ToolCalls[1].Function.Name != "g" {
				t.Fatalf("calls %+v", r.ToolCalls)
			}
		})
	}
}
