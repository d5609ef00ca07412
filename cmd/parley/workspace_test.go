package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// apiJSON sends a JSON request to a server without authentication (loopback) and decodes the
// answer.
func apiJSON(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: not JSON: %s", method, url, b)
		}
	}
	return resp.StatusCode, out
}

// streamChat runs one chat turn over SSE and returns every event up to done.
func streamChat(t *testing.T, url string, body map[string]any) []parley.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := postStream(t, ctx, url, body)
	defer resp.Body.Close()
	var evs []parley.Event
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		evs = append(evs, ev.Data)
		return ev.Data.Type != parley.EventDone
	})
	if len(evs) == 0 || evs[len(evs)-1].Type != parley.EventDone {
		t.Fatalf("the stream ended without a done event: %+v", evs)
	}
	return evs
}

func toolCall(id, name, args string) parley.ToolCall {
	return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: name, Arguments: args}}
}

// systemOf is the system message of an upstream request ("" when it has none).
func systemOf(r llmtest.Request) string {
	if len(r.Messages) > 0 && r.Messages[0].Role == parley.RoleSystem {
		return r.Messages[0].Content.String()
	}
	return ""
}

// TestTodoUpdatesReachEveryWebSocketClient: two WebSocket clients of one session see the same
// todo_update frames, numbered like the run's other events; a todo_write the rules refuse (two
// items in progress) is a tool result that says why, changes nothing and sends no update; a client
// that resumes over SSE from the start gets the same updates in the same order; GET todos returns
// the last list.
func TestTodoUpdatesReachEveryWebSocketClient(t *testing.T) {
	s := startGoldenServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, sess := apiJSON(t, "POST", s.url+"/api/v1/sessions", `{"title":"todos"}`)
	if code != 201 {
		t.Fatalf("session: %d %v", code, sess)
	}
	sid := sess["id"].(string)

	first := `{"todos":[{"id":"1","content":"Read the brief","status":"in_progress"},{"id":"2","content":"Write the code","status":"pending"}]}`
	bad := `{"todos":[{"id":"1","content":"Read the brief","status":"in_progress"},{"id":"2","content":"Write the code","status":"in_progress"}]}`
	second := `{"todos":[{"id":"1","content":"Read the brief","status":"completed"},{"id":"2","content":"Write the code","status":"in_progress"}]}`
	s.up.fake.Enqueue(
		llmtest.Turn{ToolCalls: []parley.ToolCall{toolCall("call_t1", "todo_write", first)}},
		llmtest.Turn{ToolCalls: []parley.ToolCall{toolCall("call_t2", "todo_write", bad)}},
		llmtest.Turn{ToolCalls: []parley.ToolCall{toolCall("call_t3", "todo_write", second)}},
		llmtest.Turn{Content: "Planned."},
	)
	a := s.ws(t, ctx, "?convId="+sid+"&after=0")
	b := s.ws(t, ctx, "?convId="+sid+"&after=0")
	a.send("user_message", "m1", map[string]any{"text": "Plan the work."})
	a.until(isType(parley.EventDone))
	b.until(isType(parley.EventDone))

	updates := func(w *wsStream) []string {
		var out []string
		for _, f := range w.frames {
			var fr wsFrame
			if err := json.Unmarshal([]byte(f), &fr); err != nil {
				t.Fatal(err)
			}
			if fr.Type == "todo_update" {
				out = append(out, f)
			}
		}
		return out
	}
	ua, ub := updates(a), updates(b)
	if len(ua) != 2 || !reflect.DeepEqual(ua, ub) {
		t.Fatalf("client A saw\n%s\nclient B saw\n%s", strings.Join(ua, "\n"), strings.Join(ub, "\n"))
	}
	var last wsFrame
	json.Unmarshal([]byte(ua[1]), &last)
	var ev parley.Event
	json.Unmarshal(last.Data, &ev)
	want := []parley.Todo{{ID: "1", Content: "Read the brief", Status: "completed"}, {ID: "2", Content: "Write the code", Status: "in_progress"}}
	if ev.Type != parley.EventTodoUpdate || ev.SessionID != sid || ev.Seq != last.Seq || !reflect.DeepEqual(ev.Todos, want) {
		t.Fatalf("last update: %s", ua[1])
	}

	// The refused call's result tells the model why; the list it sent was not stored.
	msgs := getMessages(t, s.url, sid)
	var refused *parley.Message
	for i := range msgs {
		if msgs[i].ToolCallID == "call_t2" {
			refused = &msgs[i]
		}
	}
	if refused == nil || refused.Success == nil || *refused.Success ||
		!strings.Contains(refused.Content.String(), "at most one item may be in_progress; todos[0], todos[1] are") {
		t.Fatalf("the refused todo_write's result: %+v", refused)
	}

	// A client resuming from the start gets the same updates, same numbers, in order.
	sse := s.sse(t, ctx, "GET", "/api/v1/sessions/"+sid+"/stream?after=0", "")
	var resumed []parley.Event
	sse.until(func(ev *parley.Event) bool {
		if ev.Type == parley.EventTodoUpdate {
			resumed = append(resumed, *ev)
		}
		return ev.Type == parley.EventDone
	})
	if len(resumed) != 2 || resumed[1].Seq != last.Seq || !reflect.DeepEqual(resumed[1].Todos, want) || resumed[0].Seq >= resumed[1].Seq {
		t.Fatalf("resumed updates: %+v", resumed)
	}

	// A client loads the list over its WebSocket (seed 002's "load todos if present").
	n := len(b.replies)
	b.send("control", "t1", map[string]any{"action": "get_todos"})
	b.waitReplies(n + 1)
	var reply struct {
		Type string
		ID   string
		Data struct {
			Action string
			Todos  []parley.Todo
		}
	}
	if err := json.Unmarshal([]byte(b.replies[n]), &reply); err != nil || reply.Type != "control_response" || reply.ID != "t1" ||
		reply.Data.Action != "get_todos" || !reflect.DeepEqual(reply.Data.Todos, want) {
		t.Fatalf("get_todos: %s %v", b.replies[n], err)
	}

	code, out := apiJSON(t, "GET", s.url+"/api/v1/sessions/"+sid+"/todos", "")
	raw, _ := json.Marshal(out["todos"])
	var got []parley.Todo
	if err := json.Unmarshal(raw, &got); code != 200 || err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("GET todos: %d %s", code, raw)
	}
}

// TestWorkspaceSurvivesRestartAndReachesTheNextSession runs parley serve as a process on a SQLite
// file: a session of a project saves a fact and a todo list; the process is killed (SIGKILL) and
// started again on the same file; the todo list and the fact are still there, and a second session
// of the project is sent the project's instructions and the fact in its system prompt (the request
// the fake upstream receives), while a session outside the project is sent neither.
func TestWorkspaceSurvivesRestartAndReachesTheNextSession(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	db := filepath.Join(t.TempDir(), "p.db")
	args := []string{"--db", db, "--openai-base-url", hs.URL + "/v1", "--model", "openai/gpt-4o", "--provider-attempts", "1"}
	c := startChild(t, args...)

	const instr, fact = "Answer in one short sentence.", "The user's dog is named Biscuit."
	code, p := apiJSON(t, "POST", c.url+"/api/v1/projects", `{"name":"Pets","instructions":"`+instr+`"}`)
	if code != 201 {
		t.Fatalf("project: %d %v", code, p)
	}
	pid := p["id"].(string)
	code, s1 := apiJSON(t, "POST", c.url+"/api/v1/sessions", `{"title":"first","project_id":"`+pid+`"}`)
	if code != 201 {
		t.Fatalf("session: %d %v", code, s1)
	}
	sid := s1["id"].(string)
	fake.Enqueue(
		llmtest.Turn{ToolCalls: []parley.ToolCall{
			toolCall("call_m1", "memory_save", `{"content":"`+fact+`"}`),
			toolCall("call_t1", "todo_write", `{"todos":[{"id":"walk","content":"Walk Biscuit","status":"pending"}]}`),
		}},
		llmtest.Turn{Content: "Noted."},
	)
	before := len(fake.Requests())
	evs := streamChat(t, c.url, map[string]any{"message": "My dog is Biscuit; remind me to walk him.", "session_id": sid})
	var memUpdate *parley.Event
	for i := range evs {
		if evs[i].Type == parley.EventMemoryUpdate {
			memUpdate = &evs[i]
		}
	}
	if memUpdate == nil || memUpdate.Memory.Action != "saved" || memUpdate.Memory.Entry.Content != fact || memUpdate.Memory.ProjectID != pid {
		t.Fatalf("no memory_update for the saved fact: %+v", evs)
	}
	reqs := fake.Requests()[before:]
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	if sys := systemOf(reqs[0]); !strings.Contains(sys, instr) || !strings.Contains(sys, "memory is empty") || strings.Contains(sys, "Biscuit") {
		t.Fatalf("first call's system prompt: %q", sys)
	}
	// The fact is in the prompt of the run's next model call already.
	if sys := systemOf(reqs[1]); !strings.Contains(sys, fact) {
		t.Fatalf("second call's system prompt: %q", sys)
	}

	c.kill(t)
	c = startChild(t, args...)

	code, out := apiJSON(t, "GET", c.url+"/api/v1/sessions/"+sid+"/todos", "")
	if todos, _ := out["todos"].([]any); code != 200 || len(todos) != 1 || todos[0].(map[string]any)["content"] != "Walk Biscuit" {
		t.Fatalf("todos after restart: %d %v", code, out)
	}
	code, out = apiJSON(t, "GET", c.url+"/api/v1/projects/"+pid+"/memory", "")
	if mem, _ := out["memory"].([]any); code != 200 || len(mem) != 1 || mem[0].(map[string]any)["content"] != fact ||
		mem[0].(map[string]any)["session_id"] != sid {
		t.Fatalf("memory after restart: %d %v", code, out)
	}

	// A second session of the project, made by its first message.
	fake.Enqueue(llmtest.Turn{Content: "Biscuit."})
	before = len(fake.Requests())
	evs = streamChat(t, c.url, map[string]any{"message": "What is my dog called?", "project_id": pid})
	if evs[0].SessionID == sid {
		t.Fatal("the second chat went to the first session")
	}
	reqs = fake.Requests()[before:]
	sys := systemOf(reqs[0])
	if len(reqs) != 1 || !strings.Contains(sys, instr) || !strings.Contains(sys, fact) || !strings.Contains(sys, `project "Pets"`) {
		t.Fatalf("the second session's system prompt: %q", sys)
	}
	// The raw body the upstream received holds it too, as the system message.
	var raw struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(reqs[0].Raw, &raw); err != nil || raw.Messages[0].Role != "system" || !strings.Contains(raw.Messages[0].Content, fact) {
		t.Fatalf("raw upstream body: %s %v", reqs[0].Raw, err)
	}

	// A session outside the project is sent no project prompt.
	fake.Enqueue(llmtest.Turn{Content: "I don't know."})
	before = len(fake.Requests())
	streamChat(t, c.url, map[string]any{"message": "What is my dog called?"})
	if sys := systemOf(fake.Requests()[before]); strings.Contains(sys, "Biscuit") || strings.Contains(sys, instr) {
		t.Fatalf("a session outside the project got %q", sys)
	}
}

// TestWebSocketFirstMessageInAProject: a WebSocket user_message with project_id creates its
// session in that project (the UI's "New chat in …"), whose model call gets the project's prompt;
// project_id on a connection that already has its session is refused, and nothing is stored.
func TestWebSocketFirstMessageInAProject(t *testing.T) {
	s := startGoldenServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, p := apiJSON(t, "POST", s.url+"/api/v1/projects", `{"name":"Garden","instructions":"Use metric units."}`)
	if code != 201 {
		t.Fatalf("project: %d %v", code, p)
	}
	pid := p["id"].(string)
	s.up.fake.Enqueue(llmtest.Turn{Content: "Metres it is."})
	before := len(s.up.fake.Requests())
	w := s.ws(t, ctx, "")
	w.send("user_message", "m1", map[string]any{"text": "How long is the bed?", "project_id": pid})
	start := w.until(isType(parley.EventStart))
	w.until(isType(parley.EventDone))
	code, sess := apiJSON(t, "GET", s.url+"/api/v1/sessions/"+start.SessionID, "")
	if code != 200 || sess["project_id"] != pid {
		t.Fatalf("the session the message made: %d %v", code, sess)
	}
	if sys := systemOf(s.up.fake.Requests()[before]); !strings.Contains(sys, "Use metric units.") {
		t.Fatalf("system prompt: %q", sys)
	}

	// On a connection to an existing session, project_id is refused.
	w2 := s.ws(t, ctx, "?convId="+start.SessionID)
	n := len(w2.replies)
	w2.send("user_message", "m2", map[string]any{"text": "Again", "project_id": pid})
	w2.waitReplies(n + 1)
	if r := w2.replies[n]; !strings.Contains(r, `"type":"error"`) || !strings.Contains(r, "only for a new session") {
		t.Fatalf("project_id on an existing session: %s", r)
	}
	if msgs := getMessages(t, s.url, start.SessionID); len(msgs) != 2 {
		t.Fatalf("%d messages stored", len(msgs))
	}
}
