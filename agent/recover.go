package agent

import (
	"context"
	"fmt"
	"time"

	parley "github.com/parleyhq/parley"
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
