package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// upstream is the fake model: an OpenAI-compatible Chat Completions endpoint in this process. Each
// streamed answer belongs to the run the benchmark has started (current); its content chunks are
// "r<run>t<token> " and the time each was flushed to Parley is recorded in that run's flush
// times, on the benchmark's clock (now).
type upstream struct {
	now      func() int64
	gap      time.Duration
	current  *atomic.Pointer[runData]
	requests atomic.Int64
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"bench-model","object":"model","owned_by":"fanout"}]}`)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		u.chat(w, r)
	default:
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
	}
}

func (u *upstream) chat(w http.ResponseWriter, r *http.Request) {
	u.requests.Add(1)
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	run := u.current.Load()
	if run == nil {
		http.Error(w, `{"error":{"message":"no run","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	created := time.Now().Unix()
	if !req.Stream { // Parley streams; answer a plain request anyway, whole
		content := ""
		for i := 0; i < run.tokens; i++ {
			content += token(run.n, i)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-fanout","object":"chat.completion","created":%d,"model":"bench-model",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`, created, content, run.tokens, run.tokens+10)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	head := `data: {"id":"chatcmpl-fanout","object":"chat.completion.chunk","created":` + strconv.FormatInt(created, 10) +
		`,"model":"bench-model","choices":[{"index":0,"delta":`
	send := func(delta, finish string) error {
		if _, err := io.WriteString(w, head+delta+`,"finish_reason":`+finish+`}]}`+"\n\n"); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send(`{"role":"assistant","content":""}`, "null") != nil {
		return
	}
	next := time.Now()
	for i := 0; i < run.tokens; i++ {
		next = next.Add(u.gap)
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
		case <-r.Context().Done(): // Parley aborted the call
			t.Stop()
			return
		}
		if send(`{"content":"`+token(run.n, i)+`"}`, "null") != nil {
			return
		}
		atomic.StoreInt64(&run.flush[i], u.now())
	}
	if send(`{}`, `"stop"`) != nil {
		return
	}
	if req.StreamOptions.IncludeUsage {
		io.WriteString(w, `data: {"id":"chatcmpl-fanout","object":"chat.completion.chunk","created":`+strconv.FormatInt(created, 10)+
			`,"model":"bench-model","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":`+strconv.Itoa(run.tokens)+
			`,"total_tokens":`+strconv.Itoa(run.tokens+10)+`}}`+"\n\n")
	}
	io.WriteString(w, "data: [DONE]\n\n")
	rc.Flush()
}

// token is the content of token i of run n.
func token(n, i int) string { return "r" + strconv.Itoa(n) + "t" + strconv.Itoa(i) + " " }

// parseToken reads "r<run>t<token>" at the start of b (the content of a chunk event).
func parseToken(b []byte) (run, tok int, ok bool) {
	if len(b) == 0 || b[0] != 'r' {
		return 0, 0, false
	}
	b = b[1:]
	run, b, ok = digits(b)
	if !ok || len(b) == 0 || b[0] != 't' {
		return 0, 0, false
	}
	tok, _, ok = digits(b[1:])
	return run, tok, ok
}

func digits(b []byte) (int, []byte, bool) {
	n, i := 0, 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i < 9 {
		n = n*10 + int(b[i]-'0')
		i++
	}
	return n, b[i:], i > 0
}
