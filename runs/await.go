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
	if r.m.closingDown() {
		// Shutdown may have looked for waiting runs before this one was: hand it over now.
		r.handOver()
	}
	// Once the wait is over the run is no longer handed over (handOver looks under r.mu): it
	// either ends waiting here, or goes on.
	stop := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.awaiting = false
		return ctx.Err() == nil
	}
	poll := r.m.opts.ApprovalPoll
	failures := 0
	for {
		over, err := check(ctx)
		if ctx.Err() != nil {
			stop()
			return ctx.Err()
		}
		switch {
		case err != nil:
			failures++
			if failures >= 3 {
				stop()
				return err
			}
			r.log().Warn("could not read the run's approvals", "err", err)
		case over:
			if !stop() {
				return ctx.Err()
			}
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

// handOverAwaiting stops, without ending them, the runs that wait for approval: a person may take
// minutes, a shutdown should not. Each stays running in its record, and the instance that takes
// it over (this one restarted under its name, at once; another, when the lease ends) waits on.
// Without Options.Runs nothing takes a run over: they are left to the shutdown's grace.
func (m *Manager) handOverAwaiting() {
	if m.opts.Runs == nil {
		return
	}
	m.mu.Lock()
	rs := make([]*Run, 0, len(m.active))
	for _, r := range m.active {
		rs = append(rs, r)
	}
	m.mu.Unlock()
	for _, r := range rs {
		r.handOver()
	}
}

// handOver stops the run, without ending it, if it waits for approval.
func (r *Run) handOver() {
	if r.m.opts.Runs == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.awaiting {
		r.cancelCause(parley.ErrHandedOver)
	}
}

// closingDown reports whether the manager shuts down.
func (m *Manager) closingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closing
}

// leave ends a run handed over (parley.ErrHandedOver) here without ending it in its record: its
// log is closed (what it emitted is stored), the session is free on this instance, and no done
// event, no end of the record, no release of its event numbers (the run that takes it over
// numbers its events after them).
func (r *Run) leave() {
	r.mu.Lock()
	r.finish, r.endedAt = "", r.m.opts.Now()
	r.mu.Unlock()
	r.emitMu.Lock()
	r.ended = true
	r.emitMu.Unlock()
	r.w.Close() // what it emitted is stored; its numbers are not given back
	if r.m.opts.Events != nil {
		r.w.Drop()
	}
	r.m.mu.Lock()
	if r.m.active[r.SessionID] == r {
		delete(r.m.active, r.SessionID)
	}
	r.m.finished = append(r.m.finished, r)
	r.m.mu.Unlock()
	close(r.done)
}

// stopTakenOver stops a run that another instance took over: one waiting for approval is handed
// over (its approvals stay pending for the new owner), any other aborted.
func (r *Run) stopTakenOver() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.awaiting {
		r.cancelCause(parley.ErrHandedOver)
		return
	}
	r.cancelCause(nil)
}
