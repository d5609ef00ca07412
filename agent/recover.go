package agent

import (
	"context"
	"fmt"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
)

// CloseInterruptedCalls answers, with an error tool message, every assistant tool call that a
// stopped run (a crash or a kill) left without a result, so that each stored history is again a
// valid OpenAI chat history. It returns how many tool messages it stored.
//
// Call it at start, before any run begins: a call still being worked on by a live run would be
// answered twice. A session whose open call is followed by anything but tool messages is left
// alone (history is append-only), and llmctx still fills the gap when the model is called.
func CloseInterruptedCalls(ctx context.Context, st parley.Store, now func() time.Time) (int, error) {
	const batch = 100
	closed, after := 0, ""
	for {
		ids, err := st.SessionsWithOpenToolCalls(ctx, after, batch)
		if err != nil {
			return closed, err
		}
		for _, id := range ids {
			n, err := closeSession(ctx, st, id, now)
			if err != nil {
				return closed, fmt.Errorf("session %s: %w", id, err)
			}
			closed += n
		}
		if len(ids) < batch {
			return closed, nil
		}
		after = ids[len(ids)-1]
	}
}

func closeSession(ctx context.Context, st parley.Store, sessionID string, now func() time.Time) (int, error) {
	h, err := st.ModelHistory(ctx, sessionID)
	if err != nil {
		return 0, err
	}
	// Find the last assistant message with tool calls; after it may come only tool messages.
	last := -1
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Role == parley.RoleAssistant && len(h[i].ToolCalls) > 0 {
			last = i
			break
		}
		if h[i].Role != parley.RoleTool {
			return 0, nil
		}
	}
	if last < 0 {
		return 0, nil
	}
	answered := map[string]bool{}
	for _, m := range h[last+1:] {
		answered[m.ToolCallID] = true
	}
	var msgs []*parley.Message
	at := now().UTC().Truncate(time.Microsecond)
	failed := false
	for _, c := range h[last].ToolCalls {
		if answered[c.ID] {
			continue
		}
		msgs = append(msgs, &parley.Message{
			ID: parley.NewID(), Role: parley.RoleTool, Content: parley.Text(llmctx.MissingResult),
			Name: c.Function.Name, ToolCallID: c.ID, Success: &failed, CreatedAt: at,
		})
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := st.AppendMessages(ctx, sessionID, msgs...); err != nil {
		return 0, err
	}
	return len(msgs), nil
}
