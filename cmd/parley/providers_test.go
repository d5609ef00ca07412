package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// fourProviders writes a config file whose four providers, one per wire format, all point at
// one fake upstream that speaks every vendor's format and checks each request as the vendor does.
func fourProviders(t *testing.T, fakeURL string) string {
	t.Helper()
	cfg := `providers:
  - name: oa
    kind: openai
    base_url: ` + fakeURL + `/v1
    api_key: sk-test-openai
    models: [gpt-4o]
  - name: claude
    kind: anthropic
    base_url: ` + fakeURL + `
    api_key_env: TEST_ANTHROPIC_KEY
    models: [claude-sonnet-4-5]
    thinking_budget: 2048
  - name: gem
    kind: gemini
    base_url: ` + fakeURL + `/v1beta
    api_key: test-gemini
    models: [gemini-3-pro-preview]
  - name: local
    kind: ollama
    base_url: ` + fakeURL + `
prices:
  claude/claude-sonnet-4-5: {input: 3, cached_input: 0.3, output: 15}
`
	path := filepath.Join(t.TempDir(), "parley.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// chatTurn streams one chat and returns the session, the final answer, and the error events.
func chatTurn(t *testing.T, url, session, model, message string) (string, string, []parley.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := map[string]any{"message": message, "model": model}
	if session != "" {
		body["session_id"] = session
	}
	resp := postStream(t, ctx, url, body)
	defer resp.Body.Close()
	var answer string
	var errs []parley.Event
	finish := ""
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		switch ev.Data.Type {
		case parley.EventStart:
			session = ev.Data.SessionID
		case parley.EventRecord:
			if m := ev.Data.Message; m.Role == parley.RoleAssistant && len(m.ToolCalls) == 0 {
				answer = m.Content.String()
			}
		case parley.EventError:
			errs = append(errs, ev.Data)
		case parley.EventDone:
			finish = ev.Data.FinishReason
			return false
		}
		return true
	})
	if finish == "" {
		t.Fatalf("%s: the stream ended without a done event", model)
	}
	return session, answer, errs
}

// TestProviderSwitchMidSession holds one conversation across four providers, each turn with tool
// calls: OpenAI, then Anthropic (its request carries OpenAI's calls as tool_use/tool_result
// blocks, and its own signed thinking back within its tool loop), then Gemini 3 (which refuses a
// call of the current turn without its thought signature), then Ollama's native API. The fake
// upstream answers 400 to any request its vendor would refuse, so every turn ending without an
// error shows the history was valid for that provider.
func TestProviderSwitchMidSession(t *testing.T) {
	fake := llmtest.NewServer(llmtest.WithChunkSize(5))
	hs := httptest.NewServer(fake)
	defer hs.Close()
	url := startInProcess(t, map[string]string{"TEST_ANTHROPIC_KEY": "sk-ant-test"}, "--config", fourProviders(t, hs.URL))

	turns := []struct{ model, message, want string }{
		{"oa/gpt-4o", "What is 12*(3+4)?", "84"},
		{"claude/claude-sonnet-4-5", "And 6*7?", "42"},
		{"gem/gemini-3-pro-preview", "What time is it, and what is 2+2?", "= 4"},
		{"local/qwen3", "Last one: 10/4?", "2.5"},
	}
	session := ""
	for _, tt := range turns {
		var answer string
		var errs []parley.Event
		session, answer, errs = chatTurn(t, url, session, tt.model, tt.message)
		if len(errs) > 0 {
			t.Fatalf("%s: error event %+v", tt.model, *errs[0].Error)
		}
		if !strings.Contains(answer, tt.want) {
			t.Fatalf("%s answered %q, want it to contain %q", tt.model, answer, tt.want)
		}
	}

	// Each provider was reached through its own wire format, two model calls per turn.
	byModel := map[string]int{}
	for _, r := range fake.Requests() {
		byModel[r.Model]++
	}
	for _, m := range []string{"gpt-4o", "claude-sonnet-4-5", "gemini-3-pro-preview", "qwen3"} {
		if byModel[m] != 2 {
			t.Errorf("model %s got %d requests, want 2: %v", m, byModel[m], byModel)
		}
	}

	msgs := validHistory(t, url, session)
	var models []string
	var signedThinking, thoughtSignature, costed bool
	for _, m := range msgs {
		if m.Role != parley.RoleAssistant {
			continue
		}
		if len(models) == 0 || models[len(models)-1] != m.Model {
			models = append(models, m.Model)
		}
		if m.Model == "claude/claude-sonnet-4-5" && len(m.ToolCalls) > 0 && len(m.ThinkingBlocks) > 0 && m.ThinkingBlocks[0].Signature != "" {
			signedThinking = true
		}
		if m.Model == "gem/gemini-3-pro-preview" && len(m.ToolCalls) > 0 && m.ToolCalls[0].ThoughtSignature() != "" {
			thoughtSignature = true
			if m.ToolCalls[0].ID == "" || m.ToolCalls[1].ID == "" || m.ToolCalls[0].ID == m.ToolCalls[1].ID {
				t.Errorf("Gemini's calls (which come without ids) were not given distinct ids: %+v", m.ToolCalls)
			}
		}
		if m.Usage != nil && m.Usage.Cost > 0 {
			if !strings.HasPrefix(m.Model, "claude/") {
				t.Errorf("%s has a cost but no price", m.Model)
			}
			costed = true
		}
	}
	if strings.Join(models, " ") != "oa/gpt-4o claude/claude-sonnet-4-5 gem/gemini-3-pro-preview local/qwen3" {
		t.Errorf("answering models in order: %v", models)
	}
	if !signedThinking || !thoughtSignature || !costed {
		t.Errorf("signed thinking kept: %v; Gemini thought signature kept: %v; cost recorded: %v", signedThinking, thoughtSignature, costed)
	}
}

// TestTruncatedUpstreamStream: a provider stream cut after tokens reached the client ends the run
// with an error event; the stored history stays valid, and the session goes on.
func TestTruncatedUpstreamStream(t *testing.T) {
	fake := llmtest.NewServer(llmtest.WithChunkSize(3))
	hs := httptest.NewServer(fake)
	defer hs.Close()
	url := startInProcess(t, map[string]string{"TEST_ANTHROPIC_KEY": "k"}, "--config", fourProviders(t, hs.URL))
	fake.Enqueue(llmtest.Turn{Content: "This answer will be cut in the middle.", CutAfter: 6})
	session, _, errs := chatTurn(t, url, "", "claude/claude-sonnet-4-5", "Tell me a story.")
	if len(errs) != 1 || errs[0].Error.Code != parley.ECUpstream {
		t.Fatalf("error events %+v, want one upstream error", errs)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("%d upstream requests: a stream cut after its first tokens was retried", n)
	}
	_, answer, errs := chatTurn(t, url, session, "claude/claude-sonnet-4-5", "What is 1+1?")
	if len(errs) > 0 || !strings.Contains(answer, "= 2") {
		t.Fatalf("next turn: %q %+v", answer, errs)
	}
	validHistory(t, url, session)
}

// TestProviderConfigErrors: a wrong providers section stops serve at start with a reason.
func TestProviderConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ file, want string }{
		{"providers:\n  - name: x\n    kind: cohere\n", `kind must be openai, anthropic, gemini or ollama, not "cohere"`},
		{"providers:\n  - name: x\n    kind: anthropic\n    api_key_env: NOT_SET_ANYWHERE\n    models: [m]\n", "NOT_SET_ANYWHERE that api_key_env names is empty"},
		{"providers:\n  - name: x\n    kind: openai\n    modles: [m]\n", "field modles not found"},
		{"providers:\n  - name: x\n    kind: openai\n", "no default model"},
		{"providers:\n  - name: x\n    kind: openai\n    models: [m]\nfallbacks:\n  x/m: [y/n]\n", `fallback "y/n"`},
		{"providers:\n  - name: a/b\n    kind: openai\n    models: [m]\n", "without '/'"},
		{"model: mock/other\n", "needs a provider"},
	} {
		f := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(f, []byte(tt.file), 0o600); err != nil {
			t.Fatal(err)
		}
		err := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "p.db"), "--config", f},
			func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to mention %q", tt.file, err, tt.want)
		}
	}
}

// TestModelsFromConventionalVariables: the vendors' own variables configure their providers, the
// first one giving the default model, and GET /api/v1/models lists them with their breakers.
func TestModelsFromConventionalVariables(t *testing.T) {
	url := startInProcess(t, map[string]string{"ANTHROPIC_API_KEY": "sk-ant-x", "GEMINI_API_KEY": "g-x"})
	resp, err := http.Get(url + "/api/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Models []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Models) != 3 || out.Models[0]["id"] != "anthropic/claude-sonnet-4-5" || out.Models[0]["default"] != true ||
		out.Models[0]["breaker"] != "closed" || out.Models[2]["id"] != "gemini/*" {
		t.Fatalf("models %v", out.Models)
	}
}

// validHistory reads a session's stored messages and checks their OpenAI view is a valid history.
func validHistory(t *testing.T, url, session string) []parley.Message {
	t.Helper()
	msgs := getMessages(t, url, session)
	view := make([]parley.Message, len(msgs))
	for i, m := range msgs {
		view[i] = m.OpenAI()
	}
	if err := parley.CheckHistory(view); err != nil {
		t.Fatalf("stored history: %v", err)
	}
	return msgs
}
