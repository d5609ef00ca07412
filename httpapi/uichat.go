package httpapi

import (
	"context"
	"net/http"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/httpapi/uistream"
	"github.com/parleyhq/parley/stream"
)

// The AI SDK UI message stream (package uistream): POST /api/v1/ui/chat takes useChat's request
// and streams the run as UI message chunks; GET /api/v1/ui/chat/{id}/stream resumes the chat's
// run in progress (204 when none); GET /api/v1/ui/chat/{id}/messages lists the chat as UIMessages.
// The same pipeline (auth, rate limit, throttle, body checks) and ownership rules as the native
// routes apply: a chat id maps to a session of the caller (uistream.SessionID), and another
// user's session is 403.

// checkUIChat is the body check of POST /api/v1/ui/chat.
func (s *server) checkUIChat(req *uistream.Request) error {
	if err := req.Check(); err != nil {
		return err
	}
	if len(req.Answers) > 0 {
		return nil // no turn: answers to the run's tool approvals
	}
	return s.Chat.Validate(&req.Turn)
}

// uiSession returns the caller's session of chat id, or nil when it does not exist yet; another
// user's session is 403.
func (s *server) uiSession(ctx context.Context, owner, chatID string) (*parley.Session, error) {
	sid := uistream.SessionID(owner, chatID)
	sess, err := s.Store.GetSession(ctx, sid)
	if parley.CodeOf(err) == parley.ECNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if sess.Owner != owner {
		return nil, parley.Errorf(parley.ECForbidden, "chat %q belongs to another user", chatID)
	}
	return sess, nil
}

// handleUIChat is POST /api/v1/ui/chat. The last user message is the turn; the chat's session is
// created on first use. trigger "regenerate-message" answers the last question again, storing
// no new user message: a failed last turn is retried (as POST …/retry does), otherwise the answer
// is regenerated (as POST …/messages/{id}/regenerate does): the new answer is a sibling of the
// old one, which stays on its own branch.
func (s *server) handleUIChat() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := identityOf(r).User
		req := bodyOf[uistream.Request](r)
		sess, err := s.uiSession(r.Context(), owner, req.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		if len(req.Answers) > 0 {
			s.uiAnswers(w, r, owner, sess, req)
			return
		}
		created := false
		if sess == nil {
			if req.Trigger == uistream.TriggerRegenerate {
				writeError(w, parley.Errorf(parley.ECConflict, "chat %q has no answer to regenerate", req.ID))
				return
			}
			if sess, created, err = s.createUISession(r.Context(), owner, req.ID, req.Turn.Message); err != nil {
				writeError(w, err)
				return
			}
		}
		st, err := s.startUITurn(r.Context(), owner, sess, req)
		if err != nil {
			if created {
				s.dropUISession(r.Context(), sess.ID, err)
			}
			writeError(w, err)
			return
		}
		s.uiStream(w, r, sess.ID, st.Run.ID, st.Run.FirstSeq()-1)
	})
}

// createUISession creates the session of a chat's first message, or returns the one a
// concurrent first request created.
func (s *server) createUISession(ctx context.Context, owner, chatID, message string) (*parley.Session, bool, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: uistream.SessionID(owner, chatID), Title: chat.Title(message), Owner: owner, CreatedAt: now, UpdatedAt: now}
	err := s.Store.CreateSession(ctx, sess)
	if err == nil {
		return sess, true, nil
	}
	// Another request may have created it meanwhile: use it if it is the caller's.
	if again, gerr := s.uiSession(ctx, owner, chatID); gerr == nil && again != nil {
		return again, false, nil
	} else if gerr != nil {
		return nil, false, gerr
	}
	return nil, false, err
}

// dropUISession deletes a session created for a chat whose first turn was refused, so that a
// refused chat leaves nothing behind. Its id is the chat's, not this request's alone: a
// concurrent first message of the same chat may have started a run in it (this request's refusal
// is then that run's conflict), so a session with a run or a message is kept.
func (s *server) dropUISession(ctx context.Context, id string, cause error) {
	if parley.CodeOf(cause) == parley.ECConflict {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, busy := s.Runs.Active(id); busy {
		return
	}
	if h, err := s.Store.ListMessages(dctx, id, 0, 1); err != nil || len(h) > 0 {
		return
	}
	if err := s.Store.DeleteSession(dctx, id); err != nil {
		s.Log.Warn("could not delete the session of a refused chat", "session", id, "err", err)
	}
}

// startUITurn starts the run of the request's turn in sess.
func (s *server) startUITurn(ctx context.Context, owner string, sess *parley.Session, req *uistream.Request) (*chat.Started, error) {
	turn := req.Turn
	turn.SessionID = sess.ID
	if req.Trigger != uistream.TriggerRegenerate {
		return s.Chat.Send(ctx, owner, turn)
	}
	h, err := s.Store.History(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	if len(h) == 0 || h[len(h)-1].Role == parley.RoleUser {
		return nil, parley.Errorf(parley.ECConflict, "chat %q has no answer to regenerate", req.ID)
	}
	last := &h[len(h)-1]
	if req.MessageID != "" && req.MessageID != last.RunID {
		return nil, parley.Errorf(parley.ECConflict, "messageId: only the chat's last answer (%q) can be regenerated", last.RunID)
	}
	if last.Failed() {
		// The model the client names, or (none) the one that failed, as POST …/retry.
		return s.Chat.Retry(ctx, owner, sess.ID, chat.RetryRequest{Model: req.Model, SelectedTools: req.SelectedTools})
	}
	return s.Chat.Regenerate(ctx, owner, sess.ID, last.ID, chat.RetryRequest{Model: req.Model, SelectedTools: req.SelectedTools})
}

// handleUIStream is GET /api/v1/ui/chat/{id}/stream: the chat's run in progress from its first
// event, or 204 when there is none (nor any session yet).
func (s *server) handleUIStream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := identityOf(r).User
		id := r.PathValue("id")
		if !uistream.ValidChatID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "chat %q not found", truncate(id, 80)))
			return
		}
		sess, err := s.uiSession(r.Context(), owner, id)
		if err != nil {
			writeError(w, err)
			return
		}
		if sess == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var runID string
		var after int64
		if run, ok := s.Runs.Active(sess.ID); ok {
			runID, after = run.ID, run.FirstSeq()-1
		} else if rec, err := s.Store.ActiveRun(r.Context(), sess.ID); err == nil {
			runID, after = rec.ID, rec.FirstSeq-1 // on another instance
		} else if parley.CodeOf(err) != parley.ECNotFound {
			writeError(w, err)
			return
		}
		if runID == "" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		release, err := s.acquireStream(owner)
		if err != nil {
			writeError(w, err)
			return
		}
		defer release()
		s.uiStream(w, r, sess.ID, runID, after)
	})
}

// handleUIMessages is GET /api/v1/ui/chat/{id}/messages: the chat's stored history as
// UIMessage[] ([] for a chat not used yet).
func (s *server) handleUIMessages() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := identityOf(r).User
		id := r.PathValue("id")
		if !uistream.ValidChatID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "chat %q not found", truncate(id, 80)))
			return
		}
		sess, err := s.uiSession(r.Context(), owner, id)
		if err != nil {
			writeError(w, err)
			return
		}
		if sess == nil {
			writeJSON(w, http.StatusOK, []uistream.UIMessage{})
			return
		}
		h, err := s.Store.History(r.Context(), sess.ID)
		if err != nil {
			writeError(w, err)
			return
		}
		recs, err := s.Store.ListApprovals(r.Context(), sess.ID, false)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, uistream.WithApprovals(uistream.FromHistory(h), recs))
	})
}

// uiStream writes the run's events after seq `after` as a UI message stream, until the run's done
// event (then [DONE]) or until the client leaves (the run goes on), the stream is idle for
// StreamIdle or open for StreamLifetime.
func (s *server) uiStream(w http.ResponseWriter, r *http.Request, sessionID, runID string, after int64) {
	s.uiStreamWith(w, r, sessionID, after, uistream.NewTranslator(runID))
}

// uiAnswers takes useChat's answers to the run's tool approvals (the request after
// addToolApprovalResponse), stores them as POST …/approvals/{call_id} does, and streams the rest
// of the run as the continuation of its assistant message. An answer to a call already decided
// (another client, the timeout) is no error: the stream shows how it was decided.
func (s *server) uiAnswers(w http.ResponseWriter, r *http.Request, owner string, sess *parley.Session, req *uistream.Request) {
	if sess == nil {
		writeError(w, parley.Errorf(parley.ECNotFound, "chat %q not found", req.ID))
		return
	}
	// The run is found before the answers are stored: it may end at once after them.
	var runID string
	var after int64
	if run, ok := s.Runs.Active(sess.ID); ok {
		runID, after = run.ID, run.FirstSeq()-1
	} else if rec, err := s.Store.ActiveRun(r.Context(), sess.ID); err == nil {
		runID, after = rec.ID, rec.FirstSeq-1
	} else if parley.CodeOf(err) != parley.ECNotFound {
		writeError(w, err)
		return
	}
	if runID == "" {
		writeError(w, parley.Errorf(parley.ECConflict, "no run of chat %q waits for approval", req.ID))
		return
	}
	if req.MessageID != "" && req.MessageID != runID {
		writeError(w, parley.Errorf(parley.ECConflict, "messageId: the answers are for the run in progress (%q)", runID))
		return
	}
	ids := make([]string, 0, len(req.Answers))
	for _, a := range req.Answers {
		ans := approval.Answer{Decision: approval.DecisionApprove}
		if !a.Approved {
			ans = approval.Answer{Decision: approval.DecisionDeny, Reason: a.Reason}
		}
		_, err := s.decideApproval(r.Context(), owner, sess.ID, a.CallID, ans)
		if err != nil && parley.CodeOf(err) != parley.ECConflict {
			writeError(w, err)
			return
		}
		ids = append(ids, a.CallID)
	}
	release, err := s.acquireStream(owner)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	s.uiStreamWith(w, r, sess.ID, after, uistream.NewContinuation(runID, ids))
}

// uiStreamWith is uiStream with the translator given.
func (s *server) uiStreamWith(w http.ResponseWriter, r *http.Request, sessionID string, after int64, tr *uistream.Translator) {
	w.Header().Set(uistream.Header, uistream.HeaderValue)
	w.Header().Set("X-Parley-Session", sessionID) // for the native routes (abort, records…)
	sse, err := newSSEWriter(w, s.WriteTimeout)
	if err != nil {
		writeError(w, err)
		return
	}
	s.streamOpen("sse")
	defer s.streamClose("sse")
	ctx, cancel := context.WithTimeout(r.Context(), s.StreamLifetime)
	defer cancel()
	t := &uiTransport{s: s, sse: sse, session: sessionID, tr: tr}
	t.emit = func(c uistream.Chunk) { sse.data(mustJSON(c)) }
	p := &pump{s: s, r: r, t: t, heartbeat: s.Heartbeat}
	p.subscribe(ctx, sessionID, after)
	_ = p.run(ctx)
	sse.end()
}

// uiTransport writes a run's events as a UI message stream, [DONE] after its done event.
type uiTransport struct {
	s       *server
	sse     *sseWriter
	session string
	tr      *uistream.Translator
	emit    func(uistream.Chunk)
}

func (t *uiTransport) frames(fs []*stream.Frame) (bool, error) {
	for _, f := range fs {
		ev := f.Event()
		t.tr.Event(&ev, t.emit)
		if t.tr.Ended() {
			break
		}
	}
	if t.tr.Ended() {
		t.sse.data([]byte(uistream.Done))
	}
	if err := t.sse.err; err != nil { // a write of a large batch failed
		t.s.Log.Info("UI stream client dropped", "session", t.session, "err", err)
		return false, err
	}
	return t.tr.Ended(), nil
}

func (t *uiTransport) flush() error {
	if err := t.sse.flush(); err != nil {
		t.s.Log.Info("UI stream client dropped", "session", t.session, "err", err)
		return err
	}
	return nil
}

func (t *uiTransport) heartbeat() error { return t.sse.comment("ping") }

func (t *uiTransport) failed(err error) {
	t.s.Log.Warn("UI stream ended", "session", t.session, "err", err)
}

func (t *uiTransport) revoked(err error) {
	t.emit(uistream.Chunk{Type: uistream.TypeError, ErrorText: errorBodyOf(err).Message})
	_ = t.sse.flush()
}

func (t *uiTransport) idle() {
	_ = t.sse.comment("idle timeout: GET /api/v1/ui/chat/{id}/stream resumes")
}

func (t *uiTransport) lifetime() {}

// data buffers one SSE event of data only ("data: <line>" and a blank line), as the UI message
// stream frames its chunks.
func (s *sseWriter) data(line []byte) {
	b := s.b()
	*b = append(*b, "data: "...)
	*b = append(*b, line...)
	*b = append(*b, "\n\n"...)
	s.gathered()
}
