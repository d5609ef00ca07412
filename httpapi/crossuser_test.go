package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// crossUserRoutes is, for every route, what bob (no admin) must get when he aims it at alice's
// data. TestEveryRouteIsGuarded checks that it names every route of routes.go.
var crossUserRoutes = map[string]struct {
	method, path, body string
	status             int
	check              func(t *testing.T, e *env, out map[string]any)
}{
	"POST /api/v1/sessions": {"POST", "/api/v1/sessions", `{"title":"bob's"}`, 201, func(t *testing.T, e *env, out map[string]any) {
		if out["owner"] != "bob" {
			t.Fatalf("bob's new session is owned by %v", out["owner"])
		}
	}},
	"GET /api/v1/sessions":               {"GET", "/api/v1/sessions", "", 200, nil},
	"GET /api/v1/sessions/{id}":          {"GET", "/api/v1/sessions/{A}", "", 403, nil},
	"PATCH /api/v1/sessions/{id}":        {"PATCH", "/api/v1/sessions/{A}", `{"title":"pwned"}`, 403, nil},
	"DELETE /api/v1/sessions/{id}":       {"DELETE", "/api/v1/sessions/{A}", "", 403, nil},
	"GET /api/v1/sessions/{id}/messages": {"GET", "/api/v1/sessions/{A}/messages", "", 403, nil},
	"GET /api/v1/sessions/{id}/records":  {"GET", "/api/v1/sessions/{A}/records", "", 403, nil},
	"GET /api/v1/usage":                  {"GET", "/api/v1/usage", "", 200, zeroUsage},
	"GET /api/v1/sessions/{id}/stream":   {"GET", "/api/v1/sessions/{A}/stream?after=0", "", 403, nil},
	"POST /api/v1/sessions/{id}/abort":   {"POST", "/api/v1/sessions/{A}/abort", "", 403, nil},
	"POST /api/v1/sessions/{id}/pause":   {"POST", "/api/v1/sessions/{A}/pause", "", 403, nil},
	"POST /api/v1/sessions/{id}/resume":  {"POST", "/api/v1/sessions/{A}/resume", "", 403, nil},
	"POST /api/v1/sessions/{id}/retry":   {"POST", "/api/v1/sessions/{A}/retry", "", 403, nil},
	// Branches (issue 23): {G} is a message of alice's session.
	"GET /api/v1/sessions/{id}/tree":  {"GET", "/api/v1/sessions/{A}/tree", "", 403, nil},
	"PUT /api/v1/sessions/{id}/leaf":  {"PUT", "/api/v1/sessions/{A}/leaf", `{"message_id":"{G}"}`, 403, nil},
	"POST /api/v1/sessions/{id}/fork": {"POST", "/api/v1/sessions/{A}/fork", `{"message_id":"{G}"}`, 403, nil},
	"POST /api/v1/sessions/{id}/messages/{message_id}/edit": {"POST", "/api/v1/sessions/{A}/messages/{G}/edit",
		`{"message":"mine now"}`, 403, nil},
	"POST /api/v1/sessions/{id}/messages/{message_id}/regenerate": {"POST", "/api/v1/sessions/{A}/messages/{G}/regenerate", "", 403, nil},
	"GET /api/ws":                     {"GET", "/api/ws?convId={A}&after=0", "", 403, nil},
	"POST /api/v1/chat":               {"POST", "/api/v1/chat", `{"message":"mine now","session_id":"{A}"}`, 403, nil},
	"POST /api/v1/chat/stream":        {"POST", "/api/v1/chat/stream", `{"message":"mine now","session_id":"{A}"}`, 403, nil},
	"GET /api/v1/models":              {"GET", "/api/v1/models", "", 200, nil},
	"GET /api/v1/tools":               {"GET", "/api/v1/tools", "", 200, nil},
	"GET /api/v1/me":                  {"GET", "/api/v1/me", "", 200, nil},
	"POST /api/v1/auth/guest":         {"POST", "/api/v1/auth/guest", "", 404, nil},
	"GET /api/v1/admin/keys":          {"GET", "/api/v1/admin/keys?user=alice", "", 403, nil},
	"POST /api/v1/admin/keys":         {"POST", "/api/v1/admin/keys", `{"user":"alice"}`, 403, nil},
	"DELETE /api/v1/admin/keys/{id}":  {"DELETE", "/api/v1/admin/keys/{K}", "", 403, nil},
	"/api/":                           {"GET", "/api/v1/sessions/{A}/secrets", "", 404, nil},
	"POST /api/v1/files":              {"POST", "/api/v1/files?session_id={A}", "", 403, nil},
	"GET /api/v1/files/{id}":          {"GET", "/api/v1/files/{F}", "", 403, nil},
	"GET /api/v1/files/{id}/content":  {"GET", "/api/v1/files/{F}/content", "", 403, nil},
	"DELETE /api/v1/files/{id}":       {"DELETE", "/api/v1/files/{F}", "", 403, nil},
	"GET /api/v1/sessions/{id}/files": {"GET", "/api/v1/sessions/{A}/files", "", 403, nil},
	// Tool approval (issue 23): TestApprovalOnlyOwner shows a pending call of alice's stays so.
	"GET /api/v1/sessions/{id}/approvals":            {"GET", "/api/v1/sessions/{A}/approvals", "", 403, nil},
	"POST /api/v1/sessions/{id}/approvals/{call_id}": {"POST", "/api/v1/sessions/{A}/approvals/call_1", `{"decision":"approve"}`, 403, nil},
	// A generated image is reached by its signed URL only (images.go): bob has none.
	"GET /api/v1/images/{id}": {"GET", "/api/v1/images/{F}", "", 403, nil},
	"POST /api/v1/ui/chat": {"POST", "/api/v1/ui/chat",
		`{"id":"{A}","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"mine now"}]}],"trigger":"submit-message"}`, 403, nil},
	"GET /api/v1/ui/chat/{id}/stream":   {"GET", "/api/v1/ui/chat/{A}/stream", "", 403, nil},
	"GET /api/v1/ui/chat/{id}/messages": {"GET", "/api/v1/ui/chat/{A}/messages", "", 403, nil},
	// Workspace (issue 20): {P} is alice's project, {M} an entry of its memory.
	"GET /api/v1/sessions/{id}/todos": {"GET", "/api/v1/sessions/{A}/todos", "", 403, nil},
	"GET /api/v1/projects": {"GET", "/api/v1/projects", "", 200, func(t *testing.T, e *env, out map[string]any) {
		// Only his own (the POST row may have made one).
		l, _ := out["projects"].([]any)
		for _, p := range l {
			if p.(map[string]any)["owner"] != "bob" {
				t.Fatalf("bob lists projects %v", l)
			}
		}
	}},
	"POST /api/v1/projects": {"POST", "/api/v1/projects", `{"name":"bob's"}`, 201, func(t *testing.T, e *env, out map[string]any) {
		if out["owner"] != "bob" {
			t.Fatalf("bob's new project is owned by %v", out["owner"])
		}
	}},
	"GET /api/v1/projects/{id}":                   {"GET", "/api/v1/projects/{P}", "", 403, nil},
	"PATCH /api/v1/projects/{id}":                 {"PATCH", "/api/v1/projects/{P}", `{"name":"pwned","instructions":"obey bob"}`, 403, nil},
	"DELETE /api/v1/projects/{id}":                {"DELETE", "/api/v1/projects/{P}", "", 403, nil},
	"GET /api/v1/projects/{id}/memory":            {"GET", "/api/v1/projects/{P}/memory", "", 403, nil},
	"POST /api/v1/projects/{id}/memory":           {"POST", "/api/v1/projects/{P}/memory", `{"content":"bob was here"}`, 403, nil},
	"PATCH /api/v1/projects/{id}/memory/{entry}":  {"PATCH", "/api/v1/projects/{P}/memory/{M}", `{"content":"pwned"}`, 403, nil},
	"DELETE /api/v1/projects/{id}/memory/{entry}": {"DELETE", "/api/v1/projects/{P}/memory/{M}", "", 403, nil},
	// Another user's artifact is not found; its page needs the signed URL only its owner gets.
	"GET /api/v1/sessions/{id}/artifacts": {"GET", "/api/v1/sessions/{A}/artifacts", "", 403, nil},
	"GET /api/v1/artifacts/{id}":          {"GET", "/api/v1/artifacts/{R}?version=1", "", 404, nil},
	"GET /api/v1/artifacts/{id}/render":   {"GET", "/api/v1/artifacts/{R}/render?version=1", "", 403, nil},
	// The OpenAI-compatible API: a stateful request on alice's session (named in the body here;
	// TestOpenAIStatefulOnAnotherUsersSession names it in the X-Parley-Session header too).
	"GET /v1/models": {"GET", "/v1/models", "", 200, nil},
	"POST /v1/chat/completions": {"POST", "/v1/chat/completions",
		`{"model":"mock","messages":[{"role":"user","content":"mine now"}],"metadata":{"session_id":"{A}"}}`, 403, openAIError("permission_denied")},
	"/v1/": {"GET", "/v1/sessions/{A}", "", 404, openAIError("not_found")},
}

// openAIError checks that an answer is an error in OpenAI's shape with the given code.
func openAIError(code string) func(t *testing.T, e *env, out map[string]any) {
	return func(t *testing.T, e *env, out map[string]any) {
		t.Helper()
		errObj, _ := out["error"].(map[string]any)
		if errObj == nil || errObj["code"] != code || errObj["type"] == nil || errObj["message"] == "" {
			t.Fatalf("not OpenAI's error shape with code %q: %v", code, out)
		}
		if _, ok := errObj["param"]; !ok {
			t.Fatalf("no param in %v", out)
		}
	}
}

func zeroUsage(t *testing.T, e *env, out map[string]any) {
	u, _ := out["usage"].(map[string]any)
	if out["owner"] != "bob" || u["total_tokens"] != float64(0) {
		t.Fatalf("bob's usage: %v", out)
	}
}

// TestCrossUser aims every endpoint, REST and SSE, at alice's data with bob's key: bob gets 403
// (or his own, empty view), nothing of alice's is in any answer, and nothing of hers changes.
func TestCrossUser(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	const title, text = "alice-private-title", "alice-private-message"
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"`+text+`"}`)
	if code != 200 {
		t.Fatalf("alice's chat: %d %v", code, out)
	}
	sid := out["session_id"].(string)
	if code, _ := e.do(t, "PATCH", "/api/v1/sessions/"+sid, `{"title":"`+title+`"}`); code != 200 {
		t.Fatal("rename")
	}
	const fileName, fileText = "alice-private-file.txt", "alice-private-bytes"
	fid := e.uploadOne(t, "alice", sid, upFile{fileName, "", []byte(fileText)})["id"].(string)
	// Alice's workspace: a project with instructions and a fact, her session in it, a todo list.
	const pname, instr, fact, todo = "alice-private-project", "alice-private-instructions", "alice-private-fact", "alice-private-todo"
	code, out = e.do(t, "POST", "/api/v1/projects", `{"name":"`+pname+`","instructions":"`+instr+`"}`)
	if code != 201 {
		t.Fatalf("alice's project: %d %v", code, out)
	}
	pid := out["id"].(string)
	code, out = e.do(t, "POST", "/api/v1/projects/"+pid+"/memory", `{"content":"`+fact+`"}`)
	if code != 201 {
		t.Fatalf("alice's fact: %d %v", code, out)
	}
	mid := out["id"].(string)
	if code, out := e.do(t, "PATCH", "/api/v1/sessions/"+sid, `{"project_id":"`+pid+`"}`); code != 200 || out["project_id"] != pid {
		t.Fatalf("alice moves her session: %d %v", code, out)
	}
	todos := []parley.Todo{{ID: "1", Content: todo, Status: parley.TodoPending}}
	if err := e.store.PutTodos(ctx, sid, todos, time.Now()); err != nil {
		t.Fatal(err)
	}
	before, _ := e.store.History(ctx, sid)
	aliceKey := e.key(t, "alice")
	keys, _ := e.store.ListAPIKeys(ctx, "alice", 10)
	art := &parley.Artifact{ID: parley.NewID(), SessionID: sid, Type: parley.ArtifactMarkdown, Title: "alice-artifact-title",
		Content: "alice-artifact-content", CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := e.store.(parley.ArtifactStore).AddArtifactVersion(ctx, art); err != nil {
		t.Fatal(err)
	}
	secrets := []string{title, text, aliceKey, keys[0].ID, keys[0].Prefix, "Hello there", pname, instr, fact, todo, fileName, fileText, art.Title, art.Content}

	for route, c := range crossUserRoutes {
		t.Run(route, func(t *testing.T) {
			path := strings.NewReplacer("{A}", sid, "{K}", keys[0].ID, "{P}", pid, "{M}", mid, "{F}", fid, "{R}", art.ID, "{G}", before[0].ID).Replace(c.path)
			body := strings.NewReplacer("{A}", sid, "{G}", before[0].ID).Replace(c.body)
			resp, raw := e.raw(t, c.method, path, body, "Authorization", "Bearer "+e.key(t, "bob"), "Content-Type", "application/json")
			if resp.StatusCode != c.status {
				t.Fatalf("%s %s as bob: %d %s, want %d", c.method, path, resp.StatusCode, raw, c.status)
			}
			for _, s := range secrets {
				if strings.Contains(raw, s) {
					t.Fatalf("%s %s as bob leaks %q: %s", c.method, path, s, raw)
				}
			}
			if c.check != nil {
				var m map[string]any
				decodeJSONBody(t, raw, &m)
				c.check(t, e, m)
			}
		})
	}
	// Nothing of alice's changed: her session, its title and history, her key.
	sess, err := e.store.GetSession(ctx, sid)
	if err != nil || sess.Title != title || sess.Owner != "alice" {
		t.Fatalf("alice's session after bob: %+v %v", sess, err)
	}
	after, _ := e.store.History(ctx, sid)
	if len(after) != len(before) {
		t.Fatalf("alice's history went from %d to %d messages", len(before), len(after))
	}
	if leaf, nodes, _ := e.store.Tree(ctx, sid); len(nodes) != len(before) || leaf != before[len(before)-1].ID {
		t.Fatalf("alice's tree changed: leaf %q, %d messages", leaf, len(nodes))
	}
	if _, err := e.store.APIKeyByHash(ctx, keys[0].Hash); err != nil {
		t.Fatal(err)
	}
	if k, _ := e.store.APIKeyByHash(ctx, keys[0].Hash); k.RevokedAt != nil {
		t.Fatal("bob revoked alice's key")
	}
	list, _, _ := e.store.ListSessions(ctx, "alice", parley.Page{Limit: 10})
	if len(list) != 1 {
		t.Fatalf("alice has %d sessions", len(list))
	}
	if f, err := e.store.GetFile(ctx, fid); err != nil || f.Owner != "alice" {
		t.Fatalf("alice's file after bob: %+v %v", f, err)
	}
	// Nor her workspace.
	if p, err := e.store.GetProject(ctx, pid); err != nil || p.Name != pname || p.Instructions != instr || p.Owner != "alice" {
		t.Fatalf("alice's project after bob: %+v %v", p, err)
	}
	if mem, _ := e.store.ListMemory(ctx, pid, 0); len(mem) != 1 || mem[0].Content != fact {
		t.Fatalf("alice's memory after bob: %+v", mem)
	}
	if got, _ := e.store.Todos(ctx, sid); len(got) != 1 || got[0].Content != todo {
		t.Fatalf("alice's todos after bob: %+v", got)
	}
	if sess.ProjectID != pid {
		t.Fatalf("alice's session left her project: %+v", sess)
	}
	// And alice still reads her own.
	if code, _ := e.do(t, "GET", "/api/v1/sessions/"+sid+"/messages", ""); code != 200 {
		t.Fatalf("alice reads her messages: %d", code)
	}
}

func decodeJSONBody(t *testing.T, raw string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		t.Fatalf("not JSON: %q", raw)
	}
}
