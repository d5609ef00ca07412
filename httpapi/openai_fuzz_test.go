package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/parleyhq/parley/httpapi/openaiapi"
)

// FuzzOpenAIChatBodies feeds any bytes as the body of POST /v1/chat/completions through the
// pipeline's body step and the request checks: the answer is 200 or a 400 in OpenAI's error
// shape, never a panic or another status.
func FuzzOpenAIChatBodies(f *testing.F) {
	for _, s := range []string{
		`{"model":"mock","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"mock","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"mock","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto"}`,
		`{"model":"mock","messages":[{"role":"developer","content":"x"}],"parley":{"tools":[],"tool_activity":true,"session_id":"s"},"metadata":{"session_id":"s"}}`,
		`{"messages":[{"role":"user"}],"n":2,"temperature":3}`, `{"tool_choice":{"type":"function"}}`, ``, `{`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	s.Auth = nil
	oa := s.openAI()
	h := s.pipe(openAIPolicy(policy{body: jsonBody(false, oa.Check)}), ok200)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		if w.Code == 200 {
			return
		}
		if w.Code != 400 {
			t.Fatalf("body %q: status %d: %s", body, w.Code, w.Body)
		}
		var e openaiapi.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Fatalf("body %q: 400 not in OpenAI's shape: %s", body, w.Body)
		}
	})
}
