package openai

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

const testKey = "sk-test-0123456789abcdef"

var helloReq = &parley.ChatRequest{Model: "gpt-4o-mini", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("Hello")}}}

func fixture(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recorded is what the fake upstream saw of one request.
type recorded struct {
	method, path string
	header       http.Header
	body         []byte
}

// fakeUpstream starts a server that records each request and answers with reply.
func fakeUpstream(t *testing.T, reply http.HandlerFunc) (*httptest.Server, <-chan recorded) {
	t.Helper()
	reqs := make(chan recorded, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case reqs <- recorded{r.Method, r.URL.Path, r.Header.Clone(), body}:
		default:
		}
		reply(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

func sseReply(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}
}

func receive(t *testing.T, reqs <-chan recorded) recorded {
	t.Helper()
	select {
	case r := <-reqs:
		return r
	case <-timeout(t):
		t.Fatal("no request reached the upstream")
		return recorded{}
	}
}

func TestClientStream(t *testing.T) {
	srv, reqs := fakeUpstream(t, sseReply(fixture(t, "stream", "parallel_tools.sse")))
	c := New(Config{BaseURL: srv.URL + "/v1/", APIKey: testKey, Headers: map[string]string{"OpenAI-Organization": "org-1"}, SendReasoning: true})
	req := &parley.ChatRequest{Model: "gpt-4.1", Messages: toolRound}
	s, err := c.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := drain(t, s)
	if !g.End.EOF || len(g.Response.ToolCalls) != 2 {
		t.Errorf("stream: %+v", g)
	}

	got := receive(t, reqs)
	if got.method != http.MethodPost || got.path != "/v1/chat/completions" {
		t.Errorf("request %s %s", got.method, got.path)
	}
	for k, want := range map[string]string{
		"Content-Type":        "application/json",
		"Accept":              "text/event-stream",
		"Authorization":       "Bearer " + testKey,
		"Openai-Organization": "org-1",
	} {
		if v := got.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	want, err := EncodeRequestWith(req, true, EncodeOptions{SendReasoning: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.body, want) {
		t.Errorf("body\n%s\nwant\n%s", got.body, want)
	}
}

func TestClientHeaders(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		wantAuth string
		extra    [2]string
	}{
		{name: "no key, no Authorization", cfg: Config{}},
		{name: "key", cfg: Config{APIKey: testKey}, wantAuth: "Bearer " + testKey},
		{
			name:     "Headers override the defaults",
			cfg:      Config{APIKey: testKey, Headers: map[string]string{"Authorization": "Basic eDp5", "api-key": "azure"}},
			wantAuth: "Basic eDp5",
			extra:    [2]string{"Api-Key", "azure"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, reqs := fakeUpstream(t, sseReply([]byte("data: [DONE]\n\n")))
			tt.cfg.BaseURL = srv.URL
			s, err := New(tt.cfg).Stream(context.Background(), helloReq)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			got := receive(t, reqs)
			if a := got.header.Get("Authorization"); a != tt.wantAuth {
				t.Errorf("Authorization = %q, want %q", a, tt.wantAuth)
			}
			if tt.extra[0] != "" && got.header.Get(tt.extra[0]) != tt.extra[1] {
				t.Errorf("%s = %q", tt.extra[0], got.header.Get(tt.extra[0]))
			}
			if got.path != "/chat/completions" {
				t.Errorf("path %q", got.path)
			}
		})
	}
}

func TestClientComplete(t *testing.T) {
	srv, reqs := fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(fixture(t, "response", "tool_calls.json"))
	})
	c := New(Config{BaseURL: srv.URL, APIKey: testKey, LegacyMaxTokens: true})
	req := &parley.ChatRequest{Model: "gpt-4.1", Messages: toolRound[:1], MaxTokens: 50}
	r, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !r.HasToolCalls() || r.ToolCalls[1].Function.Name != "get_time" || r.FinishReason != "tool_calls" || r.Usage.TotalTokens != 190 {
		t.Errorf("response %+v", r)
	}
	got := receive(t, reqs)
	want, _ := EncodeRequestWith(req, false, EncodeOptions{LegacyMaxTokens: true})
	if !bytes.Equal(got.body, want) || !bytes.Contains(got.body, []byte(`"stream":false`)) || !bytes.Contains(got.body, []byte(`"max_tokens":50`)) {
		t.Errorf("body %s", got.body)
	}
	if a := got.header.Get("Accept"); a != "application/json" {
		t.Errorf("Accept = %q", a)
	}
}

func TestClientCompleteTooLarge(t *testing.T) {
	srv, _ := fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte(" "), 1025))
	})
	c := New(Config{BaseURL: srv.URL})
	c.maxBody = 1024
	_, err := c.Complete(context.Background(), helloReq)
	if parley.CodeOf(err) != parley.ECUpstream || parley.MessageOf(err) != "provider response too large" {
		t.Errorf("got %v", err)
	}
}

func TestClientStatusErrors(t *testing.T) {
	now := time.Date(2025, 8, 5, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		status  int
		header  map[string]string
		body    string
		code    parley.ErrorCode
		want    StatusError
		wantMsg string
	}{
		{
			name:   "429 with Retry-After seconds",
			status: 429,
			header: map[string]string{"Retry-After": "7"},
			body:   `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-1 on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			code:   parley.ECRateLimited,
			want: StatusError{StatusCode: 429, RetryAfter: 7 * time.Second, Type: "requests", Code: "rate_limit_exceeded",
				Message: "Rate limit reached for gpt-4o-mini in organization org-1 on requests per min (RPM): Limit 3, Used 3, Requested 1."},
			wantMsg: "provider returned HTTP 429",
		},
		{
			name:    "500, key in the upstream text is redacted",
			status:  500,
			body:    `{"error":{"message":"internal failure for key ` + testKey + `","type":"server_error","param":null,"code":null}}`,
			code:    parley.ECUpstream,
			want:    StatusError{StatusCode: 500, Type: "server_error", Message: "internal failure for key [redacted]"},
			wantMsg: "provider returned HTTP 500",
		},
		{
			name:    "503 with Retry-After date, body not JSON",
			status:  503,
			header:  map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)},
			body:    "<html>upstream overloaded</html>",
			code:    parley.ECUpstream,
			want:    StatusError{StatusCode: 503, RetryAfter: 90 * time.Second},
			wantMsg: "provider returned HTTP 503",
		},
		{
			name:    "401",
			status:  401,
			body:    `{"error":{"message":"Incorrect API key provided: sk-test-****cdef.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			code:    parley.ECUpstream,
			want:    StatusError{StatusCode: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "Incorrect API key provided: sk-test-****cdef."},
			wantMsg: "provider returned HTTP 401",
		},
	}
	for _, tt := range tests {
		for _, call := range []string{"Stream", "Complete"} {
			t.Run(tt.name+"/"+call, func(t *testing.T) {
				srv, _ := fakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					for k, v := range tt.header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, tt.body)
				})
				c := New(Config{BaseURL: srv.URL, APIKey: testKey})
				c.now = func() time.Time { return now }
				var err error
				if call == "Stream" {
					var s parley.Stream
					s, err = c.Stream(context.Background(), helloReq)
					if s != nil {
						s.Close()
						t.Fatal("got a stream")
					}
				} else {
					_, err = c.Complete(context.Background(), helloReq)
				}
				if parley.CodeOf(err) != tt.code || parley.MessageOf(err) != tt.wantMsg {
					t.Errorf("err = %v (%s, %q)", err, parley.CodeOf(err), parley.MessageOf(err))
				}
				var se *StatusError
				if !errors.As(err, &se) {
					t.Fatalf("no *StatusError in %v", err)
				}
				if *se != tt.want {
					t.Errorf("StatusError = %+v, want %+v", *se, tt.want)
				}
				if strings.Contains(err.Error(), testKey) {
					t.Errorf("the key leaked into %q", err.Error())
				}
			})
		}
	}
}

func TestClientConnectionError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := New(Config{BaseURL: url}).Stream(context.Background(), helloReq)
	if parley.CodeOf(err) != parley.ECUpstream || parley.MessageOf(err) != "provider request failed" || errors.Unwrap(err) == nil {
		t.Errorf("got %v", err)
	}
}

func TestClientEncodeErrorSendsNothing(t *testing.T) {
	srv, reqs := fakeUpstream(t, sseReply(nil))
	_, err := New(Config{BaseURL: srv.URL}).Stream(context.Background(), &parley.ChatRequest{Model: "m"})
	if parley.CodeOf(err) != parley.ECInvalid {
		t.Errorf("got %v", err)
	}
	select {
	case <-reqs:
		t.Error("an invalid request was sent")
	default:
	}
}

// blockingUpstream sends head (if any) and then holds the response open until the client
// leaves; it reports the client's departure on gone.
func blockingUpstream(t *testing.T, head []byte) (srv *httptest.Server, entered, gone <-chan struct{}) {
	t.Helper()
	in, out := make(chan struct{}, 1), make(chan struct{}, 1)
	release := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if head != nil {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(head)
			w.(http.Flusher).Flush()
		}
		select {
		case in <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			select {
			case out <- struct{}{}:
			default:
			}
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv, in, out
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-timeout(t):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestClientCancelBeforeHeaders(t *testing.T) {
	srv, entered, _ := blockingUpstream(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-entered:
			cancel()
		case <-ctx.Done():
		}
	}()
	s, err := New(Config{BaseURL: srv.URL}).Stream(ctx, helloReq)
	if s != nil {
		s.Close()
	}
	if parley.CodeOf(err) != parley.ECCanceled || !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want canceled", err)
	}
}

func TestClientDeadline(t *testing.T) {
	srv, _ := fakeUpstream(t, sseReply(nil))
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	_, err := New(Config{BaseURL: srv.URL}).Complete(ctx, helloReq)
	if parley.CodeOf(err) != parley.ECTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want timeout", err)
	}
}

const oneChunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"

func TestClientCancelMidStream(t *testing.T) {
	srv, entered, gone := blockingUpstream(t, []byte(oneChunk))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(Config{BaseURL: srv.URL}).Stream(ctx, helloReq)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.Next(); err != nil || ev.Content != "Hi" {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	waitFor(t, entered, "the upstream")
	cancel()
	errc := make(chan error, 1)
	go func() { _, err := s.Next(); errc <- err }()
	select {
	case err := <-errc:
		if parley.CodeOf(err) != parley.ECCanceled || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want canceled", err)
		}
	case <-timeout(t):
		t.Fatal("Next did not return after cancel")
	}
	waitFor(t, gone, "the upstream to see the client leave")
}

func TestClientCloseEndsRequest(t *testing.T) {
	srv, entered, gone := blockingUpstream(t, []byte(oneChunk))
	s, err := New(Config{BaseURL: srv.URL}).Stream(context.Background(), helloReq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, entered, "the upstream")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, gone, "the upstream to see the client leave")
	if _, err := s.Next(); parley.CodeOf(err) != parley.ECCanceled {
		t.Errorf("Next after Close = %v", err)
	}
}

func TestNewDefaults(t *testing.T) {
	c := New(Config{})
	if c.url != DefaultBaseURL+"/chat/completions" || c.hc != http.DefaultClient || c.maxBody != upstream.MaxResponseSize {
		t.Errorf("url %q, client %v", c.url, c.hc)
	}
	h := map[string]string{"X": "1"}
	c = New(Config{Headers: h})
	h["X"] = "2"
	if c.headers["X"] != "1" {
		t.Error("New keeps the caller's map")
	}
}

// timeout bounds every wait in these tests; it never asserts speed.
func timeout(t *testing.T) <-chan time.Time {
	t.Helper()
	return time.After(10 * time.Second)
}
