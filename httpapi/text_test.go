package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/postgres"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// bothStores runs fn against an env on SQLite and one on PostgreSQL (a schema of its own).
func bothStores(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, newEnv(t, nil))
	})
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		st, err := postgres.Open(ctx, pgtest.Schema(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, newEnvOn(t, st, runs.Options{}, nil))
	})
}

// rawDo sends body as it is (bytes that are not UTF-8 included) and returns the status and the
// error message.
func (e *env) rawDo(t *testing.T, method, path string, body []byte, user string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	e.authorize(t, req, "X-Test-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	decodeJSONBody(t, string(raw), &out)
	return resp.StatusCode, errMsg(out)
}

// TestTextFieldsAreChecked sends every text field of every route that takes one with a NUL, a
// terminal escape, a bidi override or bytes that are not UTF-8, on both stores: each is a 400
// that names the field and the character (never a 500), and nothing is created or changed.
func TestTextFieldsAreChecked(t *testing.T) {
	bothStores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		sid := e.newSession(t, "alice")
		e.key(t, "admin")
		keysBefore, err := e.store.ListAPIKeys(ctx, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		const (
			nul  = `\u0000`
			ansi = `\u001b[2J\u001b[31m`
			bidi = `\u202e`
			c1   = `\u009b`
		)
		cases := []struct {
			name, method, path, body, user, reason string
		}{
			{"NUL in a new session's title", "POST", "/api/v1/sessions", `{"title":"a` + nul + `b"}`, "alice", "title: the NUL character"},
			{"escape in a new session's title", "POST", "/api/v1/sessions", `{"title":"` + ansi + `x"}`, "alice", "title: a control character (U+001B)"},
			{"bidi override in a new session's title", "POST", "/api/v1/sessions", `{"title":"cod` + bidi + `exe.txt"}`, "alice", "title: a bidirectional override"},
			{"newline in a new session's title", "POST", "/api/v1/sessions", `{"title":"two\nlines"}`, "alice", "title: a control character (U+000A)"},
			{"NUL in a rename", "PATCH", "/api/v1/sessions/" + sid, `{"title":"a` + nul + `"}`, "alice", "title: the NUL character"},
			{"bidi isolate in a rename", "PATCH", "/api/v1/sessions/" + sid, `{"title":"a\u2067b"}`, "alice", "title: a bidirectional override"},
			{"NUL in a new chat's message", "POST", "/api/v1/chat", `{"message":"hi` + nul + `"}`, "alice", "message: the NUL character"},
			{"escape in a new streamed chat's message", "POST", "/api/v1/chat/stream", `{"message":"hi` + ansi + `"}`, "alice", "message: a control character"},
			{"C1 control in a chat's message", "POST", "/api/v1/chat", `{"message":"hi` + c1 + `","session_id":"` + sid + `"}`, "alice", "message: a control character (U+009B)"},
			{"NUL in a model name", "POST", "/api/v1/chat", `{"message":"hi","model":"mock` + nul + `"}`, "alice", "model: the NUL character"},
			{"escape in a model name", "POST", "/api/v1/chat/stream", `{"message":"hi","model":"` + ansi + `"}`, "alice", "model: a control character"},
			{"bidi in a selected tool", "POST", "/api/v1/chat", `{"message":"hi","selected_tools":["calculator","x` + bidi + `"]}`, "alice", "selected_tools[1]: a bidirectional override"},
			{"NUL in an image URL", "POST", "/api/v1/chat", `{"message":"hi","binary_content":[{"type":"image_url","image_url":{"url":"https://x/` + nul + `"}}]}`, "alice", "binary_content[0].image_url.url: the NUL character"},
			{"NUL in a key's user", "POST", "/api/v1/admin/keys", `{"user":"bob` + nul + `"}`, "admin", "user: the NUL character"},
			{"escape in a key's user", "POST", "/api/v1/admin/keys", `{"user":"` + ansi + `bob"}`, "admin", "user: a control character"},
			{"NUL in a key's name", "POST", "/api/v1/admin/keys", `{"user":"bob","name":"lap` + nul + `top"}`, "admin", "name: the NUL character"},
			{"escape in a key's name", "POST", "/api/v1/admin/keys", `{"user":"bob","name":"` + ansi + `laptop"}`, "admin", "name: a control character"},
			{"bidi override in a key's name", "POST", "/api/v1/admin/keys", `{"user":"bob","name":"lap` + bidi + `top"}`, "admin", "name: a bidirectional override"},
			{"NUL in the user of a key listing", "GET", "/api/v1/admin/keys?user=bob%00", "", "admin", "user: the NUL character"},
			{"escape in a title search", "GET", "/api/v1/sessions?q=%1B%5B31m", "", "alice", "q: a control character"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				code, out := e.do(t, c.method, c.path, c.body, "X-Test-User", c.user)
				if code != 400 || !strings.Contains(errMsg(out), c.reason) {
					t.Fatalf("got %d %v, want 400 with %q", code, out, c.reason)
				}
			})
		}
		// Bytes that are not UTF-8, which encoding/json would turn into U+FFFD and store.
		for _, c := range []struct{ method, path, body, user string }{
			{"POST", "/api/v1/sessions", "{\"title\":\"caf\xe9\"}", "alice"},
			{"PATCH", "/api/v1/sessions/" + sid, "{\"title\":\"caf\xe9\"}", "alice"},
			{"POST", "/api/v1/chat", "{\"message\":\"caf\xe9\"}", "alice"},
			{"POST", "/api/v1/chat/stream", "{\"message\":\"ok\",\"model\":\"m\xff\"}", "alice"},
			{"POST", "/api/v1/admin/keys", "{\"user\":\"bob\",\"name\":\"\xc0\xaf\"}", "admin"},
		} {
			if code, msg := e.rawDo(t, c.method, c.path, []byte(c.body), c.user); code != 400 || !strings.Contains(msg, "not valid UTF-8 at byte") {
				t.Errorf("%s %s with invalid UTF-8: %d %q", c.method, c.path, code, msg)
			}
		}

		// Nothing was created or changed.
		list, _, err := e.store.ListSessions(ctx, "alice", parley.Page{Limit: 10})
		if err != nil || len(list) != 1 || list[0].ID != sid || list[0].Title != "t" {
			t.Fatalf("alice's sessions after the refusals: %+v %v", list, err)
		}
		if msgs, err := e.store.History(ctx, sid); err != nil || len(msgs) != 0 {
			t.Fatalf("messages stored: %d %v", len(msgs), err)
		}
		keysAfter, err := e.store.ListAPIKeys(ctx, "", 100)
		if err != nil || len(keysAfter) != len(keysBefore) {
			t.Fatalf("keys before %d, after %d (%v)", len(keysBefore), len(keysAfter), err)
		}

		// What is allowed still is: newlines, tabs and right-to-left text in a message; RTL
		// letters in a title. The new chat's title is the message's first line, tabs as spaces.
		code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"שלום\tworld\r\nsecond line"}`)
		if code != 200 {
			t.Fatalf("a message with a tab and a newline: %d %v", code, out)
		}
		sess, err := e.store.GetSession(ctx, out["session_id"].(string))
		if err != nil || sess.Title != "שלום world" {
			t.Fatalf("the new chat's title: %+v %v", sess, err)
		}
		if code, out := e.do(t, "PATCH", "/api/v1/sessions/"+sid, `{"title":"مرحبا"}`); code != 200 {
			t.Fatalf("an RTL title: %d %v", code, out)
		}
	})
}

// TestWebSocketTextFieldsAreChecked: a user_message frame's text, model and tools, and a frame's
// id, pass the same check; the refusal names the field, and nothing is created.
func TestWebSocketTextFieldsAreChecked(t *testing.T) {
	bothStores(t, func(t *testing.T, e *env) {
		c := e.ws(t, "alice", "")
		c.expect("status", "")
		for _, fr := range []struct{ frame, id, reason string }{
			{`{"type":"user_message","id":"m1","data":{"text":"hi\u0000"}}`, "m1", "message: the NUL character"},
			{`{"type":"user_message","id":"m2","data":{"text":"hi\u001b[31m"}}`, "m2", "message: a control character"},
			{`{"type":"user_message","id":"m3","data":{"text":"hi","model":"mo\u202edel"}}`, "m3", "model: a bidirectional override"},
			{`{"type":"user_message","id":"m4","data":{"text":"hi","selected_tools":["a\u0007"]}}`, "m4", "selected_tools[0]: a control character"},
			{`{"type":"ping","id":"p\u001b[2J"}`, "", "id: a control character"},
			{"{\"type\":\"user_message\",\"id\":\"m5\",\"data\":{\"text\":\"caf\xe9\"}}", "", "not valid UTF-8"},
		} {
			c.send(fr.frame)
			f := c.expect("error", fr.id)
			var body struct{ Code, Message string }
			decodeJSONBody(t, string(f.Data), &body)
			if body.Code != string(parley.ECInvalid) || !strings.Contains(body.Message, fr.reason) {
				t.Fatalf("%s: %s, want invalid with %q", fr.frame, f.Data, fr.reason)
			}
		}
		list, _, err := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 10})
		if err != nil || len(list) != 0 {
			t.Fatalf("sessions after refused frames: %d %v", len(list), err)
		}
	})
}
