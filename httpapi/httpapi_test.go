package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/parleyhq/parley/approval"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/artifact"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/blob/disk"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/httpapi"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/sqlite"
)

// fakeAgent is a function-field fake of the agent loop.
type fakeAgent struct {
	run func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error)
}

func (f *fakeAgent) Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	return f.run(ctx, in, emit)
}

// testStore is what the tests need of a store; both stores have it.
type testStore interface {
	parley.Store
	parley.KeyStore
	parley.EventStore
}

type env struct {
	url     string
	handler http.Handler // what srv serves
	store   testStore
	runs    *runs.Manager
	agent   *fakeAgent
	// shutdown ends every request's context, as parley serve does before it shuts down.
	shutdown context.CancelFunc

	mu   sync.Mutex
	keys map[string]string // user → secret of an API key made for it

	blobs *disk.Store // the blob store of the files API
}

// key returns the secret of an API key of user, made on first use (admin is an admin key).
func (e *env) key(t *testing.T, user string) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if k, ok := e.keys[user]; ok {
		return k
	}
	secret, k := auth.NewKey(user, "test", user == "admin", false, time.Now(), 0)
	if err := e.store.CreateAPIKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	e.keys[user] = secret
	return secret
}

// answer is a fake agent body that stores one assistant message and streams it in two chunks.
func answer(store parley.Store, text string) func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
	return func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		emit(parley.Event{Type: parley.EventChunk, Content: text[:len(text)/2]})
		emit(parley.Event{Type: parley.EventChunk, Content: text[len(text)/2:]})
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(text), RunID: in.RunID, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := store.AppendMessages(ctx, in.SessionID, m); err != nil {
			return nil, err
		}
		emit(parley.Event{Type: parley.EventRecord, Message: m})
		emit(parley.Event{Type: parley.EventUsage, Usage: &parley.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}})
		return &agent.Result{Final: m, FinishReason: parley.FinishStop}, nil
	}
}

func newEnv(t *testing.T, mod func(*httpapi.Deps)) *env {
	t.Helper()
	return newEnvWith(t, runs.Options{}, mod)
}

// newEnvWith is newEnv with the run manager's options.
func newEnvWith(t *testing.T, ro runs.Options, mod func(*httpapi.Deps)) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newEnvOn(t, st, ro, mod)
}

// newEnvOn is newEnvWith on a store of the caller's.
func newEnvOn(t *testing.T, st testStore, ro runs.Options, mod func(*httpapi.Deps)) *env {
	t.Helper()
	ro.Events = st
	mgr := runs.NewManager(ro)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mgr.Shutdown(ctx)
	})
	fa := &fakeAgent{run: answer(st, "Hello there")}
	svc := &chat.Service{
		Store: st, Runs: mgr, Agent: fa, DefaultModel: "mock",
		ResolveModel: func(m string) (string, error) {
			if m != "mock" {
				return "", parley.Errorf(parley.ECInvalid, "model: unknown model %q", m)
			}
			return m, nil
		},
		CheckTools: func(sel []string) error {
			for _, s := range sel {
				if s != "calculator" {
					return parley.Errorf(parley.ECInvalid, "selected_tools: unknown tool %q", s)
				}
			}
			return nil
		},
		MaxMessage: 50,
	}
	blobs, err := disk.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	fsvc := files.New(files.Config{Store: st, Blobs: blobs, MaxFileBytes: 1 << 20})
	svc.Files = fsvc
	d := httpapi.Deps{
		Store: st, Chat: svc, Runs: mgr, MaxBodyBytes: 4096,
		Auth:  &auth.Authenticator{Store: st},
		Files: fsvc,
		// Tool approval (issue 23): any tool's arguments pass but {"bad": …} (approvals_test.go).
		Approvals: &approval.Service{Store: st, Notify: mgr.NotifyApproval, CheckArgs: func(tool string, args []byte) error {
			if strings.Contains(string(args), `"bad"`) {
				return parley.Errorf(parley.ECInvalid, "arguments do not fit the schema of %s: bad is not allowed", tool)
			}
			return nil
		}},
	}
	if as, ok := st.(parley.ArtifactStore); ok {
		d.Artifacts, d.ArtifactURLs = as, &artifact.Signer{Key: []byte("test-artifact-url-secret-0123456789")}
	}
	if cs, ok := st.(parley.SearchCostStore); ok {
		d.SearchCosts = cs
	}
	base, shutdown := context.WithCancel(context.Background())
	d.Lifetime = base
	if mod != nil {
		mod(&d)
	}
	h := httpapi.NewServer(d)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(shutdown)
	return &env{url: srv.URL, handler: h, store: st, runs: mgr, agent: fa, shutdown: shutdown, keys: map[string]string{}, blobs: blobs}
}

func (e *env) do(t *testing.T, method, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	e.authorize(t, req, hdr...)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: non-JSON body %q", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

// authorize sets hdr on req, and the API key of the user hdr names in X-Test-User (alice by
// default; "-" for none) unless hdr sets Authorization itself.
func (e *env) authorize(t *testing.T, req *http.Request, hdr ...string) {
	t.Helper()
	user := "alice"
	for i := 0; i+1 < len(hdr); i += 2 {
		switch hdr[i] {
		case "X-Test-User":
			user = hdr[i+1]
		case "Authorization":
			user = "-"
			req.Header.Set(hdr[i], hdr[i+1])
		default:
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	if user != "-" && e.keys != nil {
		req.Header.Set("Authorization", "Bearer "+e.key(t, user))
	}
}

func errMsg(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

func (e *env) newSession(t *testing.T, user string) string {
	t.Helper()
	code, out := e.do(t, "POST", "/api/v1/sessions", `{"title":"t"}`, "X-Test-User", user)
	if code != 201 {
		t.Fatalf("create session: %d %v", code, out)
	}
	return out["id"].(string)
}

// TestBadInputIsA4xxWithAReason checks every way a request can be wrong, and that nothing is stored.
func TestBadInputIsA4xxWithAReason(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	bobs := e.newSession(t, "bob")
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		reason                   string
	}{
		{"malformed JSON", "POST", "/api/v1/chat", `{"message":`, nil, 400, "truncated JSON"},
		{"syntax error", "POST", "/api/v1/chat", `{"message" "x"}`, nil, 400, "invalid JSON at byte"},
		{"empty body", "POST", "/api/v1/chat", ``, nil, 400, "empty"},
		{"not an object", "POST", "/api/v1/chat", `[1,2]`, nil, 400, "must be a JSON object"},
		{"unknown field", "POST", "/api/v1/chat", `{"message":"hi","mesage":"x"}`, nil, 400, `unknown field "mesage"`},
		{"wrong type", "POST", "/api/v1/chat", `{"message":42}`, nil, 400, "message: must be a string"},
		{"trailing data", "POST", "/api/v1/chat", `{"message":"hi"} {}`, nil, 400, "after the JSON object"},
		{"empty message", "POST", "/api/v1/chat", `{"message":"  "}`, nil, 400, "must not be empty"},
		{"message too long", "POST", "/api/v1/chat", `{"message":"` + strings.Repeat("x", 51) + `"}`, nil, 400, "limit is 50"},
		{"body too large", "POST", "/api/v1/chat", `{"message":"` + strings.Repeat("x", 5000) + `"}`, nil, 400, "larger than 4096 bytes"},
		{"unknown model", "POST", "/api/v1/chat", `{"message":"hi","model":"gpt-9"}`, nil, 400, `unknown model "gpt-9"`},
		{"unknown tool", "POST", "/api/v1/chat/stream", `{"message":"hi","selected_tools":["rm_rf"]}`, nil, 400, `unknown tool "rm_rf"`},
		{"bad image part", "POST", "/api/v1/chat", `{"message":"hi","binary_content":[{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}]}`, nil, 400, "data:image"},
		{"wrong content type", "POST", "/api/v1/chat", `{"message":"hi"}`, []string{"Content-Type", "text/plain"}, 400, "application/json"},
		{"unknown session", "POST", "/api/v1/chat", `{"message":"hi","session_id":"0190a000-0000-7000-8000-000000000000"}`, nil, 404, "not found"},
		{"malformed session id", "POST", "/api/v1/chat", `{"message":"hi","session_id":"../../etc"}`, nil, 404, "not found"},
		{"another user's session (chat)", "POST", "/api/v1/chat/stream", `{"message":"hi","session_id":"` + bobs + `"}`, nil, 403, "another user"},
		{"another user's session (get)", "GET", "/api/v1/sessions/" + bobs, "", nil, 403, "another user"},
		{"another user's messages", "GET", "/api/v1/sessions/" + bobs + "/messages", "", nil, 403, "another user"},
		{"another user's records", "GET", "/api/v1/sessions/" + bobs + "/records", "", nil, 403, "another user"},
		{"another user's rename", "PATCH", "/api/v1/sessions/" + bobs, `{"title":"mine"}`, nil, 403, "another user"},
		{"another user's delete", "DELETE", "/api/v1/sessions/" + bobs, "", nil, 403, "another user"},
		{"no such session", "GET", "/api/v1/sessions/0190a000-0000-7000-8000-000000000000", "", nil, 404, "not found"},
		{"bad limit", "GET", "/api/v1/sessions?limit=0", "", nil, 400, "limit: must be an integer from 1 to 200"},
		{"bad after", "GET", "/api/v1/sessions/" + sid + "/messages?after=-1", "", nil, 400, "after: must be an integer"},
		{"bad cursor", "GET", "/api/v1/sessions?cursor=%%%", "", nil, 400, "cursor"},
		{"empty title", "PATCH", "/api/v1/sessions/" + sid, `{"title":""}`, nil, 400, "title"},
		{"long title", "PATCH", "/api/v1/sessions/" + sid, `{"title":"` + strings.Repeat("é", 201) + `"}`, nil, 400, "limit is 200"},
		{"unknown route", "GET", "/api/v1/nothing", "", nil, 404, "no route"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := e.do(t, c.method, c.path, c.body, c.hdr...)
			if code != c.status || !strings.Contains(errMsg(out), c.reason) {
				t.Fatalf("got %d %v, want %d with %q", code, out, c.status, c.reason)
			}
		})
	}
	// Nothing was stored by any of them: bob's session and alice's are empty, and alice has no
	// other sessions.
	for _, s := range []string{sid, bobs} {
		if msgs, _ := e.store.History(context.Background(), s); len(msgs) != 0 {
			t.Fatalf("bad requests stored %d messages", len(msgs))
		}
	}
	list, _, _ := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 10})
	if len(list) != 1 {
		t.Fatalf("bad requests created sessions: %d", len(list))
	}
}

func TestSessionsCRUDAndPagination(t *testing.T) {
	e := newEnv(t, nil)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.newSession(t, "alice"))
	}
	e.newSession(t, "bob")
	seen := map[string]bool{}
	cursor := ""
	for page := 0; page < 10; page++ {
		code, out := e.do(t, "GET", "/api/v1/sessions?limit=2&cursor="+cursor, "")
		if code != 200 {
			t.Fatalf("list: %d %v", code, out)
		}
		for _, s := range out["sessions"].([]any) {
			id := s.(map[string]any)["id"].(string)
			if seen[id] {
				t.Fatalf("session %s listed twice", id)
			}
			seen[id] = true
		}
		cursor, _ = out["next_cursor"].(string)
		if cursor == "" {
			break
		}
	}
	if len(seen) != 5 {
		t.Fatalf("listed %d of alice's 5 sessions (bob's must not appear)", len(seen))
	}
	code, out := e.do(t, "PATCH", "/api/v1/sessions/"+ids[0], `{"title":"Renamed"}`)
	if code != 200 || out["title"] != "Renamed" {
		t.Fatalf("rename: %d %v", code, out)
	}
	if code, out = e.do(t, "GET", "/api/v1/sessions/"+ids[0], ""); code != 200 || out["title"] != "Renamed" {
		t.Fatalf("get after rename: %d %v", code, out)
	}
	if code, _ = e.do(t, "DELETE", "/api/v1/sessions/"+ids[0], ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ = e.do(t, "GET", "/api/v1/sessions/"+ids[0], ""); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
}

type event struct {
	id, name string
	data     parley.Event
	raw      string // the data line as sent
}

func readEvents(t *testing.T, body io.Reader, stop func(event) bool) ([]event, []string) {
	t.Helper()
	var evs []event
	var comments []string
	sc := bufio.NewScanner(body)
	var cur event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				evs = append(evs, cur)
				if stop != nil && stop(cur) {
					return evs, comments
				}
			}
			cur = event{}
		case strings.HasPrefix(line, ":"):
			comments = append(comments, line)
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.raw = line[6:]
			if err := json.Unmarshal([]byte(line[6:]), &cur.data); err != nil {
				t.Fatalf("bad data line %q: %v", line, err)
			}
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return evs, comments
}

func (e *env) stream(t *testing.T, ctx context.Context, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/chat/stream", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	e.authorize(t, req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return resp
}

func TestChatStreamSSEFormat(t *testing.T) {
	e := newEnv(t, nil)
	resp := e.stream(t, context.Background(), `{"message":"Hi"}`)
	defer resp.Body.Close()
	evs, _ := readEvents(t, resp.Body, nil)
	want := []string{"start", "record", "chunk", "chunk", "record", "usage", "done"}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %v: %+v", len(evs), want, evs)
	}
	var text string
	for i, ev := range evs {
		if ev.name != want[i] || ev.id != fmt.Sprint(i+1) || ev.data.Seq != int64(i+1) || string(ev.data.Type) != ev.name {
			t.Fatalf("event %d: id %s name %s data %+v", i, ev.id, ev.name, ev.data)
		}
		if ev.data.SessionID == "" || ev.data.RunID == "" {
			t.Fatalf("event %d lacks session or run id", i)
		}
		text += ev.data.Content
	}
	if text != "Hello there" || evs[1].data.Message.Role != "user" || evs[1].data.Message.Content.String() != "Hi" {
		t.Fatalf("stream content %q / user record %+v", text, evs[1].data.Message)
	}
	if evs[6].data.FinishReason != "stop" {
		t.Fatalf("done: %+v", evs[6].data)
	}
	// The new session is titled after the message and holds both messages.
	code, out := e.do(t, "GET", "/api/v1/sessions/"+evs[0].data.SessionID+"/messages", "")
	if code != 200 || len(out["messages"].([]any)) != 2 {
		t.Fatalf("messages: %d %v", code, out)
	}
	if _, out = e.do(t, "GET", "/api/v1/sessions/"+evs[0].data.SessionID, ""); out["title"] != "Hi" {
		t.Fatalf("session title %v", out["title"])
	}
}

// A client that leaves mid-run neither stops the run nor loses its answer; idle streams get
// heartbeats.
func TestClientLeavingDoesNotStopTheRun(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.Heartbeat = 20 * time.Millisecond })
	release := make(chan struct{})
	started := make(chan struct{})
	finish := answer(e.store, "the answer")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return finish(ctx, in, emit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	resp := e.stream(t, ctx, `{"message":"Hi"}`)
	<-started
	evs, _ := readEvents(t, resp.Body, func(ev event) bool { return ev.name == "record" })
	if len(evs) != 2 {
		t.Fatalf("events before leaving: %+v", evs)
	}
	cancel()
	resp.Body.Close()
	close(release)

	deadline := time.Now().Add(5 * time.Second)
	for {
		list, _, _ := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 5})
		if len(list) == 1 {
			msgs, _ := e.store.History(context.Background(), list[0].ID)
			if len(msgs) == 2 && msgs[1].Content.String() == "the answer" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the run's answer was not stored after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHeartbeatWhileIdle(t *testing.T) {
	e := newEnv(t, func(d *httpapi.Deps) { d.Heartbeat = 10 * time.Millisecond })
	release := make(chan struct{})
	finish := answer(e.store, "ok")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		<-release
		return finish(ctx, in, emit)
	}
	resp := e.stream(t, context.Background(), `{"message":"Hi"}`)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	deadline := time.After(5 * time.Second)
	for {
		lineCh := make(chan string, 1)
		go func() { l, _ := r.ReadString('\n'); lineCh <- l }()
		select {
		case l := <-lineCh:
			if strings.HasPrefix(l, ": ping") {
				close(release)
				rest, _ := io.ReadAll(r)
				if !strings.Contains(string(rest), "event: done") {
					t.Fatalf("stream did not finish after heartbeat: %s", rest)
				}
				return
			}
		case <-deadline:
			t.Fatal("no heartbeat on an idle stream")
		}
	}
}

// A second message while a run is active is rejected with 409 and stores nothing.
func TestOneRunPerSession(t *testing.T) {
	e := newEnv(t, nil)
	release := make(chan struct{})
	finish := answer(e.store, "done")
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		<-release
		return finish(ctx, in, emit)
	}
	sid := e.newSession(t, "alice")
	resp := e.stream(t, context.Background(), `{"message":"first","session_id":"`+sid+`"}`)
	defer resp.Body.Close()
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"second","session_id":"`+sid+`"}`)
	if code != 409 || !strings.Contains(errMsg(out), "already active") {
		t.Fatalf("second message: %d %v", code, out)
	}
	if _, out = e.do(t, "GET", "/api/v1/sessions/"+sid, ""); out["active_run"] == nil {
		t.Fatal("session does not show its active run")
	}
	close(release)
	io.ReadAll(resp.Body)
	msgs, _ := e.store.History(context.Background(), sid)
	if len(msgs) != 2 || msgs[0].Content.String() != "first" {
		t.Fatalf("history after rejected message: %+v", msgs)
	}
}

func TestBatchChat(t *testing.T) {
	e := newEnv(t, nil)
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"Hi"}`)
	if code != 200 || out["response"] != "Hello there" || out["finish_reason"] != "stop" || out["model"] != "mock" {
		t.Fatalf("batch: %d %v", code, out)
	}
	if len(out["messages"].([]any)) != 2 || out["usage"].(map[string]any)["total_tokens"].(float64) != 5 {
		t.Fatalf("batch messages/usage: %v", out)
	}

	// A failing run answers with its sanitized error.
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		return nil, parley.WrapError(parley.ECUpstream, errors.New("upstream said: key sk-secret invalid"), "provider returned HTTP 401")
	}
	code, out = e.do(t, "POST", "/api/v1/chat", `{"message":"Hi"}`)
	if code != 502 || errMsg(out) != "provider returned HTTP 401" {
		t.Fatalf("failed batch: %d %v", code, out)
	}
	raw, _ := json.Marshal(out)
	if strings.Contains(string(raw), "sk-secret") {
		t.Fatal("upstream detail leaked to the client")
	}
}

func TestRecordsView(t *testing.T) {
	e := newEnv(t, nil)
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		now := time.Now().UTC().Truncate(time.Microsecond)
		ok := true
		a := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, CreatedAt: now, ToolCalls: []parley.ToolCall{{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}}
		tm := &parley.Message{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "call_1", Name: "calculator", Content: parley.Text(`{"result":2}`), Success: &ok, CreatedAt: now}
		f := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("2"), CreatedAt: now}
		if err := e.store.AppendMessages(ctx, in.SessionID, a, tm, f); err != nil {
			return nil, err
		}
		return &agent.Result{FinishReason: parley.FinishStop}, nil
	}
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"1+1?"}`)
	if code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	code, out = e.do(t, "GET", "/api/v1/sessions/"+out["session_id"].(string)+"/records", "")
	recs := out["records"].([]any)
	if code != 200 || len(recs) != 3 {
		t.Fatalf("records: %d %v", code, out)
	}
	tc := recs[1].(map[string]any)
	if tc["type"] != "tool_call" || tc["tool_call_id"] != "call_1" || tc["tool_name"] != "calculator" || tc["success"] != true ||
		tc["arguments"].(map[string]any)["expression"] != "1+1" || tc["result"].(map[string]any)["result"].(float64) != 2 {
		t.Fatalf("tool_call record: %v", tc)
	}
}

// Many concurrent streams on different sessions each get their own complete, ordered stream.
func TestConcurrentStreams(t *testing.T) {
	e := newEnv(t, nil)
	secret := e.key(t, "alice")
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.url+"/api/v1/chat/stream", strings.NewReader(`{"message":"Hi"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), "event: done") || strings.Count(string(b), "event: chunk") != 2 {
				errs <- fmt.Errorf("incomplete stream: %s", b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestUsageIsReadable: token totals per session (GET /sessions/{id}) and per owner (GET /usage),
// and per-message latency and usage in the message listing.
func TestUsageIsReadable(t *testing.T) {
	e := newEnv(t, nil)
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("ok"), RunID: in.RunID,
			Model: "mock", LatencyMS: 42, Usage: &parley.Usage{PromptTokens: 100, CompletionTokens: 10, TotalTokens: 110, CachedTokens: 64},
			CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := e.store.AppendMessages(ctx, in.SessionID, m); err != nil {
			return nil, err
		}
		return &agent.Result{Final: m, FinishReason: parley.FinishStop}, nil
	}
	sid := e.newSession(t, "alice")
	for i := 0; i < 2; i++ {
		if code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"Hi","session_id":"`+sid+`"}`); code != 200 {
			t.Fatalf("chat: %d %v", code, out)
		}
	}
	if code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"Hi"}`); code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	code, out := e.do(t, "GET", "/api/v1/sessions/"+sid, "")
	u, _ := out["usage"].(map[string]any)
	if code != 200 || u["prompt_tokens"] != 200.0 || u["completion_tokens"] != 20.0 || u["total_tokens"] != 220.0 || u["cached_tokens"] != 128.0 {
		t.Fatalf("session usage: %d %v", code, out)
	}
	code, out = e.do(t, "GET", "/api/v1/usage", "")
	if u, _ := out["usage"].(map[string]any); code != 200 || out["owner"] != "alice" || u["total_tokens"] != 330.0 {
		t.Fatalf("alice's usage: %d %v", code, out)
	}
	code, out = e.do(t, "GET", "/api/v1/usage", "", "X-Test-User", "bob")
	if u, _ := out["usage"].(map[string]any); code != 200 || u["total_tokens"] != 0.0 {
		t.Fatalf("bob's usage: %d %v", code, out)
	}
	code, out = e.do(t, "GET", "/api/v1/sessions/"+sid+"/messages", "")
	msgs, _ := out["messages"].([]any)
	if code != 200 || len(msgs) != 4 {
		t.Fatalf("messages: %d %v", code, out)
	}
	if a := msgs[1].(map[string]any); a["latency_ms"] != 42.0 || a["usage"].(map[string]any)["total_tokens"] != 110.0 {
		t.Fatalf("assistant message metadata: %v", a)
	}
}

// A NUL character cannot be stored by every store: it is refused with a reason, and nothing is kept.
func TestNULInAMessageIsA400(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"a\u0000b","session_id":"`+sid+`"}`)
	if code != 400 || !strings.Contains(errMsg(out), "NUL") {
		t.Fatalf("NUL: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions/"+sid+"/messages", ""); code != 200 || len(out["messages"].([]any)) != 0 {
		t.Fatalf("after refusal: %d %v", code, out)
	}
}
