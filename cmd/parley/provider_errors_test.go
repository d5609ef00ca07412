package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// batchChat posts a chat to POST /api/v1/chat and returns the status, the Retry-After header and
// the error of the answer.
func batchChat(t *testing.T, url, model, message string) (int, string, parley.ErrorBody) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"message": message, "model": model})
	resp, err := http.Post(url+"/api/v1/chat", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct{ Error parley.ErrorBody }
	_ = json.Unmarshal(body, &out)
	return resp.StatusCode, resp.Header.Get("Retry-After"), out.Error
}

// TestProviderRateLimitAndOpenBreakerReachTheClient: a provider's 429 reaches a chat as 429 with
// the provider's Retry-After and names the cause, and does not close the provider for anyone; a
// provider that is down opens its breaker, and the chats it refuses get 503 with Retry-After.
func TestProviderRateLimitAndOpenBreakerReachTheClient(t *testing.T) {
	fake := llmtest.NewServer(llmtest.WithChunkSize(5))
	hs := httptest.NewServer(fake)
	defer hs.Close()
	url := startInProcess(t, map[string]string{"TEST_ANTHROPIC_KEY": "k"}, "--config", fourProviders(t, hs.URL),
		"--provider-attempts", "1", "--breaker-failures", "1", "--breaker-cooldown", "40s")

	// Three rate-limited chats in a row: each one is told why and when to come back, and the
	// breaker stays closed.
	for range 3 {
		fake.Enqueue(llmtest.Turn{Status: 429, RetryAfter: "9", ErrorMessage: "slow down"})
		status, retry, e := batchChat(t, url, "oa/gpt-4o", "hello")
		if status != http.StatusTooManyRequests || retry != "9" || e.Code != parley.ECRateLimited || e.RetryAfter != 9 ||
			!strings.Contains(e.Message, `provider "oa" is rate limiting`) {
			t.Fatalf("rate-limited chat: %d, Retry-After %q, %+v", status, retry, e)
		}
	}
	if status, _, e := batchChat(t, url, "oa/gpt-4o", "What is 1+1?"); status != http.StatusOK {
		t.Fatalf("after 429s the provider was closed: %d %+v", status, e)
	}

	// One failure of a provider that is down opens its breaker (breaker-failures 1).
	fake.Enqueue(llmtest.Turn{Status: 500})
	if status, _, e := batchChat(t, url, "oa/gpt-4o", "hello"); status != http.StatusBadGateway || e.Code != parley.ECUpstream {
		t.Fatalf("a provider 500: %d %+v", status, e)
	}
	status, retry, e := batchChat(t, url, "oa/gpt-4o", "hello")
	if status != http.StatusServiceUnavailable || e.Code != parley.ECUnavailable || retry == "" || e.RetryAfter < 30 || e.RetryAfter > 40 ||
		!strings.Contains(e.Message, `provider "oa" is unavailable`) {
		t.Fatalf("open breaker: %d, Retry-After %q, %+v", status, retry, e)
	}
}
