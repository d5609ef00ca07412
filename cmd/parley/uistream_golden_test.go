package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// TestUIStreamGolden pins the AI SDK UI message stream (POST /api/v1/ui/chat) byte for byte, with
// the chat's stored history as GET /api/v1/ui/chat/{id}/messages gives it, for scripted chats
// through a real server: a plain answer, reasoning with a tool call, a tool call that fails, and
// a model error. The files are testdata/stream/ui-*.txtar; -update rewrites them.
func TestUIStreamGolden(t *testing.T) {
	s := startGoldenServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const intro = "Golden transcript of Parley's AI SDK UI message stream (see cmd/parley/uistream_golden_test.go:\n" +
		"ids and timestamps normalized; -update rewrites it).\n"
	chat := func(t *testing.T, id, text string) (stream, messages string) {
		t.Helper()
		body := `{"id":"` + id + `","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"` + text + `"}]}],"trigger":"submit-message"}`
		resp, raw := s.uiDo(t, ctx, "POST", "/api/v1/ui/chat", body)
		if resp.StatusCode != 200 || resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("POST /api/v1/ui/chat: %d %v %s", resp.StatusCode, resp.Header, raw)
		}
		if !strings.HasSuffix(raw, "data: [DONE]\n\n") {
			t.Fatalf("the stream does not end with [DONE]:\n%s", raw)
		}
		resp, msgs := s.uiDo(t, ctx, "GET", "/api/v1/ui/chat/"+id+"/messages", "")
		if resp.StatusCode != 200 {
			t.Fatalf("GET messages: %d %s", resp.StatusCode, msgs)
		}
		return raw, msgs
	}

	t.Run("text", func(t *testing.T) {
		s.up.fake.Enqueue(llmtest.Turn{Content: "Hello there, how can I help?", Usage: usage1})
		stream, msgs := chat(t, "chatText01", "Hi")
		checkGolden(t, "ui-text", intro+"A plain answer.\n", section{"stream", stream}, section{"messages", msgs})
	})
	t.Run("reasoning-tool", func(t *testing.T) {
		s.up.fake.Enqueue(toolTurns()...)
		stream, msgs := chat(t, "chatTool01", "What is 6*7?")
		checkGolden(t, "ui-tool", intro+"Reasoning and a calculator call, then the answer: two steps.\n", section{"stream", stream}, section{"messages", msgs})
	})
	t.Run("tool-error", func(t *testing.T) {
		s.up.fake.Enqueue(
			llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_bad", Type: "function", Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"2+"}`}}}, Usage: usage1},
			llmtest.Turn{Content: "That expression is incomplete.", Usage: usage1},
		)
		stream, msgs := chat(t, "chatToolErr01", "What is 2+?")
		checkGolden(t, "ui-tool-error", intro+"A tool call that fails: tool-output-error, then the answer.\n", section{"stream", stream}, section{"messages", msgs})
	})
	t.Run("error", func(t *testing.T) {
		s.up.fake.Enqueue(llmtest.Turn{Status: 400, ErrorMessage: "This model's maximum context length is exceeded."})
		stream, msgs := chat(t, "chatErr01", "Tell me everything")
		checkGolden(t, "ui-error", intro+"The model call fails: an error chunk, then finish.\n", section{"stream", stream}, section{"messages", msgs})
	})
}

// uiDo sends a request to the golden server and reads the whole answer.
func (s *goldenServer) uiDo(t *testing.T, ctx context.Context, method, path, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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
	return resp, string(raw)
}

// TestUIStreamApprovalGolden pins tool approval in the UI message stream: the calculator asks
// (--tool-policy), so the first response ends with tool-approval-request and finish while the
// run waits; useChat's next request (the assistant message with the tool part answered, as
// addToolApprovalResponse leaves it) gets the rest of the same message. Once approved, once
// denied (tool-output-denied; the model reads the refusal).
func TestUIStreamApprovalGolden(t *testing.T) {
	s := startGoldenServer(t, "--tool-policy", "calculator=ask")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const intro = "Golden transcript of Parley's AI SDK UI message stream (see cmd/parley/uistream_golden_test.go:\n" +
		"ids and timestamps normalized; -update rewrites it).\n"
	for _, c := range []struct {
		name, chat string
		approved   bool
		reason     string
		answer     string
	}{
		{"ui-approval", "chatApprove01", true, "", "6*7 = 42."},
		{"ui-approval-denied", "chatDeny01", false, "not now", "I did not compute it."},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.up.fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_ask", Type: "function",
				Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}, Usage: usage1},
				llmtest.Turn{Content: c.answer, Usage: usage1})
			body := `{"id":"` + c.chat + `","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"What is 6*7?"}]}],"trigger":"submit-message"}`
			resp, first := s.uiDo(t, ctx, "POST", "/api/v1/ui/chat", body)
			if resp.StatusCode != 200 || !strings.HasSuffix(first, "data: [DONE]\n\n") || !strings.Contains(first, `"tool-approval-request"`) {
				t.Fatalf("first response: %d\n%s", resp.StatusCode, first)
			}
			msgID := regexp.MustCompile(`"messageId":"([^"]+)"`).FindStringSubmatch(first)[1]
			approved, _ := json.Marshal(c.approved)
			answer := `{"id":"` + c.chat + `","trigger":"submit-message","messageId":"` + msgID + `","messages":[` +
				`{"id":"u1","role":"user","parts":[{"type":"text","text":"What is 6*7?"}]},` +
				`{"id":"` + msgID + `","role":"assistant","parts":[{"type":"step-start"},{"type":"tool-calculator","toolCallId":"call_ask",` +
				`"state":"approval-responded","input":{"expression":"6*7"},"providerExecuted":true,` +
				`"approval":{"id":"call_ask","approved":` + string(approved) + `,"reason":"` + c.reason + `"}}]}]}`
			resp, second := s.uiDo(t, ctx, "POST", "/api/v1/ui/chat", answer)
			if resp.StatusCode != 200 || !strings.HasSuffix(second, "data: [DONE]\n\n") {
				t.Fatalf("second response: %d\n%s", resp.StatusCode, second)
			}
			// Answering again: the call is decided, the run over.
			if resp, again := s.uiDo(t, ctx, "POST", "/api/v1/ui/chat", answer); resp.StatusCode != 409 {
				t.Fatalf("answering again: %d %s", resp.StatusCode, again)
			}
			_, msgs := s.uiDo(t, ctx, "GET", "/api/v1/ui/chat/"+c.chat+"/messages", "")
			checkGolden(t, c.name, intro+"A call that asks for approval, answered in useChat's next request ("+map[bool]string{true: "approved", false: "denied"}[c.approved]+").\n",
				section{"first", first}, section{"answer", second}, section{"messages", msgs})
		})
	}
}
