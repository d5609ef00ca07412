package parley

import (
	"context"
	"time"
)

// ParentRoot, as the ParentID of a message given to Store.AppendMessages, stores the message
// with no parent: a new first message of the session (the edit of a session's first question).
// A stored message never carries it: its ParentID is "" then.
const ParentRoot = "root"

// TreeNode is one message of a session's tree, compact: what a client needs to draw the
// branches ("2 / 3") without reading the messages.
type TreeNode struct {
	ID        string    `json:"id"`
	ParentID  string    `json:"parent_id"` // "" for a first message
	Role      Role      `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// BranchTip names the last message of a branch: its id and seq ("" and 0 for an empty session).
type BranchTip struct {
	ID  string
	Seq int64
}

// BranchStore keeps a session's messages as a tree: each message has a parent (Message.ParentID,
// "" for a first message), and the session an active leaf (Session.LeafID). A branch is the path
// from a first message to a leaf; its messages' seqs grow along it, so a branch read in seq order
// is in conversation order. AppendMessages links each new message to its ParentID, or, when that
// is "", to the message before it in the call (the first one to the active leaf), and makes the
// last message appended the active leaf. History, ModelHistory and ListMessages read the active
// branch.
type BranchStore interface {
	// ListBranch returns the messages of the branch that ends at leaf ("": the active leaf) with
	// Seq > afterSeq, in order, at most limit of them (<= 0: all), and the tip of that branch. A
	// leaf that is no message of the session gives ErrNotFound; an unknown session an empty list.
	ListBranch(ctx context.Context, sessionID, leaf string, afterSeq int64, limit int) ([]Message, BranchTip, error)
	// ModelBranch is ModelHistory for the branch that ends at leaf ("": the active leaf), with
	// the tip of that branch.
	ModelBranch(ctx context.Context, sessionID, leaf string) ([]Message, BranchTip, error)
	// Tree returns the session's active leaf and every message of every branch, compact, in
	// storage (seq) order. An unknown session gives ErrNotFound.
	Tree(ctx context.Context, sessionID string) (leaf string, nodes []TreeNode, err error)
	// SwitchBranch makes the most recently stored message of messageID's subtree (a leaf) the
	// active leaf and returns it. A message not of the session gives ErrNotFound; a run running
	// in the session (RunStore) ECConflict.
	SwitchBranch(ctx context.Context, sessionID, messageID string) (string, error)
	// SetLeaf makes messageID itself the active leaf, leaf or not: the next message appended
	// follows it (a regenerated answer becomes a sibling of the old one). A message not of the
	// session gives ErrNotFound.
	SetLeaf(ctx context.Context, sessionID, messageID string) error
	// Fork creates the session into (ID, Owner, Title, ProjectID, CreatedAt and UpdatedAt set)
	// holding a copy of the branch of sessionID that ends at messageID: new message ids, the same
	// content and metadata, seqs 1..n, the copy of messageID its active leaf. Its usage totals
	// start at zero (the copied messages' tokens were spent, and counted, in sessionID), though
	// each copy keeps its Usage. It returns the copies, in order.
	Fork(ctx context.Context, sessionID, messageID string, into *Session) ([]Message, error)
}
