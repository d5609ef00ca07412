// Package chat turns a user's message into a run: it validates the request, finds or creates the
// session, stores the message durably, and starts the agent loop under the run manager. The HTTP
// handlers (and later the WebSocket handler) share this one path.
package chat

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
)

// Runner is the agent loop (agent.Agent satisfies it).
type Runner interface {
	Run(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error)
}

// Recoverer goes on with a run taken over from a process that died (agent.Agent satisfies it).
type Recoverer interface {
	Resume(ctx context.Context, in agent.Input, emit func(parley.Event)) (*agent.Result, error)
	Interrupt(ctx context.Context, in agent.Input) ([]*parley.Message, error)
}

// MaxRecoveries bounds how many times one run is taken over and continued. A run taken over more
// often is closed as interrupted: a run that brings its process down each time must not bring
// down every instance in turn.
const MaxRecoveries = 3

// Service starts chats.
type Service struct {
	Store parley.Store
	Runs  *runs.Manager
	Agent Runner
	// Recovery continues runs taken over after a crash (Recover); nil closes them as interrupted.
	Recovery Recoverer
	// ResolveModel validates a model name as the client gives it and returns its full name
	// ("provider/model"); nil accepts any name as it is.
	ResolveModel func(model string) (string, error)
	// CheckTools validates selected_tools; nil accepts any.
	CheckTools func(selected []string) error
	// Files checks and attaches the files a message names (file_ids); nil refuses file_ids.
	Files Attacher
	// History, when set, is told of the user messages a chat stores (historycache.Cache), so that
	// the agent's next read of the session's history need not read them back.
	History      HistoryCache
	DefaultModel string
	MaxMessage   int // characters of message text (default 100,000)
	Now          func() time.Time
}

// Attacher checks and attaches uploaded files (files.Service satisfies it).
type Attacher interface {
	// CheckAttach returns the files ids, in order, if owner may attach them to a message of
	// sessionID ("" for a session not created yet).
	CheckAttach(ctx context.Context, owner, sessionID string, ids []string) ([]*parley.File, error)
	// Attach puts those of fs that are in no session into sessionID.
	Attach(ctx context.Context, sessionID string, fs []*parley.File) error
}

// HistoryCache keeps sessions' model views in memory (historycache.Cache satisfies it).
type HistoryCache interface {
	// Seed makes msgs, just stored, the whole view of a new session.
	Seed(sessionID string, msgs ...*parley.Message)
	// Appended extends the session's view with msgs, just stored, if they follow it.
	Appended(sessionID string, msgs ...*parley.Message)
	// ViewAt returns the session's view if it ends at the message tip, else nil.
	ViewAt(sessionID, tip string) []parley.Message
}

// MaxFileIDs bounds the files of one message.
const MaxFileIDs = 20

// Request is one user turn (seed 001 §1.01, with seed 000's binary_content and issue 20's
// file_ids: uploaded files, stored in the message as references).
type Request struct {
	Message       string        `json:"message"`
	BinaryContent []parley.Part `json:"binary_content,omitempty"`
	FileIDs       []string      `json:"file_ids,omitempty"`
	SessionID     string        `json:"session_id,omitempty"`
	Model         string        `json:"model,omitempty"`
	SelectedTools []string      `json:"selected_tools,omitempty"`
	// ProjectID puts the session a message without session_id creates into this project of the
	// caller's (issue 20).
	ProjectID string `json:"project_id,omitempty"`
	// ParentID is the message of session_id the new user message follows (issue 23): "" for the
	// session's active leaf, parley.ParentRoot for none (a new first message). Naming another
	// message starts a new branch there, which becomes the active one.
	ParentID string `json:"parent_id,omitempty"`
}

// Started describes a run that has begun: the user's message is stored.
type Started struct {
	Session     *parley.Session
	Run         *runs.Run
	UserMessage *parley.Message
	NewSession  bool
}

// Send validates req, stores the user's message and starts the run. Nothing is stored when the
// request is invalid. owner is the caller's identity.
func (s *Service) Send(ctx context.Context, owner string, req Request) (*Started, error) {
	content, err := s.validate(&req)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var sess *parley.Session
	newSession := false
	if req.SessionID != "" {
		sess, err = s.Store.GetSession(ctx, req.SessionID)
		if err != nil {
			return nil, err
		}
		if sess.Owner != owner {
			return nil, parley.Errorf(parley.ECForbidden, "this session belongs to another user")
		}
	}
	var attached []*parley.File
	if len(req.FileIDs) > 0 {
		if attached, err = s.Files.CheckAttach(ctx, owner, req.SessionID, req.FileIDs); err != nil {
			return nil, err
		}
		parts := content.Parts()
		if parts == nil {
			parts = []parley.Part{{Type: "text", Text: req.Message}}
			if req.Message == "" {
				parts = nil
			}
		}
		for _, f := range attached {
			parts = append(parts, parley.Part{Type: "file", File: &parley.FileRef{FileID: f.ID, Filename: f.Name}})
		}
		content = parley.Parts(parts...)
	}
	if sess == nil {
		title := req.Message
		if strings.TrimSpace(title) == "" && len(attached) > 0 {
			title = attached[0].Name
		}
		sess = &parley.Session{ID: parley.NewID(), Title: Title(title), Owner: owner, CreatedAt: now, UpdatedAt: now}
		if req.ProjectID != "" {
			p, err := s.Store.GetProject(ctx, req.ProjectID)
			if err != nil {
				if parley.CodeOf(err) == parley.ECNotFound {
					return nil, parley.Errorf(parley.ECNotFound, "project %q not found", req.ProjectID)
				}
				return nil, err
			}
			if p.Owner != owner {
				return nil, parley.Errorf(parley.ECForbidden, "this project belongs to another user")
			}
			sess.ProjectID = p.ID
		}
		newSession = true
	}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: content, CreatedAt: now, ParentID: req.ParentID}
	if len(attached) == 0 && s.Runs.OneWrite() {
		// The model call can start before the message is durable when the chat knows the
		// history it follows: a new session's is empty; an existing session's is the cached
		// view that ends at the session's leaf as just read, and the message is stored after
		// that leaf (named, not "the leaf at the write"), so that what the model is sent is the
		// branch the message is stored on, whatever another instance does meanwhile.
		switch {
		case newSession:
			return s.launch(ctx, owner, req, sess, true, user, nil)
		case req.ParentID == "" && sess.LeafID != "" && s.History != nil:
			if view := s.History.ViewAt(sess.ID, sess.LeafID); view != nil {
				user.ParentID = sess.LeafID
				return s.launch(ctx, owner, req, sess, false, user, view)
			}
		}
	}
	run, err := s.begin(ctx, owner, req, sess, newSession, user)
	if err != nil {
		return nil, err
	}
	// The agent is given what the chat knows: the session it just read, and the history up to
	// the message it just stored when the cache holds the branch that message follows.
	known := *sess
	in := agent.Input{SessionID: sess.ID, RunID: run.ID, Model: req.Model, SelectedTools: req.SelectedTools, User: owner,
		Run: run, Session: &known}
	if s.History != nil {
		s.History.Appended(sess.ID, user)
		in.History = s.History.ViewAt(sess.ID, user.ID)
	}
	// The files in no session join this one, once the message that names them is stored (a
	// refused chat deletes the session it made, and must not take the user's files with it).
	// A failure leaves them in no session, where they stay usable: the chat goes on.
	if len(attached) > 0 {
		_ = s.Files.Attach(ctx, sess.ID, attached)
	}
	run.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		res, err := s.Agent.Run(ctx, in, emit)
		if res != nil {
			return res.FinishReason, err
		}
		return "", err
	}, parley.Event{Type: parley.EventRecord, Message: user})
	return &Started{Session: sess, Run: run, UserMessage: user, NewSession: newSession}, nil
}

// launch starts a chat whose model call starts while its beginning (the new session, the run, the
// user's message) is being written (runs.Manager.Launch), and is sent the history the chat
// already knows (before, the model view the message follows; nil for a new session) with the
// session as it was made or read, instead of reading back what was just written. Nothing reaches
// a client before the write has committed; if it fails, the model call is cancelled, nothing is
// stored and the chat fails.
func (s *Service) launch(ctx context.Context, owner string, req Request, sess *parley.Session, newSession bool, user *parley.Message, before []parley.Message) (*Started, error) {
	l := &launched{known: *sess, agent: s.Agent}
	l.msgs[0] = user
	// The model's view, made before the write gives the message its seq; room for a system
	// prompt (llmctx.BuildOwned).
	view := append(make([]parley.Message, 0, len(before)+2), before...)
	view = append(view, user.ModelView())
	spec := runs.Spec{Session: sess.ID, Model: req.Model, Owner: owner, SelectedTools: req.SelectedTools,
		Messages: l.msgs[:]}
	if newSession {
		spec.NewSession = sess
	}
	run, err := s.Runs.Launch(ctx, spec, func(run *runs.Run) runs.Func {
		// Called before the run's goroutine starts, which then reads l.in.
		l.in = agent.Input{SessionID: sess.ID, RunID: run.ID, Model: req.Model, SelectedTools: req.SelectedTools, User: owner,
			Begun: run.Begun, Run: run, History: view, Session: &l.known}
		return l.run
	}, parley.Event{Type: parley.EventRecord, Message: user}) // the question follows start at once
	if err != nil {
		// A failed write stored nothing; a run refused after it (the server shutting down)
		// leaves the session it created, which goes.
		s.dropNew(ctx, sess, newSession)
		return nil, err
	}
	if s.History != nil {
		if newSession {
			s.History.Seed(sess.ID, l.msgs[:]...)
		} else {
			s.History.Appended(sess.ID, l.msgs[:]...)
		}
	}
	return &Started{Session: sess, Run: run, UserMessage: user, NewSession: newSession}, nil
}

// launched is what a launched chat's run is given, in one allocation: the session as the chat
// knew it, the user's message as the run's spec and the history cache take it (read only), and
// the agent's input.
type launched struct {
	known parley.Session
	msgs  [1]*parley.Message
	in    agent.Input
	agent Runner
}

func (l *launched) run(ctx context.Context, emit func(parley.Event)) (string, error) {
	res, err := l.agent.Run(ctx, l.in, emit)
	if res != nil {
		return res.FinishReason, err
	}
	return "", err
}

// begin begins the run of a chat and stores its new session (if newSession) and user message.
// With a store that can, all of it is one durable write (runs.Manager.OneWrite): the session,
// the run's event numbers and record, and the message; otherwise one write each, in that order.
func (s *Service) begin(ctx context.Context, owner string, req Request, sess *parley.Session, newSession bool, user *parley.Message) (*runs.Run, error) {
	spec := runs.Spec{Session: sess.ID, Model: req.Model, Owner: owner, SelectedTools: req.SelectedTools}
	if s.Runs.OneWrite() {
		spec.Messages = []*parley.Message{user}
		if newSession {
			spec.NewSession = sess
		}
		run, err := s.Runs.Begin(ctx, spec)
		if err != nil {
			// A failed write stored nothing; a run refused after it (the server shutting
			// down) leaves the session it created.
			s.dropNew(ctx, sess, newSession)
			return nil, err
		}
		return run, nil
	}
	if newSession {
		if err := s.Store.CreateSession(ctx, sess); err != nil {
			return nil, err
		}
	}
	run, err := s.Runs.Begin(ctx, spec)
	if err != nil {
		s.dropNew(ctx, sess, newSession)
		return nil, err
	}
	user.RunID = run.ID
	if err := s.Store.AppendMessages(ctx, sess.ID, user); err != nil {
		run.Release()
		s.dropNew(ctx, sess, newSession)
		return nil, err
	}
	return run, nil
}

// RetryRequest asks for a failed turn to be answered again, by the model that failed (the
// default when it is no longer offered) or by another one.
type RetryRequest struct {
	Model         string   `json:"model,omitempty"`
	SelectedTools []string `json:"selected_tools,omitempty"`
}

// ValidateRetry checks req as Retry will, without touching the store.
func (s *Service) ValidateRetry(req *RetryRequest) error {
	if req.Model != "" && s.ResolveModel != nil {
		full, err := s.ResolveModel(req.Model)
		if err != nil {
			return err
		}
		req.Model = full
	}
	if s.CheckTools != nil && req.SelectedTools != nil {
		return s.CheckTools(req.SelectedTools)
	}
	return nil
}

// Retry starts a run that answers the failed last turn of the session again: the question of
// that turn, with what the model is sent of the history before it (llmctx leaves the failure
// out). It stores no message of its own. A session whose last turn did not fail, or that has a
// run, is a conflict.
func (s *Service) Retry(ctx context.Context, owner, sessionID string, req RetryRequest) (*Started, error) {
	if err := s.ValidateRetry(&req); err != nil {
		return nil, err
	}
	sess, err := s.Store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if sess.Owner != owner {
		return nil, parley.Errorf(parley.ECForbidden, "this session belongs to another user")
	}
	failed, user, err := s.failedTurn(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	if req.Model == "" {
		// The model that failed, unless it is no longer offered: then the default.
		req.Model = s.DefaultModel
		if failed.Model != "" {
			req.Model = failed.Model
		}
		if s.ResolveModel != nil {
			full, err := s.ResolveModel(req.Model)
			if err != nil && req.Model != s.DefaultModel {
				full, err = s.ResolveModel(s.DefaultModel)
			}
			if err != nil {
				return nil, err
			}
			req.Model = full
		}
	}
	run, err := s.Runs.Begin(ctx, runs.Spec{Session: sess.ID, Model: req.Model, Owner: owner, SelectedTools: req.SelectedTools})
	if err != nil {
		return nil, err
	}
	// The run holds the session now: the turn is read again, in case another run answered it
	// in between.
	if again, _, err := s.failedTurn(ctx, sess.ID); err != nil || again.ID != failed.ID {
		run.Release()
		if err == nil {
			err = parley.Errorf(parley.ECConflict, "the last turn of this session changed: there is nothing to retry")
		}
		return nil, err
	}
	in := agent.Input{SessionID: sess.ID, RunID: run.ID, Model: req.Model, SelectedTools: req.SelectedTools, User: owner, Run: run}
	run.Go(func(ctx context.Context, emit func(parley.Event)) (string, error) {
		res, err := s.Agent.Run(ctx, in, emit)
		if res != nil {
			return res.FinishReason, err
		}
		return "", err
	})
	return &Started{Session: sess, Run: run, UserMessage: user}, nil
}

// failedTurn returns the failure's message that ends the session, and the user message of its
// turn; a conflict when the last turn did not fail.
func (s *Service) failedTurn(ctx context.Context, sessionID string) (*parley.Message, *parley.Message, error) {
	h, err := s.Store.History(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	n := len(h)
	if n == 0 || !h[n-1].Failed() {
		return nil, nil, parley.Errorf(parley.ECConflict, "the last turn of this session did not fail: there is nothing to retry")
	}
	for i := n - 1; i >= 0; i-- {
		if h[i].Role == parley.RoleUser {
			return &h[n-1], &h[i], nil
		}
	}
	return nil, nil, parley.Errorf(parley.ECConflict, "the failed turn has no user message to answer")
}

// dropNew deletes the session Send created for a chat it then could not start (the run budget
// was spent, the message could not be stored), so that a refused chat leaves nothing behind. It
// outlives a cancelled request, within a bound of its own.
func (s *Service) dropNew(ctx context.Context, sess *parley.Session, created bool) {
	if !created {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = s.Store.DeleteSession(dctx, sess.ID) // best effort: the error that refused the chat is the one to report
}

// Recover is the runs.RecoverFunc of the service's manager: the body of a run taken over from a
// process that died. It continues the run from its last stored step (agent.Resume), or, past
// MaxRecoveries or without Recovery, closes it: its open tool calls are answered as interrupted
// and it ends with FinishInterrupted.
func (s *Service) Recover(run *runs.Run, rec parley.RunRecord) runs.Func {
	in := agent.Input{SessionID: rec.SessionID, RunID: rec.ID, Model: rec.Model, SelectedTools: rec.SelectedTools, User: rec.Owner, Run: run}
	return func(ctx context.Context, emit func(parley.Event)) (string, error) {
		if s.Recovery == nil {
			return parley.FinishInterrupted, nil
		}
		if rec.Attempts > MaxRecoveries {
			msgs, err := s.Recovery.Interrupt(ctx, in)
			for _, m := range msgs {
				emit(parley.Event{Type: parley.EventToolResult, Message: m})
			}
			return parley.FinishInterrupted, err
		}
		res, err := s.Recovery.Resume(ctx, in, emit)
		if res != nil {
			return res.FinishReason, err
		}
		return "", err
	}
}

// Validate checks req as Send will, without touching the store: the HTTP layer calls it when it
// decodes the body (after authentication and the rate limit), so that a bad request is refused
// before any run is begun. It fills in the resolved model.
func (s *Service) Validate(req *Request) error {
	_, err := s.validate(req)
	return err
}

func (s *Service) validate(req *Request) (parley.Content, error) {
	maxLen := s.MaxMessage
	if maxLen <= 0 {
		maxLen = 100_000
	}
	if err := parley.CheckText("message", req.Message, parley.TextMessage); err != nil {
		return parley.Content{}, err
	}
	if n := utf8.RuneCountInString(req.Message); n > maxLen {
		return parley.Content{}, parley.Errorf(parley.ECInvalid, "message: %d characters, the limit is %d", n, maxLen)
	}
	if strings.TrimSpace(req.Message) == "" && len(req.BinaryContent) == 0 && len(req.FileIDs) == 0 {
		return parley.Content{}, parley.Errorf(parley.ECInvalid, "message: must not be empty")
	}
	if len(req.FileIDs) > 0 && s.Files == nil {
		return parley.Content{}, parley.Errorf(parley.ECInvalid, "file_ids: file uploads are not enabled on this server")
	}
	if len(req.FileIDs) > MaxFileIDs {
		return parley.Content{}, parley.Errorf(parley.ECInvalid, "file_ids: %d files, the limit is %d", len(req.FileIDs), MaxFileIDs)
	}
	for i, id := range req.FileIDs {
		if id == "" || len(id) > 64 {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "file_ids[%d]: not a file id", i)
		}
		if err := parley.CheckText(fmt.Sprintf("file_ids[%d]", i), id, parley.TextName); err != nil {
			return parley.Content{}, err
		}
	}
	if err := parley.CheckText("model", req.Model, parley.TextName); err != nil {
		return parley.Content{}, err
	}
	if req.ParentID != "" {
		if req.SessionID == "" {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "parent_id: only with session_id")
		}
		if err := parley.CheckText("parent_id", req.ParentID, parley.TextName); err != nil || len(req.ParentID) > 64 {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "parent_id: not a message id")
		}
	}
	if req.ProjectID != "" {
		if req.SessionID != "" {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "project_id: only for a new session (without session_id); PATCH /api/v1/sessions/{id} moves a session")
		}
		if err := parley.CheckText("project_id", req.ProjectID, parley.TextName); err != nil || len(req.ProjectID) > 64 {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "project_id: not a valid id")
		}
	}
	for i, name := range req.SelectedTools {
		if err := parley.CheckText(fmt.Sprintf("selected_tools[%d]", i), name, parley.TextName); err != nil {
			return parley.Content{}, err
		}
	}
	if req.Model == "" {
		req.Model = s.DefaultModel
	}
	if s.ResolveModel != nil {
		full, err := s.ResolveModel(req.Model)
		if err != nil {
			return parley.Content{}, err
		}
		req.Model = full
	}
	if s.CheckTools != nil && req.SelectedTools != nil {
		if err := s.CheckTools(req.SelectedTools); err != nil {
			return parley.Content{}, err
		}
	}
	if len(req.BinaryContent) == 0 {
		return parley.Text(req.Message), nil
	}
	parts := make([]parley.Part, 0, len(req.BinaryContent)+1)
	if req.Message != "" {
		parts = append(parts, parley.Part{Type: "text", Text: req.Message})
	}
	for i, p := range req.BinaryContent {
		if p.Type != "image_url" || p.ImageURL == nil || p.ImageURL.URL == "" {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "binary_content[%d]: must be {\"type\":\"image_url\",\"image_url\":{\"url\":…}}", i)
		}
		u := p.ImageURL.URL
		if err := parley.CheckText(fmt.Sprintf("binary_content[%d].image_url.url", i), u, parley.TextName); err != nil {
			return parley.Content{}, err
		}
		if !strings.HasPrefix(u, "data:image/") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
			return parley.Content{}, parley.Errorf(parley.ECInvalid, "binary_content[%d]: url must be a data:image/… URL or http(s)", i)
		}
		parts = append(parts, p)
	}
	return parley.Parts(parts...), nil
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}

// Title derives a session title from the first message: its first line, at most 60 characters,
// with tabs as spaces and without what a name may not hold (parley.TextName): a title derived from
// a message passes the check a title given by a client does.
func Title(msg string) string {
	msg = strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r == '\n' || r == '\r':
			return r
		case !parley.Allowed(r, parley.TextName):
			return -1
		}
		return r
	}, msg)
	msg = strings.TrimSpace(msg)
	if i := strings.IndexAny(msg, "\r\n"); i >= 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	if utf8.RuneCountInString(msg) > 60 {
		r := []rune(msg)
		msg = strings.TrimSpace(string(r[:59])) + "…"
	}
	if msg == "" {
		return "New chat"
	}
	return msg
}
