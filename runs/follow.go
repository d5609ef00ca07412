package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/bus"
)

// Join, as Follow's after, joins a session as it is: from the first event of its active run (what
// that run has produced so far, then live), or from the next run it begins.
const Join int64 = -1

// followBatch bounds the events handed to Follow's fn at a time.
const followBatch = 256

// Follow calls fn with the session's events after seq `after`, in order, each once, until ctx ends
// or fn returns an error, which Follow returns. It reads what the run logs in memory hold and,
// for older events (or after a restart), the store; it follows each run the session begins later,
// live. Events the store no longer holds (past the retention) are skipped.
func (m *Manager) Follow(ctx context.Context, sessionID string, after int64, fn func([]parley.Event) error) error {
	var tick <-chan struct{} // with a relay: the session may have new events on another instance
	var poll <-chan time.Time
	if m.opts.Relay != nil {
		// Watching starts before the first read, so that no notification falls between the two.
		t, stop := m.opts.Relay.Watch(sessionID)
		defer stop()
		tick = t
		// A notification can be lost (a reconnect): a slow poll bounds what that costs.
		p := time.NewTicker(relayPoll)
		defer p.Stop()
		poll = p.C
	}
	wake := func(wait <-chan struct{}) error {
		select {
		case <-wait:
		case <-tick:
		case <-poll:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	if after < 0 {
		after = m.joinPoint(ctx, sessionID)
	}
	m.mu.Lock()
	m.followers[sessionID]++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		if m.followers[sessionID]--; m.followers[sessionID] <= 0 {
			delete(m.followers, sessionID)
			delete(m.waits, sessionID)
		}
		m.mu.Unlock()
	}()
	for {
		// The wait channel is taken before the step, so that a run begun after the step has
		// looked wakes this loop.
		m.mu.Lock()
		wait, ok := m.waits[sessionID]
		if !ok {
			wait = make(chan struct{})
			m.waits[sessionID] = wait
		}
		m.mu.Unlock()
		next, moved, err := m.step(ctx, sessionID, after, true, fn)
		if err != nil {
			return err
		}
		if moved {
			after = next
			continue
		}
		if err := wake(wait); err != nil {
			return err
		}
	}
}

// step makes one move of Follow's: it hands fn the next events after `after` (Join: it looks for
// the run to join) and returns where it stopped and whether it moved. It waits only when block is
// set and the active run in memory has nothing new yet; otherwise it returns at once.
func (m *Manager) step(ctx context.Context, sessionID string, after int64, block bool, fn func([]parley.Event) error) (int64, bool, error) {
	m.mu.Lock()
	r := m.lastOfSes[sessionID]
	m.mu.Unlock()

	if after < 0 { // joining at the next run
		if r == nil {
			if first := m.remoteRun(ctx, sessionID); first > 0 {
				return first - 1, true, nil // begun on another instance
			}
			return after, false, nil
		}
		return r.Log.FirstSeq() - 1, true, nil
	}
	// Both read at once: the run may append its last events and close between two reads,
	// and a follower that took the old last with the new closed would skip those events.
	if r != nil {
		last, closed := r.Log.State()
		if after < last || (!closed && block) {
			if after+1 < r.Log.FirstSeq() {
				// Events of earlier runs, which only the store holds.
				next, err := m.replay(ctx, sessionID, after, r.Log.FirstSeq()-1, fn)
				return next, next != after, err
			}
			evs, _, err := r.Log.Read(ctx, after, followBatch)
			if errors.Is(err, bus.ErrTrimmed) {
				next, err := m.replay(ctx, sessionID, after, r.Log.Next()-1, fn)
				return next, next != after, err
			}
			if err != nil {
				return after, false, err
			}
			if len(evs) == 0 {
				return after, false, nil
			}
			if err := fn(evs); err != nil {
				return after, false, err
			}
			return evs[len(evs)-1].Seq, true, nil
		}
		if !closed {
			return after, false, nil // the active run has nothing new yet
		}
	}
	// Nothing in memory after `after`: the store may hold more (events of a run this
	// process no longer holds, such as one from before a restart).
	if m.opts.Events != nil {
		evs, err := m.listEvents(ctx, sessionID, after)
		if err != nil {
			return after, false, err
		}
		if len(evs) > 0 {
			if err := fn(evs); err != nil {
				return after, false, err
			}
			return evs[len(evs)-1].Seq, true, nil
		}
	}
	// And the relay, for a run on another instance, live.
	if m.opts.Relay != nil {
		next, n, err := m.relayed(ctx, sessionID, after, fn)
		if err != nil {
			return after, false, err
		}
		if n > 0 {
			return next, true, nil
		}
	}
	return after, false, nil
}

// relayPoll is how often a follower re-reads the relay without a notification.
const relayPoll = 2 * time.Second

// relayed hands fn the events the relay holds after `after` (the store's first, where the relay
// starts later) and returns where it stopped and how many it handed over. A relay that fails is
// logged and read again later: the store still holds what it missed.
func (m *Manager) relayed(ctx context.Context, sessionID string, after int64, fn func([]parley.Event) error) (int64, int, error) {
	rctx, cancel := readCtx(ctx)
	evs, err := m.opts.Relay.Range(rctx, sessionID, after, followBatch)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return after, 0, ctx.Err()
		}
		m.opts.Log.Warn("could not read relayed events", "session", sessionID, "err", err)
		return after, 0, nil
	}
	if len(evs) == 0 {
		return after, 0, nil
	}
	if evs[0].Seq > after+1 {
		next, err := m.replay(ctx, sessionID, after, evs[0].Seq-1, fn)
		if err != nil {
			return after, 0, err
		}
		after = next
	}
	if err := fn(evs); err != nil {
		return after, 0, err
	}
	return evs[len(evs)-1].Seq, len(evs), nil
}

// remoteRun returns the first sequence number of the session's run on another instance, or 0.
func (m *Manager) remoteRun(ctx context.Context, sessionID string) int64 {
	if m.opts.Runs == nil || m.opts.Relay == nil {
		return 0
	}
	rctx, cancel := readCtx(ctx)
	defer cancel()
	rec, err := m.opts.Runs.ActiveRun(rctx, sessionID)
	if err != nil || ctx.Err() != nil || rec.Instance == m.opts.Instance {
		return 0
	}
	return rec.FirstSeq
}

// joinPoint returns where Follow(Join) starts: before the active run's first event (here or on
// another instance), after the last event of the latest run in memory, or Join itself (the next
// run) when memory holds none.
func (m *Manager) joinPoint(ctx context.Context, sessionID string) int64 {
	m.mu.Lock()
	r := m.lastOfSes[sessionID]
	m.mu.Unlock()
	switch {
	case r == nil:
		if first := m.remoteRun(ctx, sessionID); first > 0 {
			return first - 1 // the active run is on another instance
		}
		return Join
	case !r.Log.Closed():
		return r.Log.FirstSeq() - 1
	default:
		return r.Log.Next() - 1
	}
}

// replay hands fn the stored events after `after` up to `upTo` and returns where it stopped: at
// upTo when the store holds no more of them.
func (m *Manager) replay(ctx context.Context, sessionID string, after, upTo int64, fn func([]parley.Event) error) (int64, error) {
	if m.opts.Events == nil {
		return upTo, nil
	}
	for after < upTo {
		evs, err := m.listEvents(ctx, sessionID, after)
		if err != nil {
			return after, err
		}
		n := 0
		for n < len(evs) && evs[n].Seq <= upTo {
			n++
		}
		if n == 0 {
			return upTo, nil
		}
		if err := fn(evs[:n]); err != nil {
			return after, err
		}
		after = evs[n-1].Seq
	}
	return after, nil
}

// readCtx returns the context of one read a follower makes: bounded by the store's timeout but not
// cancelled with ctx. A follower's reads end when its client leaves (or the last subscriber of a
// hub closes), typically just after a run's done event, while the follower looks in the store for
// what comes next; a PostgreSQL query cancelled mid-flight makes pgx close its connection, so
// every chat would cost the pool a new connection (a dial, ~20 ms). The read finishes instead, and
// the caller checks ctx after it.
func readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

func (m *Manager) listEvents(ctx context.Context, sessionID string, after int64) ([]parley.Event, error) {
	rctx, cancel := readCtx(ctx)
	defer cancel()
	evs, err := m.opts.Events.ListEvents(rctx, sessionID, after, followBatch)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("reading stored events: %w", err)
	}
	return evs, nil
}
