package agent

import (
	"context"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
)

// InterruptedText answers a tool call that was under way when the process running it died, and
// that may not run twice.
const InterruptedText = "error: interrupted: the server running this tool call stopped before it finished; " +
	"it may or may not have taken effect, so check before trying again"

// Resume goes on with a run that its process left when it died (a crash or a kill), from the last
// step the store holds: the checkpoints are the stored messages, and the ledger of tool calls.
//
// It first settles the tool calls of the last model response that have no result: a call the
// ledger never saw start runs now; one that started and never finished runs again only when its
// tool is rerun-safe (tools.RerunSafe), and is otherwise answered with InterruptedText; a call the
// ledger has done has its result stored and never runs again. Then the loop goes on: the model is
// called with the history as stored. A run whose last stored message is already its answer ends
// at once with FinishStop, one whose last stored message is its own failed turn ends with that
// error, and a retry that stored nothing yet starts over.
func (a *Agent) Resume(ctx context.Context, in Input, emit func(parley.Event)) (*Result, error) {
	t, err := a.prepare(&in, emit)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	h, err := a.cfg.Store.History(ctx, in.SessionID)
	if err != nil {
		return res, a.canceledOr(ctx, err)
	}
	if n := len(h); n > 0 && h[n-1].Role == parley.RoleAssistant && len(h[n-1].ToolCalls) == 0 {
		switch last := h[n-1]; {
		case !last.Failed():
			// The answer was stored; its record may not have reached the event log before the
			// process died. Sent again (the same message id), it replaces the streamed chunks.
			if last.RunID == in.RunID {
				res.Final = &last
				t.emit(parley.Event{Type: parley.EventRecord, Message: &last})
			}
			res.FinishReason = parley.FinishStop
			return res, nil
		case last.RunID == in.RunID && last.Error != parley.ECCanceled:
			// This run's model call failed and the failure was stored: it ended then. (A call
			// this run stopped is no end: an instance that lost the run's lease stops it so, and
			// the run goes on here.)
			res.Final = &last
			return res, parley.Errorf(last.Error, "the model call failed")
		}
		// Another run's failed turn: this run is its retry, and goes on.
	}
	open := openCalls(h)
	if len(open) == 0 {
		return a.loop(ctx, &in, t, res)
	}
	ids := make([]string, len(open))
	for i, c := range open {
		ids[i] = c.ID
	}
	states, err := a.cfg.Store.ToolCallStates(ctx, in.SessionID, ids)
	if err != nil {
		return res, a.canceledOr(ctx, err)
	}
	var again []parley.ToolCall
	for _, c := range open {
		switch st := states[c.ID]; {
		case st == "": // never started
			again = append(again, c)
		case st == parley.ToolCallStarted && a.cfg.Tools.RerunSafe(c.Function.Name):
			again = append(again, c)
		default: // in doubt and not safe to repeat (or done with its result lost: never run twice)
			msg := failedResult(c, InterruptedText, in.RunID, a.now())
			if err := a.store(ctx, in.SessionID, msg); err != nil {
				return res, err
			}
			t.emit(parley.Event{Type: parley.EventToolResult, Message: msg})
		}
	}
	if len(again) > 0 {
		if err := in.gate(ctx); err != nil {
			a.closeCalls(ctx, in, again, t.emit)
			return res, a.canceledOr(ctx, err)
		}
		verdicts, err := a.approve(ctx, in, t, again, len(again))
		if err != nil {
			if !handedOver(ctx) {
				a.closeCalls(ctx, in, again, t.emit)
			}
			return res, err
		}
		if err := a.runTools(ctx, in, again, len(again), t.allowedNames(), verdicts, t.emit); err != nil {
			return res, err
		}
		if ctx.Err() != nil {
			return res, canceled()
		}
	}
	return a.loop(ctx, &in, t, res)
}

// Interrupt closes a run that will not go on: each tool call of its last model response that has
// no result is answered with InterruptedText, so that the history stays a valid chat history.
// Nothing runs. It returns the tool messages it stored.
func (a *Agent) Interrupt(ctx context.Context, in Input) ([]*parley.Message, error) {
	h, err := a.cfg.Store.ModelHistory(ctx, in.SessionID)
	if err != nil {
		return nil, err
	}
	var msgs []*parley.Message
	for _, c := range openCalls(h) {
		msgs = append(msgs, failedResult(c, InterruptedText, in.RunID, a.now()))
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := a.cfg.Store.AppendMessages(wctx, in.SessionID, msgs...); err != nil {
		return nil, err
	}
	return msgs, nil
}

// failedResult is the unsuccessful tool message that answers call with text.
func failedResult(call parley.ToolCall, text, runID string, at time.Time) *parley.Message {
	ok := false
	return &parley.Message{
		ID: parley.NewID(), Role: parley.RoleTool, Content: parley.Text(text),
		Name: call.Function.Name, ToolCallID: call.ID, RunID: runID, Success: &ok, CreatedAt: at,
	}
}

// openCalls returns the tool calls of the history's last assistant message with calls that no tool
// message answers, when only tool messages follow it (history is append-only: anything else after
// it means the calls were left behind, and llmctx fills their gap).
func openCalls(h []parley.Message) []parley.ToolCall {
	last := -1
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Role == parley.RoleAssistant && len(h[i].ToolCalls) > 0 {
			last = i
			break
		}
		if h[i].Role != parley.RoleTool {
			return nil
		}
	}
	if last < 0 {
		return nil
	}
	answered := map[string]bool{}
	for _, m := range h[last+1:] {
		answered[m.ToolCallID] = true
	}
	var open []parley.ToolCall
	for _, c := range h[last].ToolCalls {
		if !answered[c.ID] {
			open = append(open, c)
		}
	}
	return open
}

// closeSession answers the session's open calls with MissingResult (CloseInterruptedCalls).
func closeSession(ctx context.Context, st parley.Store, sessionID string, now func() time.Time) (int, error) {
	h, err := st.ModelHistory(ctx, sessionID)
	if err != nil {
		return 0, err
	}
	var msgs []*parley.Message
	at := now().UTC().Truncate(time.Microsecond)
	for _, c := range openCalls(h) {
		msgs = append(msgs, failedResult(c, llmctx.MissingResult, "", at))
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := st.AppendMessages(ctx, sessionID, msgs...); err != nil {
		return 0, err
	}
	return len(msgs), nil
}
