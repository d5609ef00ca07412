package httpapi

import (
	"github.com/parleyhq/parley/approval"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/workspace"
)

// The workspace routes (issue 20): a session's todo list, projects and their memory. A project is
// its owner's alone: another user's is 403, an unknown one 404, as for sessions.

// ownedProject loads project id and checks that the caller owns it.
func (s *server) ownedProject(r *http.Request, id string) (*parley.Project, error) {
	owner := identityOf(r).User
	if !validID(id) {
		return nil, parley.Errorf(parley.ECNotFound, "project %q not found", truncate(id, 80))
	}
	p, err := s.Store.GetProject(r.Context(), id)
	if err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			return nil, parley.Errorf(parley.ECNotFound, "project %q not found", id)
		}
		return nil, err
	}
	if p.Owner != owner {
		return nil, parley.Errorf(parley.ECForbidden, "project %q belongs to another user", id)
	}
	return p, nil
}

func workspaceNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// handleTodos is GET /api/v1/sessions/{id}/todos: the session's todo list.
func (s *server) handleTodos() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		todos, err := s.Store.Todos(r.Context(), sess.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"session_id": sess.ID, "todos": todos})
	})
}

// projectBody is the body of POST and PATCH /api/v1/projects[/{id}].
type projectBody struct {
	Name         *string `json:"name"`
	Instructions *string `json:"instructions"`
	// ToolPolicy replaces the project's tool approval policy (issue 23); {} clears it.
	ToolPolicy *map[string]string `json:"tool_policy"`
}

func (b *projectBody) check() error {
	if b.Name != nil {
		*b.Name = strings.TrimSpace(*b.Name)
		if err := workspace.CheckProjectName(*b.Name); err != nil {
			return err
		}
	}
	if b.Instructions != nil {
		if err := workspace.CheckInstructions(*b.Instructions); err != nil {
			return err
		}
	}
	if b.ToolPolicy != nil {
		if err := approval.CheckMap(*b.ToolPolicy); err != nil {
			return parley.Errorf(parley.ECInvalid, "%s", strings.Replace(err.Error(), "tool policy: ", "tool_policy: ", 1))
		}
	}
	return nil
}

func checkNewProject(b *projectBody) error {
	if b.Name == nil {
		return parley.Errorf(parley.ECInvalid, "name: required")
	}
	return b.check()
}

func checkProjectPatch(b *projectBody) error {
	if b.Name == nil && b.Instructions == nil && b.ToolPolicy == nil {
		return parley.Errorf(parley.ECInvalid, "nothing to change: give name, instructions or tool_policy")
	}
	return b.check()
}

func (s *server) handleCreateProject() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bodyOf[projectBody](r)
		t := workspaceNow()
		p := &parley.Project{ID: parley.NewID(), Owner: identityOf(r).User, Name: *b.Name, CreatedAt: t, UpdatedAt: t}
		if b.Instructions != nil {
			p.Instructions = *b.Instructions
		}
		if b.ToolPolicy != nil && len(*b.ToolPolicy) > 0 {
			p.ToolPolicy = *b.ToolPolicy
		}
		if err := s.Store.CreateProject(r.Context(), p); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, p)
	})
}

func (s *server) handleListProjects() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, err := intParam(r, "limit", 50, 1, 200)
		if err != nil {
			writeError(w, err)
			return
		}
		list, next, err := s.Store.ListProjects(r.Context(), identityOf(r).User, parley.Page{Cursor: r.URL.Query().Get("cursor"), Limit: limit})
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"projects": list, "next_cursor": next})
	})
}

func (s *server) handleGetProject() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
}

func (s *server) handlePatchProject() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		b := bodyOf[projectBody](r)
		if b.Name != nil {
			p.Name = *b.Name
		}
		if b.Instructions != nil {
			p.Instructions = *b.Instructions
		}
		if b.ToolPolicy != nil {
			p.ToolPolicy = *b.ToolPolicy
			if len(p.ToolPolicy) == 0 {
				p.ToolPolicy = nil
			}
		}
		p.UpdatedAt = workspaceNow()
		if err := s.Store.UpdateProject(r.Context(), p); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
}

// handleDeleteProject deletes the project and its memory. Its sessions stay, with their
// messages and todo lists, outside any project.
func (s *server) handleDeleteProject() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		if err := s.Store.DeleteProject(r.Context(), p.ID); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// memoryBody is the body of POST /api/v1/projects/{id}/memory and of PATCH on one entry.
type memoryBody struct {
	Content string `json:"content"`
}

func checkMemory(b *memoryBody) error {
	b.Content = strings.TrimSpace(b.Content)
	return workspace.CheckFact("content", b.Content)
}

func (s *server) handleListMemory() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		q := r.URL.Query().Get("q")
		if n := utf8.RuneCountInString(q); n > maxTitle {
			writeError(w, parley.Errorf(parley.ECInvalid, "q: %d characters, the limit is %d", n, maxTitle))
			return
		}
		if err := parley.CheckText("q", q, parley.TextName); err != nil {
			writeError(w, err)
			return
		}
		list, err := s.Store.ListMemory(r.Context(), p.ID, parley.MaxMemoryEntries)
		if err != nil {
			writeError(w, err)
			return
		}
		if q != "" {
			list = workspace.Search(list, q)
		}
		writeJSON(w, http.StatusOK, map[string]any{"project_id": p.ID, "memory": list})
	})
}

func (s *server) handleAddMemory() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		t := workspaceNow()
		e := &parley.MemoryEntry{ID: parley.NewID(), ProjectID: p.ID, Content: bodyOf[memoryBody](r).Content, CreatedAt: t, UpdatedAt: t}
		if err := s.Store.AddMemory(r.Context(), e, parley.MaxMemoryEntries); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, e)
	})
}

func (s *server) handlePatchMemory() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		id := r.PathValue("entry")
		if !validID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "memory entry %q not found", truncate(id, 80)))
			return
		}
		list, err := s.Store.ListMemory(r.Context(), p.ID, parley.MaxMemoryEntries)
		if err != nil {
			writeError(w, err)
			return
		}
		for _, e := range list {
			if e.ID == id {
				e.Content, e.UpdatedAt = bodyOf[memoryBody](r).Content, workspaceNow()
				if err := s.Store.UpdateMemory(r.Context(), &e); err != nil {
					writeError(w, memoryNotFound(err, id))
					return
				}
				writeJSON(w, http.StatusOK, e)
				return
			}
		}
		writeError(w, parley.Errorf(parley.ECNotFound, "memory entry %q not found", id))
	})
}

func (s *server) handleDeleteMemory() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.ownedProject(r, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		id := r.PathValue("entry")
		if !validID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "memory entry %q not found", truncate(id, 80)))
			return
		}
		if err := s.Store.DeleteMemory(r.Context(), p.ID, id); err != nil {
			writeError(w, memoryNotFound(err, id))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func memoryNotFound(err error, id string) error {
	if parley.CodeOf(err) == parley.ECNotFound {
		return parley.Errorf(parley.ECNotFound, "memory entry %q not found", id)
	}
	return err
}
