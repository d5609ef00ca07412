package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
	"github.com/parleyhq/parley/workspace"
)

// WorkspaceStore is what the todo and memory tools read and write.
type WorkspaceStore interface {
	GetSession(ctx context.Context, id string) (*parley.Session, error)
	parley.WorkspaceStore
}

// RegisterWorkspace adds the todo tools (todo_write, todo_read) and the memory tools
// (memory_save, memory_list, memory_search, memory_delete) to r. They act on the session of the
// run that calls them (tools.SessionOf) and announce each change in its event stream
// (todo_update, memory_update). now stamps what they store.
func RegisterWorkspace(r *tools.Registry, st WorkspaceStore, now func() time.Time) error {
	w := &ws{st: st, now: func() time.Time { return now().UTC().Truncate(time.Microsecond) }}
	for _, t := range []parley.Tool{w.todoWrite(), w.todoRead(), w.memorySave(), w.memoryList(), w.memorySearch(), w.memoryDelete()} {
		if err := r.Register(t); err != nil {
			return err
		}
	}
	return nil
}

type ws struct {
	st  WorkspaceStore
	now func() time.Time
}

const todoItemSchema = `{"type":"object","properties":{` +
	`"id":{"type":"string","description":"A short id of the item, unique in the list, e.g. \"1\""},` +
	`"content":{"type":"string","description":"What is to be done"},` +
	`"status":{"type":"string","enum":["pending","in_progress","completed"]}},` +
	`"required":["id","content","status"],"additionalProperties":false}`

func (w *ws) todoWrite() parley.Tool {
	return &tools.Func{Session: true,
		Def: parley.ToolSpec{
			Name: "todo_write",
			Description: "Replaces this conversation's todo list with the given items (send the whole list every time). " +
				"Use it to plan work of several steps and to show progress: mark an item in_progress when you start it " +
				"(at most one at a time) and completed as soon as it is done. An empty list clears it.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"todos":{"type":"array","items":` + todoItemSchema +
				`}},"required":["todos"],"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			sid := tools.SessionOf(ctx)
			if sid == "" {
				return errResult("todo_write works only inside a conversation"), nil
			}
			var args struct {
				Todos *[]parley.Todo `json:"todos"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			if args.Todos == nil {
				return errResult("arguments: \"todos\" is required (the whole list; [] clears it)"), nil
			}
			todos := *args.Todos
			for i := range todos {
				todos[i].ID, todos[i].Content = strings.TrimSpace(todos[i].ID), strings.TrimSpace(todos[i].Content)
			}
			if err := workspace.CheckTodos(todos); err != nil {
				return errResult("the todo list was not saved:\n%s", parley.MessageOf(err)), nil
			}
			if todos == nil {
				todos = []parley.Todo{}
			}
			if err := w.st.PutTodos(ctx, sid, todos, w.now()); err != nil {
				return nil, err
			}
			tools.Emit(ctx, parley.Event{Type: parley.EventTodoUpdate, Todos: todos})
			return &parley.ToolResult{Content: parley.Text("The todo list is saved: " + summary(todos) + ".")}, nil
		},
		Idempotent: true, // it replaces the list: running it again leaves the same list
	}
}

func summary(todos []parley.Todo) string {
	n := map[string]int{}
	for _, t := range todos {
		n[t.Status]++
	}
	return fmt.Sprintf("%d items (%d completed, %d in progress, %d pending)", len(todos),
		n[parley.TodoCompleted], n[parley.TodoInProgress], n[parley.TodoPending])
}

func (w *ws) todoRead() parley.Tool {
	return &tools.Func{Session: true,
		Def: parley.ToolSpec{
			Name:        "todo_read",
			Description: "Returns this conversation's todo list: its items with id, content and status, in order.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			sid := tools.SessionOf(ctx)
			if sid == "" {
				return errResult("todo_read works only inside a conversation"), nil
			}
			todos, err := w.st.Todos(ctx, sid)
			if err != nil {
				return nil, err
			}
			return jsonResult(map[string]any{"todos": todos, "summary": summary(todos)})
		},
		Idempotent: true,
	}
}

// project returns the project of the calling session, or an error result that says why there is
// none.
func (w *ws) project(ctx context.Context, tool string) (*parley.Project, *parley.ToolResult, error) {
	sid := tools.SessionOf(ctx)
	if sid == "" {
		return nil, errResult("%s works only inside a conversation", tool), nil
	}
	p, err := workspace.ProjectOf(ctx, w.st, sid)
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return nil, errResult("this conversation belongs to no project, so it has no memory: %s needs a project. "+
			"Tell the user that memory works once the conversation is put into a project.", tool), nil
	}
	return p, nil, nil
}

func (w *ws) memorySave() parley.Tool {
	return &tools.Func{Session: true,
		Def: parley.ToolSpec{
			Name: "memory_save",
			Description: "Saves a fact to the memory of this conversation's project, which every conversation of the project " +
				"sees in its instructions. Save lasting facts (preferences, decisions, names), one per call, written to stand alone.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"content":{"type":"string",` +
				`"description":"The fact, e.g. \"The user's team deploys on Fridays.\""}},"required":["content"],"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			var args struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			p, res, err := w.project(ctx, "memory_save")
			if p == nil {
				return res, err
			}
			content := strings.TrimSpace(args.Content)
			if err := workspace.CheckFact("content", content); err != nil {
				return errResult("%s", parley.MessageOf(err)), nil
			}
			now := w.now()
			e := &parley.MemoryEntry{ID: parley.NewID(), ProjectID: p.ID, Content: content, SessionID: tools.SessionOf(ctx), CreatedAt: now, UpdatedAt: now}
			if err := w.st.AddMemory(ctx, e, parley.MaxMemoryEntries); err != nil {
				if parley.CodeOf(err) == parley.ECConflict {
					return errResult("%s (memory_list shows them, memory_delete removes one)", parley.MessageOf(err)), nil
				}
				return nil, err
			}
			tools.Emit(ctx, parley.Event{Type: parley.EventMemoryUpdate, Memory: &parley.MemoryChange{ProjectID: p.ID, Action: "saved", Entry: *e}})
			return &parley.ToolResult{Content: parley.Text(fmt.Sprintf("Saved to the memory of project %q as %s.", p.Name, e.ID))}, nil
		},
	}
}

type memoryView struct {
	ID      string `json:"id"`
	Content string `json:"content"`
	Saved   string `json:"saved"`
}

func views(es []parley.MemoryEntry) []memoryView {
	out := make([]memoryView, len(es))
	for i, e := range es {
		out[i] = memoryView{ID: e.ID, Content: e.Content, Saved: e.CreatedAt.Format(time.RFC3339)}
	}
	return out
}

func (w *ws) memoryList() parley.Tool {
	return &tools.Func{Session: true,
		Def: parley.ToolSpec{
			Name:        "memory_list",
			Description: "Lists the facts in the memory of this conversation's project, newest first.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"limit":{"type":"integer","minimum":1,"maximum":500,` +
				`"description":"At most this many facts (default 50)"}},"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			var args struct {
				Limit int `json:"limit"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			if args.Limit <= 0 {
				args.Limit = 50
			}
			args.Limit = min(args.Limit, parley.MaxMemoryEntries)
			p, res, err := w.project(ctx, "memory_list")
			if p == nil {
				return res, err
			}
			all, err := w.st.ListMemory(ctx, p.ID, parley.MaxMemoryEntries)
			if err != nil {
				return nil, err
			}
			shown := all[:min(len(all), args.Limit)]
			return jsonResult(map[string]any{"project": p.Name, "total": len(all), "facts": views(shown)})
		},
		Idempotent: true,
	}
}

func (w *ws) memorySearch() parley.Tool {
	return &tools.Func{Session: true,
		Def: parley.ToolSpec{
			Name:        "memory_search",
			Description: "Finds the facts in the memory of this conversation's project that contain every word of the query (ignoring case), newest first.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"Words to look for"}},` +
				`"required":["query"],"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			var args struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			if strings.TrimSpace(args.Query) == "" {
				return errResult("query: must not be empty (memory_list lists every fact)"), nil
			}
			p, res, err := w.project(ctx, "memory_search")
			if p == nil {
				return res, err
			}
			all, err := w.st.ListMemory(ctx, p.ID, parley.MaxMemoryEntries)
			if err != nil {
				return nil, err
			}
			found := workspace.Search(all, args.Query)
			const maxFound = 50
			return jsonResult(map[string]any{"query": args.Query, "matches": len(found), "facts": views(found[:min(len(found), maxFound)])})
		},
		Idempotent: true,
	}
}

func (w *ws) memoryDelete() parley.Tool {
	return &tools.Func{Session: true,
		Def: parley.ToolSpec{
			Name:        "memory_delete",
			Description: "Deletes a fact from the memory of this conversation's project, by its id (memory_list and memory_search show ids).",
			Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","description":"The fact's id"}},` +
				`"required":["id"],"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			var args struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			p, res, err := w.project(ctx, "memory_delete")
			if p == nil {
				return res, err
			}
			id := strings.TrimSpace(args.ID)
			if err := w.st.DeleteMemory(ctx, p.ID, id); err != nil {
				if parley.CodeOf(err) == parley.ECNotFound {
					return errResult("no fact with id %q in this project's memory (memory_list shows the ids)", truncateID(id)), nil
				}
				return nil, err
			}
			tools.Emit(ctx, parley.Event{Type: parley.EventMemoryUpdate, Memory: &parley.MemoryChange{ProjectID: p.ID, Action: "deleted",
				Entry: parley.MemoryEntry{ID: id, ProjectID: p.ID}}})
			return &parley.ToolResult{Content: parley.Text(fmt.Sprintf("Deleted %s from the memory of project %q.", id, p.Name))}, nil
		},
		Idempotent: true, // a second run finds nothing to delete and says so
	}
}

func truncateID(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:80]) + "…"
	}
	return s
}

func jsonResult(v any) (*parley.ToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &parley.ToolResult{Content: parley.Text(string(b))}, nil
}
