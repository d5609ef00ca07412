package upstream

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseAPIError(t *testing.T) {
	tests := []struct {
		raw  string
		want APIError
	}{
		{`{"message":"m","type":"server_error","param":null,"code":null}`, APIError{Type: "server_error", Message: "m"}},
		{`{"message":"m","type":"invalid_request_error","code":"model_not_found"}`, APIError{Type: "invalid_request_error", Code: "model_not_found", Message: "m"}},
		{`{"object":"error","message":"m","type":"BadRequestError","param":null,"code":400}`, APIError{Type: "BadRequestError", Code: "400", Message: "m"}},
		{`"plain"`, APIError{Message: "plain"}},
		{`[1]`, APIError{Message: "unreadable error object"}},
		{`{"message":"` + strings.Repeat("é", 600) + `"}`, APIError{Message: strings.Repeat("é", 512) + "…"}},
	}
	for _, tt := range tests {
		if got := ParseError([]byte(tt.raw)); *got != tt.want {
			t.Errorf("ParseError(%.40s) = %+v, want %+v", tt.raw, *got, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 8, 5, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "20"}, 20 * time.Second},
		{"seconds with spaces", map[string]string{"Retry-After": " 3 "}, 3 * time.Second},
		{"zero", map[string]string{"Retry-After": "0"}, 0},
		{"negative", map[string]string{"Retry-After": "-5"}, 0},
		{"overflow", map[string]string{"Retry-After": "99999999999999"}, 0},
		{"HTTP date", map[string]string{"Retry-After": "Tue, 05 Aug 2025 12:01:30 GMT"}, 90 * time.Second},
		{"HTTP date in the past", map[string]string{"Retry-After": "Tue, 05 Aug 2025 11:00:00 GMT"}, 0},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0},
		{"retry-after-ms wins", map[string]string{"Retry-After-Ms": "1500", "Retry-After": "2"}, 1500 * time.Millisecond},
		{"bad retry-after-ms falls back", map[string]string{"Retry-After-Ms": "x", "Retry-After": "2"}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := RetryAfter(h, now); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestErrorFromBody(t *testing.T) {
	tests := []struct {
		name, body string
		want       *APIError
	}{
		{"openai", `{"error":{"message":"m","type":"server_error","code":null}}`, &APIError{Type: "server_error", Message: "m"}},
		{"anthropic", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, &APIError{Type: "overloaded_error", Message: "Overloaded"}},
		{"gemini", `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`,
			&APIError{Type: "RESOURCE_EXHAUSTED", Code: "429", Message: "Resource has been exhausted (e.g. check quota)."}},
		{"gemini array", `[{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}]`,
			&APIError{Type: "UNAVAILABLE", Code: "503", Message: "The model is overloaded."}},
		{"ollama", `{"error":"model \"llama9\" not found, try pulling it first"}`, &APIError{Message: `model "llama9" not found, try pulling it first`}},
		{"no error member", `{"message":"hi"}`, nil},
		{"not json", `<html>Bad Gateway</html>`, nil},
		{"empty array", `[]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ErrorFromBody([]byte(tt.body))
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSetup(t *testing.T) {
	base, hc, h := Setup("http://x/v1/", "http://default", nil, http.Header{"Accept": {"a"}, "X-Key": {"k"}}, map[string]string{"Accept": "b", "X-Extra": "e"})
	if base != "http://x/v1" || hc != http.DefaultClient || h.Get("Accept") != "b" || h.Get("X-Key") != "k" || h.Get("X-Extra") != "e" {
		t.Fatalf("%q %v %v", base, hc, h)
	}
	own := &http.Client{}
	if base, hc, h := Setup("", "http://default", own, nil, nil); base != "http://default" || hc != own || len(h) != 0 {
		t.Fatalf("%q %v %v", base, hc, h)
	}
}
