package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	parley "github.com/parleyhq/parley"
)

// DefaultApprovalTimeout is how long a tool call waits for a person's decision before it is
// denied, when Config.ApprovalTimeout is 0.
const DefaultApprovalTimeout = 10 * time.Minute

// verdict is what the approval policy made of one call: run it (with args, when a person edited
// them), or answer it with refusal and not run it.
type verdict struct {
	refusal string // the tool result's text when the call does not run
	args    string // the arguments to run with, when edited
	edited  bool
}

// The texts the model reads when a call does not run for want of approval.
func policyRefusal(tool, why string) string {
	return fmt.Sprintf("error: not run: the tool policy does not allow %s (%s); do not call it again, answer with what you have", tool, why)
}

func deniedText(tool, reason string) string {
	if reason == "" {
		return fmt.Sprintf("error: not run: the user denied this call of %s", tool)
	}
	return fmt.Sprintf("error: not run: the user denied this call of %s, saying: %s", tool, reason)
}

func expiredText(tool string, d time.Duration) string {
	return fmt.Sprintf("error: not run: this call of %s needed the user's approval and nobody answered within %s, so it was denied", tool, d)
}

const cannotAskText = "error: not run: %s needs a person's approval, which cannot be asked for in this request"

// stoppedAnswer is the reason stored on an approval whose run stopped before anyone answered.
const stoppedAnswer = "the run was stopped before anyone answered"

// approve applies the approval policy to the first budget of calls (the ones that would run): a
// call the policy denies gets its refusal; a call that asks is stored as a pending approval (or
// found stored, by a run taken over), announced with approval_required, and waited for with
// in.AwaitApproval until every one is decided or expired. It returns the verdicts by call id (a
// call without one runs as the model asked). An error means the run ends: ctx was cancelled
// (the pending approvals are then denied as stopped) or the store failed.
func (a *Agent) approve(ctx context.Context, in Input, t *turn, calls []parley.ToolCall, budget int) (map[string]verdict, error) {
	if a.cfg.Approvals == nil || budget == 0 {
		return nil, nil
	}
	sess := a.cfg.Approvals.NoSession()
	if !a.sessionless {
		var err error
		if sess, err = a.cfg.Approvals.Session(ctx, in.SessionID); err != nil {
			return nil, a.canceledOr(ctx, err)
		}
	}
	out := map[string]verdict{}
	var waiting []*parley.ApprovalRecord
	for _, c := range calls[:budget] {
		name := c.Function.Name
		if !t.allowedNames()[name] {
			continue // refused by the registry as not offered
		}
		mode, why := sess.Mode(name)
		switch mode {
		case parley.PolicyDeny:
			out[c.ID] = verdict{refusal: policyRefusal(name, why)}
			continue
		case parley.PolicyAsk:
		default:
			continue
		}
		if a.sessionless || !in.canAwaitApproval() {
			out[c.ID] = verdict{refusal: fmt.Sprintf(cannotAskText, name)}
			continue
		}
		now := a.now()
		rec, err := a.cfg.Store.CreateApproval(ctx, &parley.ApprovalRecord{
			SessionID: in.SessionID, CallID: c.ID, RunID: in.RunID, Tool: name, Server: a.cfg.Tools.Server(name),
			Arguments: c.Function.Arguments, Why: "needs approval: " + why, CreatedAt: now, ExpiresAt: now.Add(a.approvalTimeout()),
		})
		if err != nil {
			return nil, a.canceledOr(ctx, err)
		}
		if rec.State != parley.ApprovalPending {
			// Decided while this run's process died: announced again, applied now.
			t.emit(parley.Event{Type: parley.EventApprovalResolved, Approval: rec.Resolved()})
			out[c.ID] = a.verdictOf(rec)
			continue
		}
		// A run taken over finds the approval its first process stored: the request goes out
		// again only when the stream does not hold it (it was lost with that process).
		if !rec.CreatedAt.Before(now.Truncate(time.Microsecond)) || !a.announced(ctx, in.SessionID, rec.CallID) {
			t.emit(parley.Event{Type: parley.EventApprovalRequired, Approval: rec.Required()})
		}
		waiting = append(waiting, rec)
	}
	if len(waiting) == 0 {
		return out, nil
	}
	until := waiting[0].ExpiresAt
	for _, w := range waiting[1:] {
		if w.ExpiresAt.After(until) {
			until = w.ExpiresAt
		}
	}
	check := func(ctx context.Context) (bool, error) {
		left := waiting[:0]
		for _, w := range waiting {
			rec, err := a.cfg.Store.GetApproval(ctx, in.SessionID, w.CallID)
			if err != nil {
				return false, err
			}
			if rec.State == parley.ApprovalPending && !a.now().Before(rec.ExpiresAt) {
				rec, err = a.decide(ctx, in.SessionID, rec, parley.ApprovalDecision{State: parley.ApprovalExpired,
					Answer: fmt.Sprintf("nobody answered within %s", a.approvalTimeout()), At: a.now()})
				if err != nil {
					return false, err
				}
			}
			if rec.State == parley.ApprovalPending {
				left = append(left, w)
				continue
			}
			t.emit(parley.Event{Type: parley.EventApprovalResolved, Approval: rec.Resolved()})
			out[rec.CallID] = a.verdictOf(rec)
		}
		waiting = left
		return len(waiting) == 0, nil
	}
	if err := in.awaitApproval(ctx, until, check); err != nil {
		if ctx.Err() != nil && !handedOver(ctx) {
			// Nobody can answer these any more: they are closed, and every client is told.
			for _, w := range waiting {
				rec, err := a.decide(context.WithoutCancel(ctx), in.SessionID, w, parley.ApprovalDecision{State: parley.ApprovalDenied, Answer: stoppedAnswer, At: a.now()})
				if err == nil {
					t.emit(parley.Event{Type: parley.EventApprovalResolved, Approval: rec.Resolved()})
				}
			}
		}
		return nil, a.canceledOr(ctx, err)
	}
	return out, nil
}

// announcedScan bounds the events announced reads: a run whose stored events are more than this
// is announced again (a request twice is better than one lost).
const announcedScan = 16 << 10

// announced reports whether the session's stored stream holds, since its running run's first
// event, the approval_required of callID: a run taken over then does not send it again. Any
// failure to tell is false.
func (a *Agent) announced(ctx context.Context, sessionID, callID string) bool {
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	run, err := a.cfg.Store.ActiveRun(rctx, sessionID)
	if err != nil {
		return false
	}
	const page = 256
	after := run.FirstSeq - 1
	for read := 0; read < announcedScan; read += page {
		evs, err := a.cfg.Store.ListEvents(rctx, sessionID, after, page)
		if err != nil {
			return false
		}
		for _, ev := range evs {
			if ev.Type == parley.EventApprovalRequired && ev.Approval != nil && ev.Approval.CallID == callID {
				return true
			}
		}
		if len(evs) < page {
			return false
		}
		after = evs[len(evs)-1].Seq
	}
	return false
}

// handedOver reports whether the run stops to be taken over (parley.ErrHandedOver): it then
// stores nothing more, its calls left open for the instance that goes on with it.
func handedOver(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), parley.ErrHandedOver)
}

// decide records d on rec unless it was decided meanwhile, and returns the record as stored.
func (a *Agent) decide(ctx context.Context, sessionID string, rec *parley.ApprovalRecord, d parley.ApprovalDecision) (*parley.ApprovalRecord, error) {
	wctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	got, err := a.cfg.Store.DecideApproval(wctx, sessionID, rec.CallID, d)
	if parley.CodeOf(err) == parley.ECConflict { // a person answered first: theirs stands
		return a.cfg.Store.GetApproval(wctx, sessionID, rec.CallID)
	}
	return got, err
}

func (a *Agent) verdictOf(rec *parley.ApprovalRecord) verdict {
	switch rec.State {
	case parley.ApprovalApproved:
		if rec.Edited && rec.RunArguments != "" {
			return verdict{args: rec.RunArguments, edited: true}
		}
		return verdict{}
	case parley.ApprovalExpired:
		return verdict{refusal: expiredText(rec.Tool, a.approvalTimeout())}
	default:
		return verdict{refusal: deniedText(rec.Tool, rec.Answer)}
	}
}

func (a *Agent) approvalTimeout() time.Duration {
	if a.cfg.ApprovalTimeout > 0 {
		return a.cfg.ApprovalTimeout
	}
	return DefaultApprovalTimeout
}

// editedNote is put before the result of a call that ran with arguments a person edited, so
// that the model knows what ran: its own call stays in the history as it asked for it.
func editedNote(args string) string {
	return "note: the user edited the arguments of this call before approving it; it ran with " + args + "\n\n"
}

// prepend puts text before c: as text before text, or as a first text part.
func prepend(c parley.Content, text string) parley.Content {
	if c.IsParts() {
		return parley.Parts(append([]parley.Part{{Type: "text", Text: text}}, c.Parts()...)...)
	}
	if c.IsNull() {
		return parley.Text(text)
	}
	return parley.Text(text + c.String())
}
