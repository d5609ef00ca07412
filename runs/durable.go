package runs

import (
	"context"
	"errors"
	"time"

	parley "github.com/parleyhq/parley"
)

// RecoverFunc returns the body that goes on with run, taken over from a process that died (or
// closes it, interrupted). rec is the run's record, its Attempts already counting this takeover.
type RecoverFunc func(run *Run, rec parley.RunRecord) Func

// claimBatch bounds the runs taken over in one pass.
const claimBatch = 16

// Start begins the work that makes runs outlive their process (Options.Runs; without it Start
// does nothing). Call it before the manager begins any run. It returns at once: the work goes on in goroutines the manager owns until
// Shutdown, so that a server never waits for it before it listens.
//
// One goroutine takes back the runs this instance left running before it restarted (its orphans:
// the runs of Options.Instance created or claimed before Start), each once, in batches, however
// many there are. The other, every third of the lease, renews the leases of this instance's runs
// and takes over the runs of other instances whose lease has ended. Each run taken over starts
// with recover's body. A run of this instance whose lease another instance took over meanwhile
// (this process stalled for longer than the lease) is aborted here.
func (m *Manager) Start(recover RecoverFunc) {
	if m.opts.Runs == nil {
		return
	}
	m.start.Do(func() {
		// Read before Start returns: every run this process begins or takes over is created or
		// claimed at this moment or later, so the orphans' pass never takes one of them back.
		started := m.opts.Now()
		m.bg.Add(2)
		go func() {
			defer m.bg.Done()
			m.takeOver(recover, m.opts.Instance, func() time.Time { return started })
		}()
		go func() {
			defer m.bg.Done()
			t := time.NewTicker(m.opts.Lease / 3)
			defer t.Stop()
			for {
				select {
				case <-m.ctx.Done():
					return
				case <-t.C:
				}
				m.renew()
				m.takeOver(recover, "", m.opts.Now)
			}
		}()
	})
}

// renew extends the leases of this instance's runs.
func (m *Manager) renew() {
	m.mu.Lock()
	ids := make([]string, 0, len(m.active))
	byID := make(map[string]*Run, len(m.active))
	for _, r := range m.active {
		ids = append(ids, r.ID)
		byID[r.ID] = r
	}
	m.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, storeTimeout)
	defer cancel()
	renewed, err := m.opts.Runs.RenewRuns(ctx, m.opts.Instance, ids, m.opts.Now().Add(m.opts.Lease))
	if err != nil {
		if m.ctx.Err() == nil {
			m.opts.Log.Error("could not renew the leases of runs", "runs", len(ids), "err", err)
		}
		return
	}
	kept := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		kept[id] = true
	}
	for id, r := range byID {
		if kept[id] {
			continue
		}
		// Ended meanwhile (its record is already ended, or being ended: the renewal may commit in
		// the same transaction as the run's end), or taken over by another instance.
		if finish, _ := r.Result(); finish == "" && !r.ending.Load() {
			m.opts.Log.Error("run taken over by another instance while it ran here: aborted here", "run_id", id, "session_id", r.SessionID)
			r.stopTakenOver()
		}
	}
}

// takeOver claims runs whose lease ended before asOf() (and the running runs of orphanedBy created
// or claimed before it) and starts them, a batch at a time, until a claim comes back short. Each
// run is claimed once: a claim moves its lease past asOf() (and, with a fixed asOf, its record's
// time to asOf itself), so the next batch holds other runs, and the passes are linear in the runs.
func (m *Manager) takeOver(recover RecoverFunc, orphanedBy string, asOf func() time.Time) {
	for {
		m.mu.Lock()
		closing := m.closing
		m.mu.Unlock()
		if closing || m.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(m.ctx, storeTimeout)
		recs, err := m.opts.Runs.ClaimRuns(ctx, m.opts.Instance, orphanedBy, asOf(), m.opts.Now().Add(m.opts.Lease), claimBatch)
		cancel()
		if err != nil {
			if m.ctx.Err() == nil {
				// Runs left unclaimed are taken over by a later pass once their lease ends.
				m.opts.Log.Error("could not look for runs to take over", "err", err)
			}
			return
		}
		for _, rec := range recs {
			// Counted under the lock, unless closing: Shutdown waits for the adoptions under way
			// before it waits for the runs, so that none starts after it stopped waiting.
			m.mu.Lock()
			if m.closing {
				m.mu.Unlock()
				return
			}
			m.adopting.Add(1)
			m.mu.Unlock()
			err := m.adopt(rec, recover)
			m.adopting.Done()
			if err != nil && !errors.Is(err, ErrClosing) {
				m.opts.Log.Error("could not take over a run", "run_id", rec.ID, "session_id", rec.SessionID, "err", err)
			}
		}
		if len(recs) < claimBatch {
			return
		}
	}
}

// adopt starts a run taken over: same id, new sequence numbers, and recover's body.
func (m *Manager) adopt(rec parley.RunRecord, recover RecoverFunc) error {
	m.mu.Lock()
	own := m.active[rec.SessionID] != nil && m.active[rec.SessionID].ID == rec.ID
	m.mu.Unlock()
	if own {
		// A run of this process whose lease ran out before it was renewed (a stall): the claim
		// has renewed it, and it goes on here. Not a conflict.
		m.opts.Log.Warn("a run's lease ran out before it was renewed: this instance keeps it", "run_id", rec.ID, "session_id", rec.SessionID)
		return nil
	}
	m.opts.Log.Warn("taking over a run whose process stopped", "run_id", rec.ID, "session_id", rec.SessionID, "attempt", rec.Attempts)
	if err := m.claim(rec.SessionID, false); err != nil {
		return err
	}
	first, err := m.reserve(m.ctx, rec.SessionID, seqBlock)
	if err != nil {
		m.unclaim(rec.SessionID)
		return err
	}
	r, err := m.open(rec.ID, Spec{Session: rec.SessionID, Model: rec.Model, Owner: rec.Owner, SelectedTools: rec.SelectedTools}, first)
	if err != nil {
		return err
	}
	r.Recovered = true
	fn := Func(func(context.Context, func(parley.Event)) (string, error) { return parley.FinishInterrupted, nil })
	if recover != nil {
		fn = recover(r, rec)
	}
	r.Go(fn)
	return nil
}
