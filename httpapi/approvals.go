package httpapi

import (
	"context"
	"net/http"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/approval"
)

// Tool approval (issue 23): the session's pending approvals, and the owner's answers.

// handleListApprovals is GET /api/v1/sessions/{id}/approvals: the pending approvals, as the
// approval_required events showed them.
func (s *server) handleListApprovals() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if s.Approvals == nil {
			writeJSON(w, http.StatusOK, map[string]any{"approvals": []*parley.Approval{}})
			return
		}
		list, err := s.Approvals.Pending(r.Context(), sess.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"approvals": list})
	})
}

// handleDecideApproval is POST /api/v1/sessions/{id}/approvals/{call_id}.
func (s *server) handleDecideApproval() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, owner, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		out, err := s.decideApproval(r.Context(), owner, sess.ID, r.PathValue("call_id"), *bodyOf[approval.Answer](r))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"approval": out})
	})
}

func (s *server) decideApproval(ctx context.Context, owner, sessionID, callID string, a approval.Answer) (*parley.Approval, error) {
	if !validID(callID) {
		return nil, parley.Errorf(parley.ECNotFound, "no tool call %q waits for approval in this session", truncate(callID, 80))
	}
	if s.Approvals == nil {
		return nil, parley.Errorf(parley.ECNotFound, "no tool call %q waits for approval in this session", callID)
	}
	return s.Approvals.Decide(ctx, owner, sessionID, callID, a)
}

// wsApproval is the data of an approval frame.
type wsApproval struct {
	SessionID string `json:"session_id,omitempty"` // default: the connection's session
	CallID    string `json:"call_id"`
	approval.Answer
}

// approvalFrame answers an approval frame as POST …/approvals/{call_id} does.
func (w *wsConn) approvalFrame(ctx context.Context, a wsApproval) (map[string]any, error) {
	s := w.s
	if err := s.stillValid(ctx, w.r); err != nil {
		return nil, err
	}
	if err := s.limitFor(ctx, w.ip, w.id, nil); err != nil {
		return nil, err
	}
	sessionID := a.SessionID
	if sessionID == "" {
		sessionID = w.sessionID
	}
	if sessionID == "" {
		return nil, parley.Errorf(parley.ECInvalid, "session_id: required on a connection without a session")
	}
	if sessionID != w.sessionID {
		if err := s.ownsSession(w.r, w.id.User, sessionID); err != nil {
			return nil, err
		}
	}
	out, err := s.decideApproval(ctx, w.id.User, sessionID, a.CallID, a.Answer)
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": "approval", "session_id": sessionID, "approval": out}, nil
}

// flatApproval reads an approval frame written without "data": {"type": "approval", "id"?,
// "session_id"?, "call_id", "decision", …}. ok is false for anything else (or a frame that does
// not check), which is then refused as any bad frame is.
func flatApproval(data []byte) (a wsApproval, id string, ok bool) {
	var f struct {
		Type string `json:"type"`
		ID   string `json:"id,omitempty"`
		wsApproval
	}
	if decodeStrict(data, &f) != nil || f.Type != "approval" || len(f.ID) > 128 ||
		parley.CheckText("id", f.ID, parley.TextName) != nil || f.Check() != nil {
		return wsApproval{}, "", false
	}
	return f.wsApproval, f.ID, true
}
