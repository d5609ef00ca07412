package storetest

import (
	"reflect"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func newProject(t *testing.T, s parley.Store, owner, name string, at time.Time) *parley.Project {
	t.Helper()
	p := &parley.Project{ID: parley.NewID(), Owner: owner, Name: name, Instructions: "Answer in French.", CreatedAt: at, UpdatedAt: at}
	if err := s.CreateProject(ctx, p); err != nil {
		t.Fatalf("CreateProject: %v", err)
	}
	return p
}

func testTodos(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	got, err := s.Todos(ctx, sess.ID)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("no list yet: %#v %v", got, err)
	}
	list := []parley.Todo{
		{ID: "1", Content: "Read the spec — «UTF-8» ✓", Status: parley.TodoCompleted},
		{ID: "2", Content: "Write the code", Status: parley.TodoInProgress},
		{ID: "3", Content: "Test it", Status: parley.TodoPending},
	}
	if err := s.PutTodos(ctx, sess.ID, list, base); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Todos(ctx, sess.ID); err != nil || !reflect.DeepEqual(got, list) {
		t.Fatalf("after put: %#v %v", got, err)
	}
	// A put replaces the whole list, order included.
	list2 := []parley.Todo{list[2], {ID: "4", Content: "Ship", Status: parley.TodoPending}}
	if err := s.PutTodos(ctx, sess.ID, list2, base.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Todos(ctx, sess.ID); !reflect.DeepEqual(got, list2) {
		t.Fatalf("after replace: %#v", got)
	}
	// Another session's list is its own.
	other := newSession(t, s, "alice", base)
	if got, _ := s.Todos(ctx, other.ID); len(got) != 0 {
		t.Fatalf("other session sees %#v", got)
	}
	// Clearing leaves an empty list.
	if err := s.PutTodos(ctx, sess.ID, nil, base.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Todos(ctx, sess.ID); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("after clear: %#v %v", got, err)
	}
	if err := s.PutTodos(ctx, "no-such-session", list, base); !isNotFound(err) {
		t.Fatalf("put on unknown session: %v", err)
	}
	if _, err := s.Todos(ctx, "no-such-session"); !isNotFound(err) {
		t.Fatalf("read of unknown session: %v", err)
	}
	// Deleting the session deletes its list.
	if err := s.PutTodos(ctx, sess.ID, list, base); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Todos(ctx, sess.ID); !isNotFound(err) {
		t.Fatalf("todos of a deleted session: %v", err)
	}
	again := &parley.Session{ID: sess.ID, Owner: "alice", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateSession(ctx, again); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Todos(ctx, sess.ID); len(got) != 0 {
		t.Fatalf("a session made again under the same id inherits %#v", got)
	}
}

func testProjects(t *testing.T, s parley.Store) {
	var ids []string
	for i := range 5 {
		p := newProject(t, s, "alice", "P", base.Add(time.Duration(i)*time.Second))
		ids = append(ids, p.ID)
	}
	newProject(t, s, "bob", "bob's", base)
	got, err := s.GetProject(ctx, ids[0])
	if err != nil || got.Owner != "alice" || got.Name != "P" || got.Instructions != "Answer in French." || !got.CreatedAt.Equal(base) {
		t.Fatalf("GetProject: %+v %v", got, err)
	}
	if _, err := s.GetProject(ctx, "nope"); !isNotFound(err) {
		t.Fatalf("unknown project: %v", err)
	}
	// Pages of 2, newest first, alice's only.
	var seen []string
	cursor := ""
	for {
		page, next, err := s.ListProjects(ctx, "alice", parley.Page{Cursor: cursor, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			seen = append(seen, p.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("list order %v, want %v", seen, want)
	}
	// Update.
	got.Name, got.Instructions, got.UpdatedAt = "Renamed", "Be brief.", base.Add(time.Hour)
	if err := s.UpdateProject(ctx, got); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.GetProject(ctx, got.ID); again.Name != "Renamed" || again.Instructions != "Be brief." || !again.UpdatedAt.Equal(base.Add(time.Hour)) {
		t.Fatalf("after update: %+v", again)
	}
	if page, _, _ := s.ListProjects(ctx, "alice", parley.Page{Limit: 1}); page[0].ID != got.ID {
		t.Fatal("the updated project is not listed first")
	}
	if err := s.UpdateProject(ctx, &parley.Project{ID: "nope", UpdatedAt: base}); !isNotFound(err) {
		t.Fatalf("update of unknown project: %v", err)
	}
}

func testSessionProjects(t *testing.T, s parley.Store) {
	p := newProject(t, s, "alice", "P", base)
	q := newProject(t, s, "alice", "Q", base)
	in := &parley.Session{ID: parley.NewID(), Title: "in P", Owner: "alice", ProjectID: p.ID, CreatedAt: base, UpdatedAt: base}
	if err := s.CreateSession(ctx, in); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSession(ctx, in.ID); err != nil || got.ProjectID != p.ID {
		t.Fatalf("session in a project: %+v %v", got, err)
	}
	loose := newSession(t, s, "alice", base.Add(time.Second))
	if loose.ProjectID != "" {
		t.Fatal("a new session has a project")
	}
	bad := &parley.Session{ID: parley.NewID(), Owner: "alice", ProjectID: "no-such-project", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateSession(ctx, bad); !isNotFound(err) {
		t.Fatalf("session in an unknown project: %v", err)
	}
	if _, err := s.GetSession(ctx, bad.ID); !isNotFound(err) {
		t.Fatal("the refused session was stored")
	}
	// Listing by project.
	list, _, err := s.ListSessions(ctx, "alice", parley.Page{Project: p.ID})
	if err != nil || len(list) != 1 || list[0].ID != in.ID || list[0].ProjectID != p.ID {
		t.Fatalf("sessions of P: %+v %v", list, err)
	}
	if all, _, _ := s.ListSessions(ctx, "alice", parley.Page{}); len(all) != 2 {
		t.Fatalf("all sessions: %d", len(all))
	}
	// Moving in, across and out.
	moved, err := s.SetSessionProject(ctx, loose.ID, q.ID)
	if err != nil || moved.ProjectID != q.ID || moved.Title != loose.Title {
		t.Fatalf("move into Q: %+v %v", moved, err)
	}
	if list, _, _ := s.ListSessions(ctx, "alice", parley.Page{Project: q.ID}); len(list) != 1 || list[0].ID != loose.ID {
		t.Fatalf("sessions of Q: %+v", list)
	}
	if moved, err = s.SetSessionProject(ctx, loose.ID, ""); err != nil || moved.ProjectID != "" {
		t.Fatalf("move out: %+v %v", moved, err)
	}
	if _, err := s.SetSessionProject(ctx, loose.ID, "no-such-project"); !isNotFound(err) {
		t.Fatalf("move into unknown project: %v", err)
	}
	if _, err := s.SetSessionProject(ctx, "no-such-session", p.ID); !isNotFound(err) {
		t.Fatalf("move of unknown session: %v", err)
	}
	// Deleting a project keeps its sessions, without a project, and deletes its memory.
	e := &parley.MemoryEntry{ID: parley.NewID(), ProjectID: p.ID, Content: "fact", CreatedAt: base, UpdatedAt: base}
	if err := s.AddMemory(ctx, e, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendMessages(ctx, in.ID, msg(parley.RoleUser, "kept", base)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProject(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProject(ctx, p.ID); !isNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	got, err := s.GetSession(ctx, in.ID)
	if err != nil || got.ProjectID != "" {
		t.Fatalf("session of a deleted project: %+v %v", got, err)
	}
	if h, _ := s.History(ctx, in.ID); len(h) != 1 {
		t.Fatalf("its history: %d messages", len(h))
	}
	if mem, err := s.ListMemory(ctx, p.ID, 0); err != nil || len(mem) != 0 {
		t.Fatalf("memory of a deleted project: %+v %v", mem, err)
	}
	// A project made again under the same id does not get the old sessions or memory back.
	p2 := &parley.Project{ID: p.ID, Owner: "alice", Name: "P again", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateProject(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if list, _, _ := s.ListSessions(ctx, "alice", parley.Page{Project: p.ID}); len(list) != 0 {
		t.Fatalf("the new project has sessions %+v", list)
	}
}

func testMemory(t *testing.T, s parley.Store) {
	p := newProject(t, s, "alice", "P", base)
	other := newProject(t, s, "alice", "Other", base)
	var ids []string
	for i := range 4 {
		e := &parley.MemoryEntry{ID: parley.NewID(), ProjectID: p.ID, Content: "fact " + string(rune('A'+i)), SessionID: "s1",
			CreatedAt: base.Add(time.Duration(i) * time.Minute), UpdatedAt: base.Add(time.Duration(i) * time.Minute)}
		if err := s.AddMemory(ctx, e, 4); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		ids = append(ids, e.ID)
	}
	// The bound holds; the refusal stores nothing.
	full := &parley.MemoryEntry{ID: parley.NewID(), ProjectID: p.ID, Content: "one too many", CreatedAt: base, UpdatedAt: base}
	if err := s.AddMemory(ctx, full, 4); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("past the bound: %v", err)
	}
	if err := s.AddMemory(ctx, &parley.MemoryEntry{ID: parley.NewID(), ProjectID: "nope", Content: "x", CreatedAt: base, UpdatedAt: base}, 4); !isNotFound(err) {
		t.Fatalf("memory of unknown project: %v", err)
	}
	list, err := s.ListMemory(ctx, p.ID, 0)
	if err != nil || len(list) != 4 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for i, e := range list { // newest first
		if e.ID != ids[3-i] || e.ProjectID != p.ID || e.SessionID != "s1" || !e.CreatedAt.Equal(base.Add(time.Duration(3-i)*time.Minute)) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if top, _ := s.ListMemory(ctx, p.ID, 2); len(top) != 2 || top[0].ID != ids[3] {
		t.Fatalf("limit 2: %+v", top)
	}
	if n, err := s.CountMemory(ctx, p.ID); err != nil || n != 4 {
		t.Fatalf("count: %d %v", n, err)
	}
	if n, err := s.CountMemory(ctx, other.ID); err != nil || n != 0 {
		t.Fatalf("count of an empty memory: %d %v", n, err)
	}
	if mem, _ := s.ListMemory(ctx, other.ID, 0); len(mem) != 0 {
		t.Fatalf("other project's memory: %+v", mem)
	}
	// Update and delete only within the entry's own project.
	upd := list[0]
	upd.Content, upd.UpdatedAt = "fact D, corrected", base.Add(time.Hour)
	if err := s.UpdateMemory(ctx, &upd); err != nil {
		t.Fatal(err)
	}
	wrong := upd
	wrong.ProjectID = other.ID
	if err := s.UpdateMemory(ctx, &wrong); !isNotFound(err) {
		t.Fatalf("update through another project: %v", err)
	}
	if err := s.DeleteMemory(ctx, other.ID, upd.ID); !isNotFound(err) {
		t.Fatalf("delete through another project: %v", err)
	}
	if list, _ := s.ListMemory(ctx, p.ID, 1); list[0].Content != "fact D, corrected" || !list[0].UpdatedAt.Equal(base.Add(time.Hour)) {
		t.Fatalf("after update: %+v", list[0])
	}
	if err := s.DeleteMemory(ctx, p.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMemory(ctx, p.ID, ids[0]); !isNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	if list, _ := s.ListMemory(ctx, p.ID, 0); len(list) != 3 {
		t.Fatalf("after delete: %d entries", len(list))
	}
	// There is room again.
	if err := s.AddMemory(ctx, full, 4); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
