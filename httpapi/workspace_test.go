package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// TestProjectsAPI walks the project and memory routes as their owner: create, list, read, change,
// the memory's add, search, edit and delete, sessions put into and taken out of the project, and
// deleting it (its sessions stay, without a project).
func TestProjectsAPI(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	code, p := e.do(t, "POST", "/api/v1/projects", `{"name":"  Garden  ","instructions":"Use metric units."}`)
	if code != 201 || p["name"] != "Garden" || p["instructions"] != "Use metric units." || p["owner"] != "alice" {
		t.Fatalf("create: %d %v", code, p)
	}
	pid := p["id"].(string)
	if code, out := e.do(t, "GET", "/api/v1/projects", ""); code != 200 || len(out["projects"].([]any)) != 1 {
		t.Fatalf("list: %d %v", code, out)
	}
	if code, out := e.do(t, "PATCH", "/api/v1/projects/"+pid, `{"instructions":"Use metric units. Be brief."}`); code != 200 ||
		out["instructions"] != "Use metric units. Be brief." || out["name"] != "Garden" {
		t.Fatalf("patch: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", "/api/v1/projects/"+pid, ""); code != 200 || out["instructions"] != "Use metric units. Be brief." {
		t.Fatalf("get: %d %v", code, out)
	}

	// Memory.
	var ids []string
	for _, f := range []string{"The soil is clay.", "Tomatoes go in the south bed.", "The hose leaks."} {
		code, out := e.do(t, "POST", "/api/v1/projects/"+pid+"/memory", `{"content":"`+f+`"}`)
		if code != 201 || out["content"] != f || out["project_id"] != pid {
			t.Fatalf("add %q: %d %v", f, code, out)
		}
		ids = append(ids, out["id"].(string))
	}
	code, out := e.do(t, "GET", "/api/v1/projects/"+pid+"/memory", "")
	mem := out["memory"].([]any)
	if code != 200 || len(mem) != 3 || mem[0].(map[string]any)["id"] != ids[2] {
		t.Fatalf("memory, newest first: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", "/api/v1/projects/"+pid+"/memory?q=SOUTH+tomatoes", ""); code != 200 || len(out["memory"].([]any)) != 1 {
		t.Fatalf("search: %d %v", code, out)
	}
	if code, out := e.do(t, "PATCH", "/api/v1/projects/"+pid+"/memory/"+ids[2], `{"content":"The hose is fixed."}`); code != 200 || out["content"] != "The hose is fixed." {
		t.Fatalf("edit: %d %v", code, out)
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/projects/"+pid+"/memory/"+ids[0], ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/projects/"+pid+"/memory/"+ids[0], ""); code != 404 {
		t.Fatalf("delete again: %d", code)
	}

	// Sessions: made in the project, moved in and out, listed by project.
	code, s1 := e.do(t, "POST", "/api/v1/sessions", `{"title":"in it","project_id":"`+pid+`"}`)
	if code != 201 || s1["project_id"] != pid {
		t.Fatalf("session in project: %d %v", code, s1)
	}
	code, s2 := e.do(t, "POST", "/api/v1/sessions", `{"title":"loose"}`)
	if code != 201 || s2["project_id"] != nil {
		t.Fatalf("loose session: %d %v", code, s2)
	}
	if code, out := e.do(t, "PATCH", "/api/v1/sessions/"+s2["id"].(string), `{"project_id":"`+pid+`","title":"moved"}`); code != 200 ||
		out["project_id"] != pid || out["title"] != "moved" {
		t.Fatalf("move in: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions?project_id="+pid, ""); code != 200 || len(out["sessions"].([]any)) != 2 {
		t.Fatalf("sessions of the project: %d %v", code, out)
	}
	if code, out := e.do(t, "PATCH", "/api/v1/sessions/"+s2["id"].(string), `{"project_id":""}`); code != 200 || out["project_id"] != nil {
		t.Fatalf("move out: %d %v", code, out)
	}
	// A chat without a session makes one in the project.
	code, out = e.do(t, "POST", "/api/v1/chat", `{"message":"hi","project_id":"`+pid+`"}`)
	if code != 200 {
		t.Fatalf("chat in project: %d %v", code, out)
	}
	if sess, err := e.store.GetSession(ctx, out["session_id"].(string)); err != nil || sess.ProjectID != pid {
		t.Fatalf("the chat's session: %+v %v", sess, err)
	}

	// Deleting the project keeps its sessions, outside any project.
	if code, _ := e.do(t, "DELETE", "/api/v1/projects/"+pid, ""); code != 204 {
		t.Fatalf("delete project: %d", code)
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions/"+s1["id"].(string), ""); code != 200 || out["project_id"] != nil {
		t.Fatalf("session of the deleted project: %d %v", code, out)
	}
	for _, path := range []string{"/api/v1/projects/" + pid, "/api/v1/projects/" + pid + "/memory"} {
		if code, _ := e.do(t, "GET", path, ""); code != 404 {
			t.Fatalf("GET %s after delete: %d", path, code)
		}
	}
}

// TestProjectsBadInput: each bad request is a 400 that says what is wrong, and stores nothing.
func TestProjectsBadInput(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	_, p := e.do(t, "POST", "/api/v1/projects", `{"name":"P"}`)
	pid := p["id"].(string)
	_, s := e.do(t, "POST", "/api/v1/sessions", `{}`)
	sid := s["id"].(string)
	long := strings.Repeat("x", parley.MaxMemoryChars+1)
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/api/v1/projects", `{}`, "name: required"},
		{"POST", "/api/v1/projects", `{"name":"   "}`, "name: required and must not be empty"},
		{"POST", "/api/v1/projects", `{"name":"a\nb"}`, "name"},
		{"POST", "/api/v1/projects", `{"name":"P","color":"red"}`, "color"},
		{"PATCH", "/api/v1/projects/" + pid, `{}`, "nothing to change"},
		{"POST", "/api/v1/projects/" + pid + "/memory", `{"content":""}`, "content: required"},
		{"POST", "/api/v1/projects/" + pid + "/memory", `{"content":"` + long + `"}`, "the limit is 2000"},
		{"PATCH", "/api/v1/sessions/" + sid, `{}`, "nothing to change"},
		{"PATCH", "/api/v1/sessions/" + sid, `{"project_id":"../x"}`, "project_id: not a valid id"},
		{"GET", "/api/v1/sessions?project_id=../x", "", "project_id: not a valid id"},
		{"GET", "/api/v1/projects/" + pid + "/memory?q=" + strings.Repeat("q", 201), "", "q: 201 characters, the limit is 200"},
		{"POST", "/api/v1/chat", `{"message":"hi","session_id":"` + sid + `","project_id":"` + pid + `"}`, "only for a new session"},
	} {
		code, out := e.do(t, c.method, c.path, c.body)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("%s %s %s: %d %v, want 400 with %q", c.method, c.path, c.body, code, out, c.want)
		}
	}
	if mem, _ := e.store.ListMemory(ctx, pid, 0); len(mem) != 0 {
		t.Fatalf("bad requests stored %+v", mem)
	}
	if list, _, _ := e.store.ListProjects(ctx, "alice", parley.Page{}); len(list) != 1 || list[0].Name != "P" {
		t.Fatalf("projects after bad requests: %+v", list)
	}
	// Unknown ids are 404.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/projects/nope", ""},
		{"POST", "/api/v1/sessions", `{"project_id":"nope"}`},
		{"PATCH", "/api/v1/sessions/" + sid, `{"project_id":"nope"}`},
		{"POST", "/api/v1/chat", `{"message":"hi","project_id":"nope"}`},
		{"PATCH", "/api/v1/projects/" + pid + "/memory/nope", `{"content":"x"}`},
		{"GET", "/api/v1/sessions/nope/todos", ""},
	} {
		if code, out := e.do(t, c.method, c.path, c.body); code != 404 {
			t.Errorf("%s %s: %d %v, want 404", c.method, c.path, code, out)
		}
	}
	if list, _, _ := e.store.ListSessions(ctx, "alice", parley.Page{}); len(list) != 1 {
		t.Fatalf("a refused request made a session: %d sessions", len(list))
	}
}

// TestProjectsOfAnotherUser: bob cannot put his sessions into alice's project, make a session or a
// chat in it, or list her project's sessions; her project is unchanged.
func TestProjectsOfAnotherUser(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	_, p := e.do(t, "POST", "/api/v1/projects", `{"name":"alice's"}`)
	pid := p["id"].(string)
	_, s := e.do(t, "POST", "/api/v1/sessions", `{"project_id":"`+pid+`"}`)
	bob := []string{"Authorization", "Bearer " + e.key(t, "bob")}
	_, bs := e.do(t, "POST", "/api/v1/sessions", `{}`, bob...)
	bsid := bs["id"].(string)
	for _, c := range []struct{ method, path, body string }{
		{"PATCH", "/api/v1/sessions/" + bsid, `{"project_id":"` + pid + `"}`},
		{"POST", "/api/v1/sessions", `{"project_id":"` + pid + `"}`},
		{"POST", "/api/v1/chat", `{"message":"hi","project_id":"` + pid + `"}`},
	} {
		if code, out := e.do(t, c.method, c.path, c.body, bob...); code != 403 {
			t.Errorf("bob %s %s: %d %v, want 403", c.method, c.path, code, out)
		}
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions?project_id="+pid, "", bob...); code != 200 || len(out["sessions"].([]any)) != 0 {
		t.Fatalf("bob lists alice's project's sessions: %d %v", code, out)
	}
	if sess, _ := e.store.GetSession(ctx, bsid); sess.ProjectID != "" {
		t.Fatal("bob's session went into alice's project")
	}
	if list, _, _ := e.store.ListSessions(ctx, "alice", parley.Page{Project: pid}); len(list) != 1 || list[0].ID != s["id"] {
		t.Fatalf("alice's project's sessions: %+v", list)
	}
	if list, _, _ := e.store.ListSessions(ctx, "bob", parley.Page{}); len(list) != 1 {
		t.Fatalf("bob has %d sessions", len(list))
	}
}

// TestTodosRoute: GET /api/v1/sessions/{id}/todos returns the stored list ([] before any).
func TestTodosRoute(t *testing.T) {
	e := newEnv(t, nil)
	_, s := e.do(t, "POST", "/api/v1/sessions", `{}`)
	sid := s["id"].(string)
	if code, out := e.do(t, "GET", "/api/v1/sessions/"+sid+"/todos", ""); code != 200 || out["todos"] == nil || len(out["todos"].([]any)) != 0 {
		t.Fatalf("empty list: %d %v", code, out)
	}
	list := []parley.Todo{{ID: "a", Content: "plan", Status: parley.TodoCompleted}, {ID: "b", Content: "do", Status: parley.TodoInProgress}}
	if err := e.store.PutTodos(context.Background(), sid, list, time.Now()); err != nil {
		t.Fatal(err)
	}
	code, out := e.do(t, "GET", "/api/v1/sessions/"+sid+"/todos", "")
	got := out["todos"].([]any)
	if code != 200 || len(got) != 2 || got[1].(map[string]any)["status"] != "in_progress" || got[0].(map[string]any)["content"] != "plan" {
		t.Fatalf("list: %d %v", code, out)
	}
}
