package builtin

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/tools"
)

type wsFixture struct {
	st  *sqlite.Store
	reg *tools.Registry
	mu  sync.Mutex
	evs []parley.Event
}

func newWSFixture(t *testing.T) *wsFixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := tools.NewRegistry()
	if err := RegisterWorkspace(reg, st, time.Now); err != nil {
		t.Fatal(err)
	}
	return &wsFixture{st: st, reg: reg}
}

func (f *wsFixture) session(t *testing.T, project string) string {
	t.Helper()
	now := time.Now().UTC()
	s := &parley.Session{ID: parley.NewID(), Owner: "alice", ProjectID: project, CreatedAt: now, UpdatedAt: now}
	if err := f.st.CreateSession(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// call runs one call of the tool as the run of session sid would.
func (f *wsFixture) call(sid, name, args string) tools.Outcome {
	ctx := tools.WithRun(context.Background(), tools.RunInfo{SessionID: sid, User: "alice", Emit: func(ev parley.Event) {
		f.mu.Lock()
		f.evs = append(f.evs, ev)
		f.mu.Unlock()
	}})
	return f.reg.Call(ctx, parley.ToolCall{ID: "c", Type: "function", Function: parley.FunctionCall{Name: name, Arguments: args}}, nil)
}

func (f *wsFixture) events() []parley.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]parley.Event(nil), f.evs...)
}

func TestTodoTools(t *testing.T) {
	ctx := context.Background()
	f := newWSFixture(t)
	sid := f.session(t, "")
	out := f.call(sid, "todo_write", `{"todos":[{"id":"1","content":" Plan ","status":"in_progress"},{"id":"2","content":"Do","status":"pending"}]}`)
	if !out.Success || !strings.Contains(out.Content.String(), "2 items (0 completed, 1 in progress, 1 pending)") {
		t.Fatalf("write: %+v", out)
	}
	want := []parley.Todo{{ID: "1", Content: "Plan", Status: parley.TodoInProgress}, {ID: "2", Content: "Do", Status: parley.TodoPending}}
	if got, _ := f.st.Todos(ctx, sid); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("stored: %+v", got)
	}
	evs := f.events()
	if len(evs) != 1 || evs[0].Type != parley.EventTodoUpdate || len(evs[0].Todos) != 2 || evs[0].Todos[0] != want[0] {
		t.Fatalf("events: %+v", evs)
	}

	// Refused lists: the result says why; nothing is stored or announced.
	for _, c := range []struct{ args, want string }{
		{`{"todos":[{"id":"1","content":"a","status":"in_progress"},{"id":"2","content":"b","status":"in_progress"}]}`, "at most one item may be in_progress"},
		{`{"todos":[{"id":"1","content":"a","status":"pending"},{"id":"1","content":"b","status":"pending"}]}`, "ids must be unique"},
		{`{"todos":[{"id":"1","content":"   ","status":"pending"}]}`, "todos[0].content: required"},
		{`{"todos":[{"id":"1","content":"a","status":"done"}]}`, "pending in_progress completed"},
		{`{}`, "todos"},
	} {
		out := f.call(sid, "todo_write", c.args)
		if out.Success || !strings.Contains(out.Content.String(), c.want) {
			t.Errorf("%s: %+v, want a failure saying %q", c.args, out, c.want)
		}
	}
	if got, _ := f.st.Todos(ctx, sid); len(got) != 2 || got[0] != want[0] {
		t.Fatalf("a refused list changed the stored one: %+v", got)
	}
	if n := len(f.events()); n != 1 {
		t.Fatalf("%d events after refused lists", n)
	}

	out = f.call(sid, "todo_read", `{}`)
	if !out.Success || !strings.Contains(out.Content.String(), `"content":"Plan"`) {
		t.Fatalf("read: %+v", out)
	}
	// Clearing sends an update with the empty list.
	if out := f.call(sid, "todo_write", `{"todos":[]}`); !out.Success {
		t.Fatalf("clear: %+v", out)
	}
	evs = f.events()
	if last := evs[len(evs)-1]; last.Type != parley.EventTodoUpdate || last.Todos == nil || len(last.Todos) != 0 {
		t.Fatalf("clear event: %+v", last)
	}
	// Outside a run there is no session to write to.
	if out := f.call("", "todo_write", `{"todos":[]}`); out.Success || !strings.Contains(out.Content.String(), "only inside a conversation") {
		t.Fatalf("no session: %+v", out)
	}
}

func TestMemoryTools(t *testing.T) {
	ctx := context.Background()
	f := newWSFixture(t)
	loose := f.session(t, "")
	for _, name := range []string{"memory_save", "memory_list", "memory_search", "memory_delete"} {
		args := map[string]string{"memory_save": `{"content":"x"}`, "memory_list": `{}`, "memory_search": `{"query":"x"}`, "memory_delete": `{"id":"x"}`}
		out := f.call(loose, name, args[name])
		if out.Success || !strings.Contains(out.Content.String(), "belongs to no project") {
			t.Errorf("%s without a project: %+v", name, out)
		}
	}
	now := time.Now().UTC()
	p := &parley.Project{ID: parley.NewID(), Owner: "alice", Name: "Garden", CreatedAt: now, UpdatedAt: now}
	if err := f.st.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	sid := f.session(t, p.ID)
	for _, fact := range []string{"The soil is clay.", "Tomatoes go south."} {
		if out := f.call(sid, "memory_save", `{"content":"`+fact+`"}`); !out.Success || !strings.Contains(out.Content.String(), `project "Garden"`) {
			t.Fatalf("save: %+v", out)
		}
	}
	mem, _ := f.st.ListMemory(ctx, p.ID, 0)
	if len(mem) != 2 || mem[0].Content != "Tomatoes go south." || mem[0].SessionID != sid {
		t.Fatalf("stored: %+v", mem)
	}
	evs := f.events()
	if len(evs) != 2 || evs[1].Type != parley.EventMemoryUpdate || evs[1].Memory.Action != "saved" || evs[1].Memory.Entry.ID != mem[0].ID {
		t.Fatalf("events: %+v", evs)
	}
	if out := f.call(sid, "memory_list", `{}`); !out.Success || !strings.Contains(out.Content.String(), `"total":2`) {
		t.Fatalf("list: %+v", out)
	}
	if out := f.call(sid, "memory_search", `{"query":"CLAY"}`); !out.Success || !strings.Contains(out.Content.String(), "The soil is clay.") ||
		strings.Contains(out.Content.String(), "Tomatoes") {
		t.Fatalf("search: %+v", out)
	}
	if out := f.call(sid, "memory_save", `{"content":"  "}`); out.Success || !strings.Contains(out.Content.String(), "content: required") {
		t.Fatalf("empty fact: %+v", out)
	}
	if out := f.call(sid, "memory_delete", `{"id":"`+mem[1].ID+`"}`); !out.Success {
		t.Fatalf("delete: %+v", out)
	}
	if out := f.call(sid, "memory_delete", `{"id":"`+mem[1].ID+`"}`); out.Success || !strings.Contains(out.Content.String(), "no fact with id") {
		t.Fatalf("delete again: %+v", out)
	}
	if evs := f.events(); evs[len(evs)-1].Memory.Action != "deleted" || len(evs) != 3 {
		t.Fatalf("events after delete: %+v", evs)
	}
	// Another project's session cannot reach this memory.
	other := &parley.Project{ID: parley.NewID(), Owner: "alice", Name: "Other", CreatedAt: now, UpdatedAt: now}
	f.st.CreateProject(ctx, other)
	osid := f.session(t, other.ID)
	if out := f.call(osid, "memory_delete", `{"id":"`+mem[0].ID+`"}`); out.Success {
		t.Fatalf("delete through another project: %+v", out)
	}
	if mem, _ := f.st.ListMemory(ctx, p.ID, 0); len(mem) != 1 {
		t.Fatalf("memory after the other project's delete: %+v", mem)
	}
}
