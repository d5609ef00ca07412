package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/httpapi/uistream"
)

// ui sends a request as user and reads the whole answer.
func (e *env) ui(t *testing.T, user, method, path, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	e.authorize(t, req, "X-Test-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func uiBody(id, text, trigger, messageID string) string {
	b, _ := json.Marshal(map[string]any{
		"id": id, "trigger": trigger, "messageId": messageID,
		"messages": []any{map[string]any{"id": "m1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}}},
	})
	return string(b)
}

// uiChunks parses a UI message stream into its chunks and checks its framing: data-only events,
// [DONE] last.
func uiChunks(t *testing.T, raw string) []uistream.Chunk {
	t.Helper()
	if !strings.HasSuffix(raw, "data: [DONE]\n\n") {
		t.Fatalf("the stream does not end with [DONE]:\n%s", raw)
	}
	var out []uistream.Chunk
	for _, ev := range strings.Split(strings.TrimSuffix(raw, "data: [DONE]\n\n"), "\n\n") {
		if ev == "" || strings.HasPrefix(ev, ":") {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("not a data-only event: %q", ev)
		}
		var c uistream.Chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		out = append(out, c)
	}
	return out
}

func uiMessages(t *testing.T, raw string) []uistream.UIMessage {
	t.Helper()
	var msgs []uistream.UIMessage
	if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
		t.Fatalf("messages: %v %q", err, raw)
	}
	return msgs
}

// TestUIChatIDsArePerUser: useChat's generated chat id names a session of the caller, created on
// first use; two users with the same chat id have two sessions; a chat id that is a session id
// opens that session (the caller's own; another user's is 403).
func TestUIChatIDsArePerUser(t *testing.T) { bothStores(t, testUIChatIDsArePerUser) }

func testUIChatIDsArePerUser(t *testing.T, e *env) {
	ctx := context.Background()
	for _, user := range []string{"alice", "bob"} {
		resp, raw := e.ui(t, user, "POST", "/api/v1/ui/chat", uiBody("sharedChat01", user+" asks", "submit-message", ""))
		if resp.StatusCode != 200 || resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
			t.Fatalf("%s: %d %v %s", user, resp.StatusCode, resp.Header, raw)
		}
		chunks := uiChunks(t, raw)
		if chunks[0].Type != "start" || chunks[len(chunks)-1].Type != "finish" {
			t.Fatalf("%s: chunks %+v", user, chunks)
		}
	}
	for _, user := range []string{"alice", "bob"} {
		sid := uistream.SessionID(user, "sharedChat01")
		sess, err := e.store.GetSession(ctx, sid)
		if err != nil || sess.Owner != user || sess.Title != user+" asks" {
			t.Fatalf("%s's session: %+v %v", user, sess, err)
		}
		_, raw := e.ui(t, user, "GET", "/api/v1/ui/chat/sharedChat01/messages", "")
		msgs := uiMessages(t, raw)
		if len(msgs) != 2 || *msgs[0].Parts[0].Text != user+" asks" || strings.Contains(raw, map[string]string{"alice": "bob", "bob": "alice"}[user]) {
			t.Fatalf("%s's chat: %s", user, raw)
		}
	}
	// A native session, by its id: alice continues it; bob is refused and it does not change.
	sid := e.newSession(t, "alice")
	if resp, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(sid, "native", "submit-message", "")); resp.StatusCode != 200 {
		t.Fatalf("alice on her session: %d %s", resp.StatusCode, raw)
	}
	if h, _ := e.store.History(ctx, sid); len(h) != 2 {
		t.Fatalf("alice's session holds %d messages, want 2", len(h))
	}
	if resp, raw := e.ui(t, "bob", "POST", "/api/v1/ui/chat", uiBody(sid, "mine", "submit-message", "")); resp.StatusCode != 403 {
		t.Fatalf("bob on alice's session: %d %s", resp.StatusCode, raw)
	}
	if h, _ := e.store.History(ctx, sid); len(h) != 2 {
		t.Fatalf("after bob, alice's session holds %d messages", len(h))
	}
	// A chat not used yet: no messages, nothing to resume, and no session made by asking.
	if resp, raw := e.ui(t, "alice", "GET", "/api/v1/ui/chat/neverUsed01/messages", ""); resp.StatusCode != 200 || raw != "[]\n" && raw != "[]" {
		t.Fatalf("unused chat's messages: %d %q", resp.StatusCode, raw)
	}
	if resp, raw := e.ui(t, "alice", "GET", "/api/v1/ui/chat/neverUsed01/stream", ""); resp.StatusCode != 204 || raw != "" {
		t.Fatalf("unused chat's stream: %d %q", resp.StatusCode, raw)
	}
	if _, err := e.store.GetSession(ctx, uistream.SessionID("alice", "neverUsed01")); parley.CodeOf(err) != parley.ECNotFound {
		t.Fatalf("reading an unused chat made its session: %v", err)
	}
}

// TestUIChatBadInput: every malformed request is a 400 (or 409) with its reason, and leaves no
// session behind.
func TestUIChatBadInput(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	withParts := func(role string, parts ...any) string {
		b, _ := json.Marshal(map[string]any{"id": "chatBad01", "messages": []any{map[string]any{"id": "m1", "role": role, "parts": parts}}})
		return string(b)
	}
	text := map[string]any{"type": "text", "text": "hi"}
	cases := []struct {
		name, body string
		status     int
		reason     string
	}{
		{"no id", `{"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, 400, "id: the chat id"},
		{"bad id", uiBody("../etc", "hi", "", ""), 400, "id: the chat id"},
		{"long id", uiBody(strings.Repeat("a", 65), "hi", "", ""), 400, "id: the chat id"},
		{"no messages", `{"id":"chatBad01","messages":[]}`, 400, "messages: must hold"},
		{"last not the user's", withParts("assistant", text), 400, `must be the user's`},
		{"empty text", uiBody("chatBad01", "  ", "", ""), 400, "must not be empty"},
		{"too long", uiBody("chatBad01", strings.Repeat("x", 51), "", ""), 400, "limit is 50"},
		{"not an image", withParts("user", text, map[string]any{"type": "file", "mediaType": "application/pdf", "url": "data:application/pdf;base64,AA=="}), 400, "only images"},
		{"bad image url", withParts("user", text, map[string]any{"type": "file", "mediaType": "image/png", "url": "file:///etc/passwd"}), 400, "data:image"},
		{"unknown trigger", uiBody("chatBad01", "hi", "resume-stream", ""), 400, "trigger: must be"},
		{"edit", uiBody("chatBad01", "hi", "submit-message", "m0"), 400, "editing an earlier message"},
		{"unknown model", `{"id":"chatBad01","model":"gpt-9","messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, 400, `unknown model "gpt-9"`},
		{"wrong type", `{"id":"chatBad01","messages":"hi"}`, 400, "messages"},
		{"malformed JSON", `{"id":"chatBad01",`, 400, "JSON"},
		{"regenerate a new chat", uiBody("chatBad01", "hi", "regenerate-message", ""), 409, "no answer to regenerate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", c.body)
			var out map[string]any
			_ = json.Unmarshal([]byte(raw), &out)
			if resp.StatusCode != c.status || !strings.Contains(errMsg(out), c.reason) {
				t.Fatalf("got %d %s, want %d with %q", resp.StatusCode, raw, c.status, c.reason)
			}
		})
	}
	// Extra fields an app adds with the transport's body option are not errors.
	if resp, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", `{"id":"chatOK01","appField":{"x":1},"messages":[{"id":"m1","role":"user","metadata":{"a":1},"parts":[{"type":"text","text":"hi","providerMetadata":{}}]}],"trigger":"submit-message"}`); resp.StatusCode != 200 {
		t.Fatalf("extra fields: %d %s", resp.StatusCode, raw)
	}
	list, _, _ := e.store.ListSessions(ctx, "alice", parley.Page{Limit: 10})
	if len(list) != 1 || list[0].ID != uistream.SessionID("alice", "chatOK01") {
		t.Fatalf("alice's sessions after bad requests: %+v", list)
	}
}

// TestUIChatRegenerate: regenerating a good answer answers the question again, the new answer a
// sibling of the old (no second copy of the question); regenerating a failed answer retries
// that turn without storing anything new; only the last answer can be regenerated.
func TestUIChatRegenerate(t *testing.T) { bothStores(t, testUIChatRegenerate) }

func testUIChatRegenerate(t *testing.T, e *env) {
	ctx := context.Background()
	const chat = "chatRegen01"
	sid := uistream.SessionID("alice", chat)
	_, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "Q", "submit-message", ""))
	first := uiChunks(t, raw)[0].MessageID

	// Not the last answer: refused, nothing stored.
	if resp, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "Q", "regenerate-message", "someOtherMessage")); resp.StatusCode != 409 || !strings.Contains(raw, "only the chat's last answer") {
		t.Fatalf("regenerate another message: %d %s", resp.StatusCode, raw)
	}
	resp, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "Q", "regenerate-message", first))
	if resp.StatusCode != 200 {
		t.Fatalf("regenerate: %d %s", resp.StatusCode, raw)
	}
	second := uiChunks(t, raw)[0].MessageID
	h, _ := e.store.History(ctx, sid)
	if second == first || len(h) != 2 || h[0].Content.String() != "Q" || h[1].RunID != second || h[1].ParentID != h[0].ID {
		t.Fatalf("after regenerating a good answer: runs %s %s, history %+v", first, second, h)
	}
	_, nodes, _ := e.store.Tree(ctx, sid)
	if len(nodes) != 3 || nodes[1].ParentID != h[0].ID || nodes[2].ParentID != h[0].ID {
		t.Fatalf("the two answers are not siblings: %+v", nodes)
	}
	// The chat's messages are the active branch: the question and its new answer.
	if resp, raw := e.ui(t, "alice", "GET", "/api/v1/ui/chat/"+chat+"/messages", ""); resp.StatusCode != 200 || strings.Count(raw, `"role":"user"`) != 1 {
		t.Fatalf("messages after regenerating: %d %s", resp.StatusCode, raw)
	}

	// A failed answer: regenerating retries the turn (no second copy of the question).
	e.agent.run = func(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error) {
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("par"), RunID: in.RunID,
			Error: parley.ECUpstream, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := e.store.AppendMessages(ctx, in.SessionID, m); err != nil {
			return nil, err
		}
		emit(parley.Event{Type: parley.EventChunk, Content: "par"})
		emit(parley.Event{Type: parley.EventRecord, Message: m})
		return &agent.Result{}, parley.Errorf(parley.ECUpstream, "the provider failed")
	}
	_, raw = e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "Q2", "submit-message", ""))
	chunks := uiChunks(t, raw)
	var sawError bool
	for _, c := range chunks {
		sawError = sawError || c.Type == "error" && c.ErrorText == "the provider failed"
	}
	if last := chunks[len(chunks)-1]; !sawError || last.Type != "finish" || last.FinishReason != "error" {
		t.Fatalf("failed run's chunks: %s", raw)
	}
	e.agent.run = answer(e.store, "Hello there")
	before, _ := e.store.History(ctx, sid)
	resp, raw = e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "Q2", "regenerate-message", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("regenerate the failed answer: %d %s", resp.StatusCode, raw)
	}
	after, _ := e.store.History(ctx, sid)
	if len(after) != len(before)+1 || after[len(after)-1].Role != parley.RoleAssistant || after[len(after)-2].Failed() != true {
		t.Fatalf("retry stored %d messages (want only the answer): %+v", len(after)-len(before), after[len(before)-1:])
	}
}

// TestUIStreamResume: GET …/stream answers 204 when the chat has no run in progress, and
// otherwise streams the run from its start: byte for byte what the POST that started it streams.
func TestUIStreamResume(t *testing.T) {
	e := newEnv(t, nil)
	const chat = "chatResume01"
	_, _ = e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "first", "submit-message", ""))
	if resp, raw := e.ui(t, "alice", "GET", "/api/v1/ui/chat/"+chat+"/stream", ""); resp.StatusCode != 204 || raw != "" {
		t.Fatalf("no run in progress: %d %q", resp.StatusCode, raw)
	}
	release := e.blockRuns(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/ui/chat", strings.NewReader(uiBody(chat, "second", "submit-message", "")))
	req.Header.Set("Content-Type", "application/json")
	e.authorize(t, req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n') // the start chunk: the run is in progress
	if err != nil || !strings.HasPrefix(line, `data: {"type":"start"`) {
		t.Fatalf("first line %q %v", line, err)
	}
	// The resumed stream, read up to its start chunk while the run is held.
	req, _ = http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/ui/chat/"+chat+"/stream", nil)
	e.authorize(t, req)
	resumed, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Body.Close()
	if resumed.StatusCode != 200 || resumed.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
		t.Fatalf("resume: %d %v", resumed.StatusCode, resumed.Header)
	}
	rr := bufio.NewReader(resumed.Body)
	rline, err := rr.ReadString('\n')
	if err != nil || rline != line {
		t.Fatalf("resumed first line %q %v, want %q", rline, err, line)
	}
	release()
	rest, _ := io.ReadAll(br)
	posted := line + string(rest)
	rrest, _ := io.ReadAll(rr)
	if got := rline + string(rrest); got != posted {
		t.Fatalf("the resumed stream differs from the POST's:\n%s\n---\n%s", got, posted)
	}
	uiChunks(t, posted)
}

// TestUIChatFirstMessagesAtOnce: several first messages of one new chat at once make one session;
// one of them is answered and the others are 409 (the session's run is in progress), on both
// stores.
func TestUIChatFirstMessagesAtOnce(t *testing.T) {
	bothStores(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		release := e.blockRuns(t)
		const chat, n = "chatRace01", 4
		resps := make(chan *http.Response, n)
		for range n {
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/api/v1/ui/chat", strings.NewReader(uiBody(chat, "at once", "submit-message", "")))
				req.Header.Set("Content-Type", "application/json")
				e.authorize(t, req)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					resps <- nil
					return
				}
				resps <- resp
			}()
		}
		var ok *http.Response
		conflicts := 0
		for range n {
			resp := <-resps
			if resp == nil {
				t.Fatal("a request failed")
			}
			switch resp.StatusCode {
			case 200:
				if ok != nil {
					t.Fatal("two first messages were both answered")
				}
				ok = resp
				continue
			case 409:
				conflicts++
			default:
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d %s", resp.StatusCode, b)
			}
			resp.Body.Close()
		}
		if ok == nil || conflicts != n-1 {
			t.Fatalf("answered %v, conflicts %d", ok != nil, conflicts)
		}
		release()
		raw, _ := io.ReadAll(ok.Body)
		ok.Body.Close()
		uiChunks(t, string(raw))
		list, _, _ := e.store.ListSessions(ctx, "alice", parley.Page{Limit: 10})
		if len(list) != 1 {
			t.Fatalf("%d sessions", len(list))
		}
		if h, _ := e.store.History(ctx, list[0].ID); len(h) != 2 {
			t.Fatalf("%d messages stored, want the question and its answer", len(h))
		}
	})
}

// TestUIChatAfterDelete: deleting a chat's session (by the id X-Parley-Session names) and using
// the chat id again starts an empty chat, whose stream and history hold only the new turn.
func TestUIChatAfterDelete(t *testing.T) {
	e := newEnv(t, nil)
	const chat = "chatDeleted01"
	resp, raw := e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "before", "submit-message", ""))
	sid := resp.Header.Get("X-Parley-Session")
	if sid != uistream.SessionID("alice", chat) {
		t.Fatalf("X-Parley-Session %q", sid)
	}
	first := uiChunks(t, raw)[0].MessageID
	if code, out := e.do(t, "DELETE", "/api/v1/sessions/"+sid, ""); code != 204 {
		t.Fatalf("delete: %d %v", code, out)
	}
	_, raw = e.ui(t, "alice", "POST", "/api/v1/ui/chat", uiBody(chat, "after", "submit-message", ""))
	chunks := uiChunks(t, raw)
	if chunks[0].MessageID == first || strings.Count(raw, `"type":"start"`) != 1 {
		t.Fatalf("the new chat's stream: %s", raw)
	}
	_, raw = e.ui(t, "alice", "GET", "/api/v1/ui/chat/"+chat+"/messages", "")
	msgs := uiMessages(t, raw)
	if len(msgs) != 2 || *msgs[0].Parts[0].Text != "after" || msgs[1].ID != chunks[0].MessageID {
		t.Fatalf("the new chat's history: %s", raw)
	}
}
