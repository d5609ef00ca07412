package chat

import (
	"context"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
)

// owned returns the session if owner owns it.
func (s *Service) owned(ctx context.Context, owner, sessionID string) (*parley.Session, error) {
	sess, err := s.Store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if sess.Owner != owner {
		return nil, parley.Errorf(parley.ECForbidden, "this session belongs to another user")
	}
	return sess, nil
}

// node returns the tree node of messageID in the session: ECNotFound when it has none.
func (s *Service) node(ctx context.Context, sessionID, messageID string) (parley.TreeNode, error) {
	_, nodes, err := s.Store.Tree(ctx, sessionID)
	if err != nil {
		return parley.TreeNode{}, err
	}
	for _, n := range nodes {
		if n.ID == messageID {
			return n, nil
		}
	}
	return parley.TreeNode{}, parley.Errorf(parley.ECNotFound, "message %q not found in this session", messageID)
}

// Edit asks req's message in place of the user message messageID: the new message is a sibling
// of it (the same parent), its branch becomes the active one, and a run answers it, as Send.
func (s *Service) Edit(ctx context.Context, owner, sessionID, messageID string, req Request) (*Started, error) {
	if _, err := s.owned(ctx, owner, sessionID); err != nil {
		return nil, err
	}
	n, err := s.node(ctx, sessionID, messageID)
	if err != nil {
		return nil, err
	}
	if n.Role != parley.RoleUser {
		return nil, parley.Errorf(parley.ECInvalid, "message %q is a %s message: only a user message can be edited", messageID, n.Role)
	}
	req.SessionID, req.ParentID, req.ProjectID = sessionID, n.ParentID, ""
	if req.ParentID == "" {
		req.ParentID = parley.ParentRoot
	}
	return s.Send(ctx, owner, req)
}

// Regenerate answers again the question of messageID, a user message or a message of its answer:
// the session's active leaf becomes that user message, and a run answers it, its answer a sibling
// of the old one. By default the model is the one of messageID (an assistant message), or the
// default model. It stores no user message.
func (s *Service) Regenerate(ctx context.Context, owner, sessionID, messageID string, req RetryRequest) (*Started, error) {
	if err := s.ValidateRetry(&req); err != nil {
		return nil, err
	}
	sess, err := s.owned(ctx, owner, sessionID)
	if err != nil {
		return nil, err
	}
	path, _, err := s.Store.ListBranch(ctx, sessionID, messageID, 0, 0)
	if parley.CodeOf(err) == parley.ECNotFound {
		return nil, parley.Errorf(parley.ECNotFound, "message %q not found in this session", messageID)
	}
	if err != nil {
		return nil, err
	}
	var user *parley.Message
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Role == parley.RoleUser {
			user = &path[i]
			break
		}
	}
	if user == nil {
		return nil, parley.Errorf(parley.ECInvalid, "message %q has no user message before it to answer again", messageID)
	}
	if req.Model == "" {
		if req.Model, err = s.modelOf(path[len(path)-1]); err != nil {
			return nil, err
		}
	}
	// The run's record and the leaf at the question are one write (the store's BeginRun), so
	// that the answer the run stores, or stores after a restart, follows the question.
	run, err := s.Runs.Begin(ctx, runs.Spec{Session: sess.ID, Model: req.Model, Owner: owner, SelectedTools: req.SelectedTools,
		Leaf: user.ID, Leaves: s.Store})
	if err != nil {
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

// modelOf returns the model that answers again in place of m: its own when it is an assistant
// message whose model is still offered, else the default.
func (s *Service) modelOf(m parley.Message) (string, error) {
	model := s.DefaultModel
	if m.Role == parley.RoleAssistant && m.Model != "" {
		model = m.Model
	}
	if s.ResolveModel == nil {
		return model, nil
	}
	full, err := s.ResolveModel(model)
	if err != nil && model != s.DefaultModel {
		full, err = s.ResolveModel(s.DefaultModel)
	}
	return full, err
}

// SwitchBranch makes the newest leaf under messageID the session's active leaf and returns it. A
// run in progress in the session is a conflict.
func (s *Service) SwitchBranch(ctx context.Context, owner, sessionID, messageID string) (string, error) {
	if _, err := s.owned(ctx, owner, sessionID); err != nil {
		return "", err
	}
	if _, ok := s.Runs.Active(sessionID); ok {
		return "", parley.Errorf(parley.ECConflict, "a run is in progress in this session: switch branches when it has ended")
	}
	leaf, err := s.Store.SwitchBranch(ctx, sessionID, messageID)
	if parley.CodeOf(err) == parley.ECNotFound {
		return "", parley.Errorf(parley.ECNotFound, "message %q not found in this session", messageID)
	}
	return leaf, err
}

// Fork makes a new session of owner's holding a copy of the branch of sessionID that ends at
// messageID, in the same project, and returns it. A fork at an assistant message that called
// tools takes along the tool messages that answer it, so that the copy ends at a whole step.
func (s *Service) Fork(ctx context.Context, owner, sessionID, messageID string) (*parley.Session, error) {
	src, err := s.owned(ctx, owner, sessionID)
	if err != nil {
		return nil, err
	}
	_, nodes, err := s.Store.Tree(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	end := withResults(nodes, messageID)
	now := s.now()
	into := &parley.Session{ID: parley.NewID(), Title: Title(src.Title + " (fork)"), Owner: owner, ProjectID: src.ProjectID,
		CreatedAt: now, UpdatedAt: now}
	if _, err := s.Store.Fork(ctx, sessionID, end, into); err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			return nil, parley.Errorf(parley.ECNotFound, "message %q not found in this session", messageID)
		}
		return nil, err
	}
	return s.Store.GetSession(ctx, into.ID)
}

// withResults returns the last of the tool messages that follow id (its tool results, stored one
// after the other), or id when none follows it. nodes are in storage order.
func withResults(nodes []parley.TreeNode, id string) string {
	for {
		next := ""
		for _, n := range nodes {
			if n.ParentID == id && n.Role == parley.RoleTool {
				next = n.ID // the newest, should a crash and a retry have left two
			}
		}
		if next == "" {
			return id
		}
		id = next
	}
}
