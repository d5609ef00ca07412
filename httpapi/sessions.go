package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/chat"
)

const maxTitle = 200

// ownedSession loads the session named in the path and checks that the caller owns it:
// another user's session is 403, no such session 404.
func (s *server) ownedSession(r *http.Request) (*parley.Session, string, error) {
	return s.ownedSessionBy(r, s.Store.GetSession)
}

// ownedSessionBy is ownedSession with the session read by get.
func (s *server) ownedSessionBy(r *http.Request, get func(context.Context, string) (*parley.Session, error)) (*parley.Session, string, error) {
	owner := identityOf(r).User
	id := r.PathValue("id")
	if !validID(id) {
		return nil, owner, parley.Errorf(parley.ECNotFound, "session %q not found", truncate(id, 80))
	}
	sess, err := get(r.Context(), id)
	if err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			return nil, owner, parley.Errorf(parley.ECNotFound, "session %q not found", id)
		}
		return nil, owner, err
	}
	if sess.Owner != owner {
		return nil, owner, parley.Errorf(parley.ECForbidden, "session %q belongs to another user", id)
	}
	return sess, owner, nil
}

// validID accepts the IDs Parley issues (UUIDs) and other short printable tokens.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

type titleBody struct {
	Title *string `json:"title"`
	// ProjectID puts the session into a project of the caller's; "" (PATCH) takes it out.
	ProjectID *string `json:"project_id"`
}

func checkProjectID(b *titleBody) error {
	if b.ProjectID != nil && *b.ProjectID != "" && !validID(*b.ProjectID) {
		return parley.Errorf(parley.ECInvalid, "project_id: not a valid id")
	}
	return nil
}

func checkTitle(t string) error {
	if err := parley.CheckText("title", t, parley.TextName); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(t); n > maxTitle {
		return parley.Errorf(parley.ECInvalid, "title: %d characters, the limit is %d", n, maxTitle)
	}
	return nil
}

// checkNewTitle checks the body of POST /api/v1/sessions.
func checkNewTitle(b *titleBody) error {
	if b.Title != nil {
		if err := checkTitle(*b.Title); err != nil {
			return err
		}
	}
	return checkProjectID(b)
}

// checkRename checks the body of PATCH /api/v1/sessions/{id}.
// A PATCH renames the session, moves it into (or out of) a project, or both.
func checkRename(b *titleBody) error {
	if b.Title == nil && b.ProjectID == nil {
		return parley.Errorf(parley.ECInvalid, "nothing to change: give title, project_id or both")
	}
	if b.Title != nil {
		if strings.TrimSpace(*b.Title) == "" {
			return parley.Errorf(parley.ECInvalid, "title: required and must not be empty")
		}
		if err := checkTitle(*b.Title); err != nil {
			return err
		}
	}
	return checkProjectID(b)
}

func (s *server) handleCreateSession() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := identityOf(r).User
		body := bodyOf[titleBody](r)
		title := "New chat"
		if body.Title != nil {
			title = chat.Title(*body.Title)
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Title: title, Owner: owner, CreatedAt: now, UpdatedAt: now}
		if body.ProjectID != nil && *body.ProjectID != "" {
			p, err := s.ownedProject(r, *body.ProjectID)
			if err != nil {
				writeError(w, err)
				return
			}
			sess.ProjectID = p.ID
		}
		if err := s.Store.CreateSession(r.Context(), sess); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, sess)
	})
}

func (s *server) handleListSessions() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := identityOf(r).User
		limit, err := intParam(r, "limit", 50, 1, 200)
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
		project := r.URL.Query().Get("project_id")
		if project != "" && !validID(project) {
			writeError(w, parley.Errorf(parley.ECInvalid, "project_id: not a valid id"))
			return
		}
		list, next, err := s.Store.ListSessions(r.Context(), owner, parley.Page{Cursor: r.URL.Query().Get("cursor"), Limit: limit, Query: q, Project: project})
		if err != nil {
			writeError(w, err)
			return
		}
		if list == nil {
			list = []parley.Session{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"sessions": list, "next_cursor": next})
	})
}

// handleUsage returns the caller's token usage, totalled over all of their sessions.
func (s *server) handleUsage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := identityOf(r).User
		u, err := s.Store.OwnerUsage(r.Context(), owner)
		if err != nil {
			writeError(w, err)
			return
		}
		out := map[string]any{"owner": owner, "usage": u}
		if s.SearchCosts != nil {
			su, err := s.SearchCosts.OwnerSearchUsage(r.Context(), owner)
			if err != nil {
				writeError(w, err)
				return
			}
			out["search"] = su
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func (s *server) handleGetSession() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		out := struct {
			*parley.Session
			ActiveRun string `json:"active_run,omitempty"`
		}{Session: sess}
		if run, ok := s.Runs.Active(sess.ID); ok {
			out.ActiveRun = run.ID
		} else if rec, err := s.Runs.ActiveRecord(r.Context(), sess.ID); err == nil && rec != nil {
			out.ActiveRun = rec.ID // running on another instance
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func (s *server) handleRenameSession() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		body := bodyOf[titleBody](r)
		out := sess
		if body.ProjectID != nil {
			project := ""
			if *body.ProjectID != "" {
				p, err := s.ownedProject(r, *body.ProjectID)
				if err != nil {
					writeError(w, err)
					return
				}
				project = p.ID
			}
			if out, err = s.Store.SetSessionProject(r.Context(), sess.ID, project); err != nil {
				writeError(w, err)
				return
			}
		}
		if body.Title != nil {
			if out, err = s.Store.RenameSession(r.Context(), sess.ID, strings.TrimSpace(*body.Title), time.Now().UTC().Truncate(time.Microsecond)); err != nil {
				writeError(w, err)
				return
			}
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func (s *server) handleDeleteSession() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if run, ok := s.Runs.Active(sess.ID); ok {
			// Stop the run first so it does not write into a deleted session.
			run.Abort()
			select {
			case <-run.Done():
			case <-time.After(20 * time.Second):
				writeError(w, parley.Errorf(parley.ECConflict, "the session's run did not stop in time; try again"))
				return
			case <-r.Context().Done():
				return
			}
		}
		// The session's files go with it, unless it has forks: then they pass to a fork (the
		// store's DeleteSession), and Collect finds their rows and keeps their blobs. The blobs
		// of the files deleted are collected after (those no other file shares). A file
		// uploaded meanwhile is left to the sweep at the next start.
		var blobs []string
		if s.Files != nil {
			if blobs, err = s.Files.SessionBlobs(r.Context(), sess.ID); err != nil {
				writeError(w, err)
				return
			}
		}
		if err := s.Store.DeleteSession(r.Context(), sess.ID); err != nil {
			writeError(w, err)
			return
		}
		if s.Files != nil {
			s.Files.Collect(context.WithoutCancel(r.Context()), blobs...)
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func (s *server) handleListMessages() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		after, err := intParam(r, "after", 0, 0, 1<<62)
		if err != nil {
			writeError(w, err)
			return
		}
		limit, err := intParam(r, "limit", 100, 1, 1000)
		if err != nil {
			writeError(w, err)
			return
		}
		// The active branch, or the branch of ?leaf= (issue 23).
		leaf := r.URL.Query().Get("leaf")
		if leaf != "" && !validID(leaf) {
			writeError(w, parley.Errorf(parley.ECInvalid, "leaf: not a message id"))
			return
		}
		msgs, _, err := s.Store.ListBranch(r.Context(), sess.ID, leaf, int64(after), limit)
		if parley.CodeOf(err) == parley.ECNotFound {
			err = parley.Errorf(parley.ECNotFound, "message %q not found in this session", leaf)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		if msgs == nil {
			msgs = []parley.Message{}
		}
		out := map[string]any{"session_id": sess.ID, "messages": msgs}
		if len(msgs) == limit {
			out["next_after"] = msgs[len(msgs)-1].Seq
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func (s *server) handleRecords() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		msgs, err := s.Store.History(r.Context(), sess.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"session_id": sess.ID, "records": parley.Records(msgs)})
	})
}

// intParam reads an integer query parameter within [lo, hi], or def when absent.
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, parley.Errorf(parley.ECInvalid, "%s: must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}
