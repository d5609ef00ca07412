package runs

import (
	"context"
	"errors"

	parley "github.com/parleyhq/parley"
)

// The control actions a client may send a run.
const (
	ActionAbort  = "abort"
	ActionPause  = "pause"
	ActionResume = "resume"
)

// ErrNoRun is returned by Control when the session has no active run on any instance.
var ErrNoRun = parley.Errorf(parley.ECConflict, "no run is active in this session")

// Control applies action (abort, pause or resume) to the session's active run, on this instance
// or, through Options.SendControl, on the instance that runs it. It returns the run's id and its
// state after the action: "aborting", "paused" or "running".
func (m *Manager) Control(ctx context.Context, sessionID, action string) (runID, state string, err error) {
	if action != ActionAbort && action != ActionPause && action != ActionResume && action != ActionApproval {
		return "", "", parley.Errorf(parley.ECInvalid, "action: must be abort, pause or resume")
	}
	if r, ok := m.Active(sessionID); ok {
		state, err := r.control(action)
		return r.ID, state, err
	}
	if m.opts.Runs == nil || m.opts.SendControl == nil {
		return "", "", ErrNoRun
	}
	rec, err := m.ActiveRecord(ctx, sessionID)
	if err != nil {
		return "", "", err
	}
	if rec == nil || rec.Instance == m.opts.Instance { // ended meanwhile, or being taken over here
		return "", "", ErrNoRun
	}
	state, err = m.opts.SendControl(ctx, rec.Instance, sessionID, rec.ID, action)
	return rec.ID, state, err
}

// ControlLocal applies action to run runID of the session, which this instance runs: the other end
// of Options.SendControl. It returns the run's state after the action.
func (m *Manager) ControlLocal(sessionID, runID, action string) (string, error) {
	r, ok := m.Active(sessionID)
	if !ok || r.ID != runID {
		return "", ErrNoRun
	}
	return r.control(action)
}

// ActiveRecord returns the durable record of the session's running run, whichever instance runs
// it, or nil when there is none (or without Options.Runs).
func (m *Manager) ActiveRecord(ctx context.Context, sessionID string) (*parley.RunRecord, error) {
	if m.opts.Runs == nil {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	rec, err := m.opts.Runs.ActiveRun(rctx, sessionID)
	if errors.Is(err, parley.ErrNotFound) {
		return nil, nil
	}
	return rec, err
}

func (r *Run) control(action string) (string, error) {
	var err error
	switch action {
	case ActionAbort:
		r.Abort()
		return "aborting", nil
	case ActionPause:
		err = r.Pause()
	case ActionResume:
		err = r.Resume()
	case ActionApproval:
		r.wakeUp()
		if r.Awaiting() {
			return parley.RunAwaitingApproval, nil
		}
	default:
		return "", parley.Errorf(parley.ECInvalid, "action: must be abort, pause or resume")
	}
	if err != nil {
		return "", err
	}
	if r.Paused() {
		return parley.RunPaused, nil
	}
	return parley.RunResumed, nil
}
