package parley

import (
	"context"
	"errors"
	"time"
)

// ErrHandedOver is the cause of a run's context when its process stops without ending the run:
// at a graceful shutdown, a run waiting for a person's approval is left running in its record,
// its calls unanswered, and the instance that takes it over (this one restarted, or another)
// waits on (issue 23). A run body that sees it stores nothing more.
var ErrHandedOver = errors.New("the run is left to the instance that takes it over")

// The states of a durable run record.
const (
	RunStateRunning = "running" // an instance runs it, and renews its lease while it does
	RunStateEnded   = "ended"   // it ended; Finish tells how
)

// The states of a tool call in the ledger.
const (
	ToolCallStarted = "started" // written before the tool runs: a crash now leaves the call in doubt
	ToolCallDone    = "done"    // written after its result message is stored: it never runs again
)

// RunRecord is the durable record of a run: who owns it, where it runs, and enough of its request
// for another process to take it over when the process running it dies.
type RunRecord struct {
	ID            string
	SessionID     string
	Owner         string
	Model         string
	SelectedTools []string // nil offers every tool
	State         string   // RunStateRunning or RunStateEnded
	Finish        string   // how an ended run finished (a Finish* reason)
	Instance      string   // the instance that runs (or ran) it
	FirstSeq      int64    // the sequence number of its first event
	LeaseUntil    time.Time
	Attempts      int // how many times the run was taken over
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// RunStore keeps run records and the tool-call ledger, so that a run outlives the process that
// started it: an instance holds a lease on each run it runs and renews it; when the lease ends (the
// process died), another instance, or the same one restarted, takes the run over.
type RunStore interface {
	// CreateRun stores r as running. It fails with ECConflict when the session already has a
	// running run: one run per session, across every instance sharing the store.
	CreateRun(ctx context.Context, r *RunRecord) error
	// RenewRuns extends to until the lease of those of ids that instance runs, and returns the ids
	// it renewed: a missing one has ended or was taken over by another instance.
	RenewRuns(ctx context.Context, instance string, ids []string, until time.Time) ([]string, error)
	// EndRun marks the run ended with finish, if instance still runs it (otherwise ECConflict).
	EndRun(ctx context.Context, id, instance, finish string, at time.Time) error
	// DeleteRun deletes a run that was begun but never started.
	DeleteRun(ctx context.Context, id string) error
	// ClaimRuns takes over up to limit running runs whose lease ended before now, and every running
	// run of instance orphanedBy created or last claimed before now, whatever its lease ("" for
	// none: an instance that restarts under its old name owns nothing that runs). Each gets
	// instance, lease until, one more attempt, and now as its UpdatedAt.
	//
	// So a run claimed with a given now is not claimed again by a later call with the same now: a
	// restarted instance pages through its orphans with the moment it started as now, each once,
	// and never takes back a run it began or took over since.
	ClaimRuns(ctx context.Context, instance, orphanedBy string, now, until time.Time, limit int) ([]RunRecord, error)
	// ActiveRun returns the session's running run, or ErrNotFound.
	ActiveRun(ctx context.Context, sessionID string) (*RunRecord, error)
	// DeleteEndedRunsBefore deletes run records that ended before t and the ledger entries of
	// calls last touched before t that no running run owns.
	DeleteEndedRunsBefore(ctx context.Context, t time.Time) (int64, error)

	// MarkToolCall records state (ToolCallStarted or ToolCallDone) for the session's call. A call
	// marked done stays done.
	MarkToolCall(ctx context.Context, sessionID, runID, callID, name, state string, at time.Time) error
	// ToolCallStates returns the recorded state of each of callIDs that has one.
	ToolCallStates(ctx context.Context, sessionID string, callIDs []string) (map[string]string, error)
}

// RunBeginner is a store that writes what begins and what ends a run each in one transaction,
// so that a chat waits for one durable write before its model call and one after it, instead of
// one per record. Both stores of this repository implement it; runs.Manager uses it when its
// Runs store does.
type RunBeginner interface {
	// BeginRun stores b in one transaction and returns the first of the event numbers it
	// reserved; on error nothing of b is stored.
	BeginRun(ctx context.Context, b *RunBegin) (first int64, err error)
	// FinishRun stores what ends a run in one transaction, in this order: the run's last
	// messages (AppendMessages), its events not stored yet (AppendEvents; an event already
	// stored is skipped), the event numbers after last when
	// limit is still the last one reserved (ReleaseEventSeqs), and the run's end (EndRun). It
	// returns EndRun's ECConflict when the instance no longer runs the run; the messages, the
	// events and the numbers are stored all the same. On any other error nothing of f is stored.
	FinishRun(ctx context.Context, f RunFinish) error
}

// RunBegin is what begins a run, written in this order.
type RunBegin struct {
	// NewSession, if set, is created first (CreateSession); otherwise the session must exist.
	NewSession *Session
	SessionID  string
	// Leaf, if set, becomes the session's active leaf first, as SetLeaf makes it (so that the
	// run's answer, or Messages with no parent, follow it). A message not of the session fails
	// the write with ErrNotFound, and nothing of b is stored. Not with NewSession.
	Leaf string
	// Reserve is how many event numbers of the session to reserve (ReserveEventSeqs, > 0).
	Reserve int64
	// Run, if set, is stored running (CreateRun) with FirstSeq the first number reserved.
	Run *RunRecord
	// Messages are appended last (AppendMessages); each gets its Seq and SessionID.
	Messages []*Message
}

// RunFinish is what ends a run: FinishRun's arguments.
type RunFinish struct {
	SessionID string
	// Messages are appended first; once FinishRun returned, each has its Seq, SessionID and
	// ParentID, as AppendMessages gives them.
	Messages []*Message
	// Events are stored next (their Seqs consecutive and increasing). An event's JSON is stored
	// as it is; one without JSON is encoded from its Event after Messages are numbered (so that
	// a record event carrying one of Messages shows its seq), and FinishRun sets its JSON.
	Events      []EncodedEvent
	Limit, Last int64 // ReleaseEventSeqs
	RunID       string
	Instance    string
	Finish      string
	At          time.Time
}
