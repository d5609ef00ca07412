package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// fuzzServer is a server whose handlers behind the pipeline only answer 200: the fuzz targets
// exercise the decoders of client input, not the store.
func fuzzServer(t testing.TB) *server {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "f.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &server{Deps: Deps{
		Store: st, MaxBodyBytes: 4096, Auth: &auth.Authenticator{Store: st}, BodyWait: time.Second, BodyTimeout: time.Minute,
		Chat: &chat.Service{MaxMessage: 1000, ResolveModel: func(m string) (string, error) {
			if m != "mock" {
				return "", parley.Errorf(parley.ECInvalid, "model: unknown model %q", m)
			}
			return m, nil
		}, DefaultModel: "mock"},
	}, bodies: newBodyBudget(1 << 20)}
}

var ok200 = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

// FuzzRequestBodies feeds any bytes, as any route's JSON body, through the pipeline's body step:
// the answer is the route's 200 or a 400 with a reason, never a panic or a 5xx.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{`{"message":"hi"}`, `{"message":"hi","binary_content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
		`{"title":"x"}`, `{"user":"u","expires_in":"1h"}`, ``, `{`, `[]`, `{"message":"\u0000"}`, `{"a":1}{}`, `null`} {
		for route := range uint8(4) {
			f.Add(route, []byte(s))
		}
	}
	s := fuzzServer(f)
	specs := []*bodySpec{
		jsonBody(false, s.checkChat),
		jsonBody(true, checkNewTitle),
		jsonBody(false, checkRename),
		jsonBody(false, checkNewKey),
	}
	s.Auth = nil // single-user: only the body step can refuse
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		h := s.pipe(policy{body: specs[int(route)%len(specs)]}, ok200)
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/x", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		if w.Code != 200 && w.Code != 400 {
			t.Fatalf("body %q: status %d: %s", body, w.Code, w.Body)
		}
		if w.Code == 400 && !strings.Contains(w.Body.String(), `"code":"invalid"`) {
			t.Fatalf("body %q: 400 without the invalid code: %s", body, w.Body)
		}
	})
}

// FuzzAuthorization feeds any Authorization header through steps 4 and 5: the answer is 200 for
// a valid key and 401 otherwise, never a panic or another status.
func FuzzAuthorization(f *testing.F) {
	s := fuzzServer(f)
	secret, k := auth.NewKey("alice", "", false, false, time.Now(), 0)
	if err := s.Store.CreateAPIKey(context.Background(), k); err != nil {
		f.Fatal(err)
	}
	for _, h := range []string{"Bearer " + secret, "Bearer", "Bearer ", "bearer " + secret, "Basic abc", "Bearer pk_" + strings.Repeat("A", 43), "Bearer " + secret + "x", "\x00", ""} {
		f.Add(h)
	}
	h := s.pipe(policy{}, ok200)
	f.Fuzz(func(t *testing.T, header string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header["Authorization"] = []string{header}
		h.ServeHTTP(w, r)
		valid := strings.EqualFold(strings.SplitN(header, " ", 2)[0], "Bearer") && strings.TrimSpace(strings.SplitN(header+" ", " ", 2)[1]) == secret
		if valid && w.Code != 200 || !valid && w.Code != 401 {
			t.Fatalf("Authorization %q: status %d (valid %v): %s", header, w.Code, valid, w.Body)
		}
	})
}

// runnerFunc is the agent loop as a function.
type runnerFunc func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error)

func (f runnerFunc) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	return f(ctx, in, emit)
}

// FuzzWebSocketFrames feeds any bytes, as one client frame, to a WebSocket connection's frame
// handler: every frame gets exactly one reply (pong, control_response or error), an error is a
// client error with a message, never an internal one, and nothing panics.
func FuzzWebSocketFrames(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping","id":"p1"}`, `{"type":"ping"}`, `{"type":"user_message","id":"m","data":{"text":"hi"}}`,
		`{"type":"user_message","data":{"text":"hi","model":"mock","selected_tools":[],"binary_content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]}}`,
		`{"type":"user_message","data":{"text":"hi","fileIds":["a"]}}`, `{"type":"user_message","data":null}`,
		`{"type":"control","id":"c","data":{"action":"get_history","limit":3,"after_seq":1}}`,
		`{"type":"control","data":{"action":"abort"}}`, `{"type":"control","data":{"action":"pause"}}`,
		`{"type":"control","data":{"action":"resume"}}`, `{"type":"control","data":{}}`,
		`{"type":"nope"}`, `{}`, `[]`, `null`, ``, `{"type":"ping","id":1}`, `{"type":"ping"} {}`, "\xff",
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	s.Runs = runs.NewManager(runs.Options{Events: s.Store})
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Runs.Shutdown(ctx)
	})
	s.Chat.Store, s.Chat.Runs = s.Store, s.Runs
	s.Chat.Agent = runnerFunc(func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		return &agent.Result{FinishReason: parley.FinishStop}, nil
	})
	// The upgrade request, whose key each user_message checks again.
	secret, k := auth.NewKey("alice", "", false, false, time.Now(), 0)
	if err := s.Store.CreateAPIKey(context.Background(), k); err != nil {
		f.Fatal(err)
	}
	upgrade := httptest.NewRequest("GET", "/api/ws", nil)
	upgrade.Header.Set("Authorization", "Bearer "+secret)
	f.Fuzz(func(t *testing.T, frame []byte) {
		w := &wsConn{
			s: s, id: auth.Identity{User: "alice"}, ip: "127.0.0.1", cancel: func(error) {}, r: upgrade,
			outbox: make(chan []byte, wsOutboxSize), session: make(chan follow, 1), activity: make(chan struct{}, 1),
		}
		w.handle(context.Background(), frame)
		if len(w.outbox) != 1 {
			t.Fatalf("frame %q: %d replies, want 1", frame, len(w.outbox))
		}
		var reply struct {
			Type string           `json:"type"`
			Data parley.ErrorBody `json:"data"`
		}
		b := <-w.outbox
		if err := json.Unmarshal(b, &reply); err != nil {
			t.Fatalf("frame %q: reply is not JSON: %s", frame, b)
		}
		switch reply.Type {
		case "pong", "control_response":
		case "error":
			if reply.Data.Code == "" || reply.Data.Code == parley.ECInternal || reply.Data.Message == "" {
				t.Fatalf("frame %q: error reply %s", frame, b)
			}
		default:
			t.Fatalf("frame %q: reply %s", frame, b)
		}
	})
}

// FuzzResumePoint feeds any Last-Event-ID header and after parameter to the resume step: the
// answer is the sequence number they name (the header first), Join when both are empty, or a 400
// that names the bad one.
func FuzzResumePoint(f *testing.F) {
	for _, s := range [][2]string{{"", ""}, {"5", ""}, {"", "7"}, {"3", "9"}, {" 12 ", ""}, {"-1", ""}, {"", "x"},
		{"9007199254740993", ""}, {"1e3", ""}, {"", "0"}, {"\x00", ""}, {"+4", ""}, {"007", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, header, after string) {
		r := httptest.NewRequest("GET", "/api/v1/sessions/x/stream", nil)
		r.Header.Set("Last-Event-ID", header)
		r.URL.RawQuery = url.Values{"after": {after}}.Encode()
		n, err := resumePoint(r)
		name, v := "Last-Event-ID", strings.TrimSpace(header)
		if v == "" {
			name, v = "after", after
		}
		if v == "" {
			if err != nil || n != runs.Join {
				t.Fatalf("nothing named: %d, %v", n, err)
			}
			return
		}
		want, perr := strconv.ParseInt(v, 10, 64)
		valid := perr == nil && want >= 0 && want <= 1<<53
		switch {
		case valid && (err != nil || n != want):
			t.Fatalf("%s %q: %d, %v; want %d", name, v, n, err, want)
		case !valid && (parley.CodeOf(err) != parley.ECInvalid || !strings.Contains(parley.MessageOf(err), name)):
			t.Fatalf("%s %q: %d, %v; want a 400 naming %s", name, v, n, err, name)
		}
	})
}
