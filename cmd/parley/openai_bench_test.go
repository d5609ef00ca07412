package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/provider/llmtest"
)

// BenchmarkOpenAITTFT measures the time to first token of one streamed chat, one at a time:
// straight to the fake model (provider/llmtest, no token delay), and through Parley's
// /v1/chat/completions in each of its kinds (gateway, stateless on Parley's loop, stateful on a
// session), beside the native POST /api/v1/chat/stream. Parley is `parley serve` run in this
// process (real HTTP on loopback, SQLite in a temporary directory, rate limit off); the time runs
// from sending the request to the first chunk carrying content (Parley's native stream: its first
// `chunk` event). ns/op is the mean; p50-ms and p99-ms are reported beside it.
//
//	go test ./cmd/parley -run '^$' -bench OpenAITTFT -benchtime 300x
func BenchmarkOpenAITTFT(b *testing.B) {
	fake := httptest.NewServer(llmtest.NewServer())
	b.Cleanup(fake.Close)
	url := startServe(b, map[string]string{"PARLEY_OPENAI_BASE_URL": fake.URL + "/v1"},
		"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(b.TempDir(), "p.db"), "--heartbeat", "1h",
		"--provider-attempts", "1", "--rate-limit", "off", "--max-runs", "0")
	const model = "openai/gpt-4o-mini"
	ask := `"messages":[{"role":"user","content":"Say hello"}]`
	newSession := func() string {
		resp, err := http.Post(url+"/api/v1/sessions", "application/json", strings.NewReader(`{}`))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct{ ID string }
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.ID == "" {
			b.Fatalf("session: %v", err)
		}
		return s.ID
	}
	cases := []struct {
		name, url, body string
		session         bool
		native          bool
	}{
		{"direct-to-model", fake.URL + "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,` + ask + `}`, false, false},
		{"v1-gateway", url + "/v1/chat/completions", `{"model":"` + model + `","stream":true,` + ask +
			`,"tools":[{"type":"function","function":{"name":"noop","parameters":{"type":"object"}}}]}`, false, false},
		{"v1-stateless", url + "/v1/chat/completions", `{"model":"` + model + `","stream":true,` + ask + `}`, false, false},
		{"v1-stateful", url + "/v1/chat/completions", `{"model":"` + model + `","stream":true,` + ask + `}`, true, false},
		{"native-chat-stream", url + "/api/v1/chat/stream", `{"message":"Say hello"}`, false, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				req, _ := http.NewRequestWithContext(ctx, "POST", c.url, strings.NewReader(c.body))
				req.Header.Set("Content-Type", "application/json")
				if c.session {
					req.Header.Set("X-Parley-Session", newSession())
				}
				b.StartTimer()
				d, err := firstToken(req, c.native)
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, d)
			}
			slices.Sort(ds)
			var sum time.Duration
			for _, d := range ds {
				sum += d
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(sum.Microseconds())/float64(len(ds))/1000, "mean-ms")
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(ds[min(len(ds)-1, len(ds)*99/100)].Microseconds())/1000, "p99-ms")
		})
	}
}

// firstToken sends req and returns the time to the first data line that carries content, then
// reads the stream to its end.
func firstToken(req *http.Request, native bool) (time.Duration, error) {
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("%s: %d", req.URL.Path, resp.StatusCode)
	}
	var ttft time.Duration
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok || ttft > 0 {
			continue
		}
		if native && bytes.Contains(data, []byte(`"type":"chunk"`)) ||
			!native && bytes.Contains(data, []byte(`"delta":{"content":"`)) {
			ttft = time.Since(start)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if ttft == 0 {
		return 0, errors.New(req.URL.Path + ": no content in the stream")
	}
	return ttft, nil
}
