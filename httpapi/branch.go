package httpapi

import (
	"context"
	"net/http"
	"strings"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/chat"
)

// Branches (issue 23): a session's messages form a tree; these routes read it, move its active
// leaf, start runs on new branches and fork a branch into a new session.

// messageRef is the body of PUT …/leaf and POST …/fork.
type messageRef struct {
	MessageID string `json:"message_id"`
}

func checkMessageRef(b *messageRef) error {
	if b.MessageID == "" {
		return parley.Errorf(parley.ECInvalid, "message_id: required")
	}
	if !validID(b.MessageID) {
		return parley.Errorf(parley.ECInvalid, "message_id: not a message id")
	}
	return nil
}

// pathMessage returns the {message_id} of the path: an id that cannot be a message's is not
// found.
func pathMessage(r *http.Request) (string, error) {
	id := r.PathValue("message_id")
	if !validID(id) {
		return "", parley.Errorf(parley.ECNotFound, "message %q not found in this session", truncate(id, 80))
	}
	return id, nil
}

// treeResponse is the answer of GET …/tree.
type treeResponse struct {
	LeafID string            `json:"leaf_id"`
	Nodes  []parley.TreeNode `json:"nodes"`
}

// handleTree is GET /api/v1/sessions/{id}/tree: every message of every branch, compact, in
// storage order, and the active leaf.
func (s *server) handleTree() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		leaf, nodes, err := s.Store.Tree(r.Context(), sess.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, treeResponse{LeafID: leaf, Nodes: nodes})
	})
}

// handleSetLeaf is PUT /api/v1/sessions/{id}/leaf: the newest leaf under message_id becomes the
// active one. 409 while a run is in progress in the session.
func (s *server) handleSetLeaf() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, owner, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		leaf, err := s.Chat.SwitchBranch(r.Context(), owner, sess.ID, bodyOf[messageRef](r).MessageID)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"leaf_id": leaf})
	})
}

// handleFork is POST /api/v1/sessions/{id}/fork: a new session of the caller's holding a copy of
// the branch that ends at message_id.
func (s *server) handleFork() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, owner, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		fork, err := s.Chat.Fork(r.Context(), owner, sess.ID, bodyOf[messageRef](r).MessageID)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"session": fork})
	})
}

// branchRunResponse is the answer of an edit or a regeneration that does not stream.
type branchRunResponse struct {
	Action    string `json:"action"` // "edit" or "regenerate"
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	Model     string `json:"model"`
	// MessageID is the user message the run answers: the new one of an edit, the question
	// answered again of a regeneration.
	MessageID string `json:"message_id"`
	ParentID  string `json:"parent_id,omitempty"` // its parent
}

// answerBranchRun answers a request that started a run as POST …/retry does: with Accept:
// text/event-stream the run's events, else 202 with the run.
func (s *server) answerBranchRun(w http.ResponseWriter, r *http.Request, action string, st *chat.Started) {
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		s.streamSession(w, r, st.Session.ID, st.Run.FirstSeq()-1, true)
		return
	}
	writeJSON(w, http.StatusAccepted, branchRunResponse{Action: action, SessionID: st.Session.ID, RunID: st.Run.ID,
		Model: st.Run.Model, MessageID: st.UserMessage.ID, ParentID: st.UserMessage.ParentID})
}

// handleEdit is POST /api/v1/sessions/{id}/messages/{message_id}/edit: the body, a chat turn, is
// asked in place of the user message message_id (a sibling of it) and answered by a new run.
func (s *server) handleEdit() http.Handler {
	return s.handleBranchRun("edit", func(r *http.Request, owner, sessionID, messageID string) (*chat.Started, error) {
		return s.Chat.Edit(r.Context(), owner, sessionID, messageID, *bodyOf[chat.Request](r))
	})
}

// handleRegenerate is POST /api/v1/sessions/{id}/messages/{message_id}/regenerate: the question
// of message_id (a user message, or one of its answer) is answered again by a new run, the new
// answer a sibling of the old.
func (s *server) handleRegenerate() http.Handler {
	return s.handleBranchRun("regenerate", func(r *http.Request, owner, sessionID, messageID string) (*chat.Started, error) {
		return s.Chat.Regenerate(r.Context(), owner, sessionID, messageID, *bodyOf[chat.RetryRequest](r))
	})
}

// handleBranchRun is a route under /api/v1/sessions/{id}/messages/{message_id}/ that starts a run
// on a new branch with start, for the owner of the session, and answers as answerBranchRun does.
func (s *server) handleBranchRun(action string, start func(r *http.Request, owner, sessionID, messageID string) (*chat.Started, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, owner, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		mid, err := pathMessage(r)
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := start(r, owner, sess.ID, mid)
		if err != nil {
			writeError(w, err)
			return
		}
		s.answerBranchRun(w, r, action, st)
	})
}

// checkEdit is the body check of POST …/edit: a chat turn of the session in the path, so without
// session_id, parent_id or project_id of its own.
func (s *server) checkEdit(req *chat.Request) error {
	if req.SessionID != "" || req.ParentID != "" || req.ProjectID != "" {
		return parley.Errorf(parley.ECInvalid, "session_id, parent_id, project_id: not taken by an edit (the path names the session and the message)")
	}
	return s.Chat.Validate(req)
}

// wsRegenerate is the data of a regenerate frame: the WebSocket's POST …/regenerate, in the
// connection's session.
type wsRegenerate struct {
	SessionID     string   `json:"session_id,omitempty"` // optional: the connection's session
	MessageID     string   `json:"message_id"`
	Model         string   `json:"model,omitempty"`
	SelectedTools []string `json:"selected_tools,omitempty"`
}

// regenerate answers a regenerate frame with the same checks as a user message: rate limit,
// throttle, validation, ownership.
func (w *wsConn) regenerate(ctx context.Context, m wsRegenerate) (map[string]any, error) {
	if w.sessionID == "" {
		return nil, parley.Errorf(parley.ECConflict, "no session to regenerate in: this connection has none yet")
	}
	if m.SessionID != "" && m.SessionID != w.sessionID {
		return nil, parley.Errorf(parley.ECInvalid, "session_id: not this connection's session")
	}
	if err := checkMessageRef(&messageRef{MessageID: m.MessageID}); err != nil {
		return nil, err
	}
	if err := w.admit(ctx); err != nil {
		return nil, err
	}
	st, err := w.s.Chat.Regenerate(ctx, w.id.User, w.sessionID, m.MessageID, chat.RetryRequest{Model: m.Model, SelectedTools: m.SelectedTools})
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": "regenerate", "session_id": st.Session.ID, "run_id": st.Run.ID, "model": st.Run.Model,
		"message_id": st.UserMessage.ID}, nil
}
