package runs

import (
	"context"
	"time"

	parley "github.com/parleyhq/parley"
)

// ActionApproval tells the run that a decision on one of its approvals was stored: it reads the
// store again at once instead of at its next poll (issue 23). Sent to any instance through
// Control, it reaches the one running the run.
const ActionApproval = "approval"

// DefaultApprovalPoll is how often a run waiting for approval reads the store when nobody tells it
// a decision came (Options.ApprovalPoll).
const DefaultApprovalPoll = 2 * time.Second

// AwaitApproval holds the run while it waits for a person's decision on its tool calls, the way a
// pause holds it: the run's own goroutine waits here, and nothing else is started for it. It
// announces status awaiting_approval, then calls check at once, whenever a decision is signalled
// (ActionApproval), every Options.ApprovalPoll (decisions stored by an instance that could not
// signal this one) and at until (when the calls expire); check reads the store and reports whether
// the wait is over. Then it announces status running and returns nil; it returns ctx's error when
// the run is aborted meanwhile, and check's error when the store failed three times in a row.
func (r *Run) AwaitApproval(ctx context.Context, until time.Time, check func(context.Context) (bool, error)) error {
	r.emit(parley.Event{Type: parley.EventStatus, State: parley.RunAwaitingApproval})
	r.mu.Lock()
	r.awaiting = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.awaiting = false
		r.mu.Unlock()
	}()
	poll := r.m.opts.ApprovalPoll
	failures := 0
	for {
		over, err := check(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err != nil:
			failures++
			if failures >= 3 {
				return err
			}
			r.logger.Warn("could not read the run's approvals", "err", err)
		case over:
			r.emit(parley.Event{Type: parley.EventStatus, State: parley.RunResumed})
			return nil
		default:
			failures = 0
		}
		wait := poll
		if left := until.Sub(r.m.opts.Now()); left < wait {
			wait = max(left, time.Millisecond) // past until, check expires what is left
		}
		t := time.NewTimer(wait)
		select {
		case <-r.wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// Awaiting reports whether the run waits for approval.
func (r *Run) Awaiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.awaiting
}

// wakeUp tells a run waiting for approval to read the store again.
func (r *Run) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default: // a signal is already waiting
	}
}

// NotifyApproval tells the session's run, on whichever instance runs it, that a decision on one
// of its approvals was stored. Best effort: a run not told reads the store at its next poll.
func (m *Manager) NotifyApproval(ctx context.Context, sessionID string) {
	if r, ok := m.Active(sessionID); ok {
		r.wakeUp()
		return
	}
	if _, _, err := m.Control(ctx, sessionID, ActionApproval); err != nil && err != ErrNoRun {
		m.opts.Log.Warn("could not tell the run of an approval", "session_id", sessionID, "err", err)
	}
}
