package parley

import (
	"context"
	"time"
)

// The policies of a tool (issue 23): whether a call of it runs at once, waits for a person's
// approval, or is refused.
const (
	PolicyAuto = "auto" // the call runs
	PolicyAsk  = "ask"  // the call waits for the session owner's approval
	PolicyDeny = "deny" // the call is refused; the model is told so
)

// The states of an approval, and the decisions of an approval_resolved event.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired" // nobody answered before its expiry: the call was denied
)

// Approval is the payload of the approval_required and approval_resolved events, and of the
// approvals routes. Arguments is, in approval_required, the string the model sent; in
// approval_resolved, what runs (edited or not). Reason is, in approval_required, why the call
// needs approval; in approval_resolved, the user's reason for a denial or why the call expired.
type Approval struct {
	CallID    string     `json:"call_id"`
	Tool      string     `json:"tool"`
	Server    string     `json:"server,omitempty"`
	Arguments string     `json:"arguments"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Decision  string     `json:"decision,omitempty"` // approval_resolved: approved, denied or expired
	Edited    bool       `json:"edited"`
	Always    bool       `json:"always,omitempty"` // the tool is now allowed for the rest of the session
}

// ApprovalRecord is a stored approval: a tool call of a run that waits for, or got, a decision.
// It keeps both what the model asked for (Arguments) and what ran (RunArguments).
type ApprovalRecord struct {
	SessionID string
	CallID    string
	RunID     string
	Tool      string
	Server    string
	Arguments string // as the model sent them
	Why       string // why the call needs approval
	State     string // ApprovalPending, ApprovalApproved, ApprovalDenied or ApprovalExpired
	// RunArguments are the arguments the call runs with: Arguments, or the user's edit.
	RunArguments string
	Edited       bool
	Always       bool   // approved with "always allow this tool in this session"
	Answer       string // the user's reason for a denial, or why the call expired
	DecidedBy    string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	DecidedAt    time.Time
}

// Required is the record as an approval_required event shows it.
func (r *ApprovalRecord) Required() *Approval {
	exp := r.ExpiresAt.UTC()
	return &Approval{CallID: r.CallID, Tool: r.Tool, Server: r.Server, Arguments: r.Arguments, Reason: r.Why, ExpiresAt: &exp}
}

// Resolved is the decided record as an approval_resolved event shows it.
func (r *ApprovalRecord) Resolved() *Approval {
	args := r.RunArguments
	if args == "" {
		args = r.Arguments
	}
	return &Approval{CallID: r.CallID, Tool: r.Tool, Server: r.Server, Arguments: args, Reason: r.Answer,
		Decision: r.State, Edited: r.Edited, Always: r.Always}
}

// ApprovalDecision is a decision on a pending approval.
type ApprovalDecision struct {
	State        string // ApprovalApproved, ApprovalDenied or ApprovalExpired
	RunArguments string // approved: the arguments to run with ("" runs the model's)
	Edited       bool
	Always       bool
	Answer       string
	DecidedBy    string
	At           time.Time
}

// ApprovalStore keeps the approvals of tool calls, so that a call waiting for a person outlives
// the process running its run, and a decision given on any instance reaches the run.
type ApprovalStore interface {
	// CreateApproval stores r as pending, unless the session already has an approval of r.CallID:
	// then it returns that one (a run taken over finds the approval its first process stored).
	CreateApproval(ctx context.Context, r *ApprovalRecord) (*ApprovalRecord, error)
	// GetApproval returns the session's approval of callID, or ErrNotFound.
	GetApproval(ctx context.Context, sessionID, callID string) (*ApprovalRecord, error)
	// ListApprovals returns the session's approvals in the order they were created; pendingOnly
	// leaves out the decided ones.
	ListApprovals(ctx context.Context, sessionID string, pendingOnly bool) ([]ApprovalRecord, error)
	// DecideApproval records d on the session's pending approval of callID and returns the
	// decided record: ErrNotFound when there is none, ECConflict when it was already decided.
	DecideApproval(ctx context.Context, sessionID, callID string, d ApprovalDecision) (*ApprovalRecord, error)
	// AlwaysAllowed returns the tools the session's owner allowed for the rest of the session.
	AlwaysAllowed(ctx context.Context, sessionID string) ([]string, error)
	// DeleteDecidedApprovalsBefore deletes the approvals decided (approved, denied or expired)
	// before t and the pending ones that expired before t, and returns how many. It keeps the
	// approvals that allowed a tool "always": they are the session's allowance (AlwaysAllowed).
	DeleteDecidedApprovalsBefore(ctx context.Context, t time.Time) (int64, error)
}
