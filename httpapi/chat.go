package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/runs"
)

// checkChat is the body check of the chat routes: everything about the request that needs no
// store (message, model, tools, attachments).
func (s *server) checkChat(req *chat.Request) error {
	return s.Chat.Validate(req)
}

// start decodes a chat request and starts its run.
func (s *server) start(r *http.Request) (*chat.Started, error) {
	owner := identityOf(r).User
	req := *bodyOf[chat.Request](r)
	if req.SessionID != "" && !validID(req.SessionID) {
		return nil, parley.Errorf(parley.ECNotFound, "session %q not found", truncate(req.SessionID, 80))
	}
	st, err := s.Chat.Send(r.Context(), owner, req)
	if err != nil && parley.CodeOf(err) == parley.ECNotFound {
		return nil, parley.Errorf(parley.ECNotFound, "session %q not found", req.SessionID)
	}
	return st, err
}

// batchResponse is the answer of POST /api/v1/chat (seed 001 §1.09).
type batchResponse struct {
	Response     string           `json:"response"`
	SessionID    string           `json:"session_id"`
	RunID        string           `json:"run_id"`
	Model        string           `json:"model"`
	FinishReason string           `json:"finish_reason"`
	Messages     []parley.Message `json:"messages"` // what the run stored, in order
	Usage        parley.Usage     `json:"usage"`
	Metadata     batchMetadata    `json:"metadata"`
}

type batchMetadata struct {
	BatchMode  bool `json:"batch_mode"`
	Iterations int  `json:"iterations"`
	ToolCalls  int  `json:"tool_calls"`
}

// handleChat runs a chat to the end and answers with the whole result. If the client leaves, the
// run goes on and its answer is stored.
func (s *server) handleChat() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := s.start(r)
		if err != nil {
			writeError(w, err)
			return
		}
		out := batchResponse{SessionID: st.Session.ID, RunID: st.Run.ID, Model: st.Run.Model, Metadata: batchMetadata{BatchMode: true}}
		var runErr *parley.ErrorBody
		err = s.readRun(r.Context(), st.Run, st.Run.FirstSeq()-1, func(ev parley.Event) error {
			switch ev.Type {
			case parley.EventRecord, parley.EventToolResult:
				out.Messages = append(out.Messages, *ev.Message)
				if ev.Message.Role == parley.RoleAssistant {
					out.Response = ev.Message.Content.String()
					out.Metadata.Iterations++
					out.Metadata.ToolCalls += len(ev.Message.ToolCalls)
				}
			case parley.EventUsage:
				out.Usage.Add(*ev.Usage)
			case parley.EventError:
				runErr = ev.Error
			case parley.EventDone:
				out.FinishReason = ev.FinishReason
			}
			return nil
		})
		if err != nil {
			return // the client left; the run goes on
		}
		if runErr != nil {
			if runErr.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(runErr.RetryAfter))
			}
			writeJSON(w, statusOf(runErr.Code), map[string]any{"error": runErr, "session_id": out.SessionID, "run_id": out.RunID})
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// handleChatStream starts a run and streams its events as SSE until the run is done or the client
// leaves (the run goes on without it).
func (s *server) handleChatStream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := s.start(r)
		if err != nil {
			writeError(w, err)
			return
		}
		// The session's stream from this run's first event, to its done event.
		s.streamSession(w, r, st.Session.ID, st.Run.FirstSeq()-1, true)
	})
}

// readRun calls fn for each event of the session's run after seq `after` until the run's done
// event or ctx ends.
func (s *server) readRun(ctx context.Context, run *runs.Run, after int64, fn func(parley.Event) error) error {
	for f, err := range s.Runs.After(ctx, run.SessionID, after) {
		if err != nil {
			return fmt.Errorf("reading run %s: %w", run.ID, err)
		}
		if err := fn(f.Event()); err != nil {
			return err
		}
		if f.Type == parley.EventDone {
			return nil
		}
	}
	return nil
}

// retryResponse is the answer of a retry that does not stream.
type retryResponse struct {
	Action    string `json:"action"` // "retry"
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	Model     string `json:"model"`
	MessageID string `json:"message_id"` // the user message answered again
}

// handleRetry is POST /api/v1/sessions/{id}/retry: a new run answers the session's failed last
// turn again. With Accept: text/event-stream it streams the run as POST /api/v1/chat/stream does;
// otherwise it answers 202 with the run, which the session's stream carries.
func (s *server) handleRetry() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, owner, err := s.ownedSession(r)
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := s.Chat.Retry(r.Context(), owner, sess.ID, *bodyOf[chat.RetryRequest](r))
		if err != nil {
			writeError(w, err)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			s.streamSession(w, r, sess.ID, st.Run.FirstSeq()-1, true)
			return
		}
		writeJSON(w, http.StatusAccepted, retryResponse{Action: "retry", SessionID: sess.ID, RunID: st.Run.ID, Model: st.Run.Model, MessageID: st.UserMessage.ID})
	})
}
