package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
)

// The decisions a client sends.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
	DecisionAlways  = "always" // approve, and allow the tool for the rest of the session
)

// MaxReason bounds the characters of a denial's reason.
const MaxReason = 2000

// Answer is a client's decision on a pending approval (the body of POST
// /api/v1/sessions/{id}/approvals/{call_id}, and the fields of the WebSocket's approval frame).
type Answer struct {
	Decision string `json:"decision"`
	// Arguments are the edited arguments, a JSON object (approve and always only).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// Check validates the answer's shape; the arguments are checked against the tool's schema by
// Decide.
func (a *Answer) Check() error {
	switch a.Decision {
	case DecisionApprove, DecisionAlways:
		if a.Reason != "" {
			return parley.Errorf(parley.ECInvalid, "reason: only with decision deny")
		}
	case DecisionDeny:
		if len(a.Arguments) > 0 && string(a.Arguments) != "null" {
			return parley.Errorf(parley.ECInvalid, "arguments: only with decision approve or always")
		}
	default:
		return parley.Errorf(parley.ECInvalid, "decision: must be approve, deny or always")
	}
	if n := utf8.RuneCountInString(a.Reason); n > MaxReason {
		return parley.Errorf(parley.ECInvalid, "reason: %d characters, the limit is %d", n, MaxReason)
	}
	if err := parley.CheckText("reason", a.Reason, parley.TextMessage); err != nil {
		return err
	}
	if len(a.Arguments) > 0 && string(a.Arguments) != "null" {
		if t := bytes.TrimSpace(a.Arguments); len(t) == 0 || t[0] != '{' {
			return parley.Errorf(parley.ECInvalid, "arguments: must be a JSON object")
		}
	}
	return nil
}

// Service answers approvals: it checks a decision, stores it, and tells the run.
type Service struct {
	Store interface {
		GetApproval(ctx context.Context, sessionID, callID string) (*parley.ApprovalRecord, error)
		ListApprovals(ctx context.Context, sessionID string, pendingOnly bool) ([]parley.ApprovalRecord, error)
		DecideApproval(ctx context.Context, sessionID, callID string, d parley.ApprovalDecision) (*parley.ApprovalRecord, error)
	}
	// CheckArgs validates edited arguments against the tool's schema (tools.Registry.CheckArgs).
	CheckArgs func(tool string, args []byte) error
	// Notify tells the session's run, on whichever instance runs it, that a decision was stored
	// (runs.Manager.NotifyApproval); nil: the run finds it at its next poll.
	Notify func(ctx context.Context, sessionID string)
	Now    func() time.Time
}

// Pending returns the session's pending approvals as approval_required shows them. The caller
// has checked that the session is the caller's.
func (s *Service) Pending(ctx context.Context, sessionID string) ([]*parley.Approval, error) {
	recs, err := s.Store.ListApprovals(ctx, sessionID, true)
	if err != nil {
		return nil, err
	}
	out := make([]*parley.Approval, 0, len(recs))
	for i := range recs {
		out = append(out, recs[i].Required())
	}
	return out, nil
}

// Decide stores by's answer on the session's pending approval of callID and returns the
// approval as approval_resolved will show it. The caller has checked that the session is by's.
// No such call is ECNotFound, one already decided ECConflict, edited arguments that break the
// tool's schema ECInvalid (the call stays pending).
func (s *Service) Decide(ctx context.Context, by, sessionID, callID string, a Answer) (*parley.Approval, error) {
	if err := a.Check(); err != nil {
		return nil, err
	}
	rec, err := s.Store.GetApproval(ctx, sessionID, callID)
	if err != nil {
		if parley.CodeOf(err) == parley.ECNotFound {
			return nil, parley.Errorf(parley.ECNotFound, "no tool call %q waits for approval in this session", callID)
		}
		return nil, err
	}
	if rec.State != parley.ApprovalPending {
		return nil, parley.Errorf(parley.ECConflict, "this tool call was already decided: %s", rec.State)
	}
	d := parley.ApprovalDecision{State: parley.ApprovalApproved, Always: a.Decision == DecisionAlways, DecidedBy: by, At: s.now()}
	if a.Decision == DecisionDeny {
		d.State, d.Answer = parley.ApprovalDenied, a.Reason
	}
	if len(a.Arguments) > 0 && string(a.Arguments) != "null" {
		var b bytes.Buffer
		if err := json.Compact(&b, a.Arguments); err != nil {
			return nil, parley.Errorf(parley.ECInvalid, "arguments: not valid JSON")
		}
		if s.CheckArgs != nil {
			if err := s.CheckArgs(rec.Tool, b.Bytes()); err != nil {
				return nil, parley.Errorf(parley.ECInvalid, "arguments: %s", parley.MessageOf(err))
			}
		}
		var orig bytes.Buffer
		if json.Compact(&orig, []byte(rec.Arguments)) != nil || orig.String() != b.String() {
			d.RunArguments, d.Edited = b.String(), true
		}
	}
	got, err := s.Store.DecideApproval(ctx, sessionID, callID, d)
	if err != nil {
		return nil, err
	}
	if d.Always {
		// The tool is allowed for the rest of the session: its other calls waiting now are too.
		pending, err := s.Store.ListApprovals(ctx, sessionID, true)
		if err != nil {
			return nil, err
		}
		for _, p := range pending {
			if p.Tool != rec.Tool {
				continue
			}
			_, err := s.Store.DecideApproval(ctx, sessionID, p.CallID, parley.ApprovalDecision{State: parley.ApprovalApproved,
				Answer: "allowed for the rest of this session", DecidedBy: by, At: d.At})
			if err != nil && parley.CodeOf(err) != parley.ECConflict {
				return nil, err
			}
		}
	}
	if s.Notify != nil {
		s.Notify(ctx, sessionID)
	}
	return got.Resolved(), nil
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}
