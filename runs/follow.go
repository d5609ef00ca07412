package runs

import (
	"context"
	"iter"

	"github.com/parleyhq/parley/stream"
)

// Join, as a reader's starting point, joins a session as it is: from the first event of its
// active run (here or on another instance), or from the next run it begins.
const Join = stream.Join

// Subscribe returns a reader of the session's events after seq `after` (Join: see Join), each
// once, in order: from memory, the store and the relay, then live, across the session's runs. The
// caller must Close it.
func (m *Manager) Subscribe(ctx context.Context, sessionID string, after int64) *stream.Subscription {
	return m.streams.Subscribe(ctx, sessionID, after)
}

// After returns the session's events after seq `after` as Subscribe gives them, until ctx ends or
// the consumer stops.
func (m *Manager) After(ctx context.Context, sessionID string, after int64) iter.Seq2[*stream.Frame, error] {
	return m.streams.After(ctx, sessionID, after)
}

// Streams returns how many sessions' streams this instance holds in memory (tests, metrics).
func (m *Manager) Streams() int { return m.streams.Sessions() }

// remoteRun returns the first sequence number of the session's run on another instance, or 0.
func (m *Manager) remoteRun(ctx context.Context, sessionID string) int64 {
	if m.opts.Runs == nil || m.opts.Relay == nil {
		return 0
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	rec, err := m.opts.Runs.ActiveRun(rctx, sessionID)
	if err != nil || ctx.Err() != nil || rec.Instance == m.opts.Instance {
		return 0
	}
	return rec.FirstSeq
}
