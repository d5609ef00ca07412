package main

import (
	"context"
	"log/slog"
	"time"

	parley "github.com/parleyhq/parley"
)

// sweeper deletes what has expired, hourly: guest tokens and API keys past their expiry; run
// events, ended run records and their tool-call ledger older than eventRetention; tool approvals
// decided (or expired) longer than approvalRetention ago, but those that allowed a tool "always"
// (a retention of 0 keeps them). stop ends it and waits.
func sweeper(ctx context.Context, store parley.Store, eventRetention, approvalRetention time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		for {
			if n, err := store.DeleteExpiredAPIKeys(ctx, time.Now()); err != nil && ctx.Err() == nil {
				log.Warn("deleting expired api keys", "err", err)
			} else if n > 0 {
				log.Info("deleted expired api keys", "keys", n)
			}
			if eventRetention > 0 {
				if n, err := store.DeleteEventsBefore(ctx, time.Now().Add(-eventRetention)); err != nil && ctx.Err() == nil {
					log.Warn("deleting old run events", "err", err)
				} else if n > 0 {
					log.Info("deleted old run events", "events", n)
				}
				if n, err := store.DeleteEndedRunsBefore(ctx, time.Now().Add(-eventRetention)); err != nil && ctx.Err() == nil {
					log.Warn("deleting old run records", "err", err)
				} else if n > 0 {
					log.Info("deleted old run records", "runs", n)
				}
			}
			if approvalRetention > 0 {
				if n, err := store.DeleteDecidedApprovalsBefore(ctx, time.Now().Add(-approvalRetention)); err != nil && ctx.Err() == nil {
					log.Warn("deleting old tool approvals", "err", err)
				} else if n > 0 {
					log.Info("deleted old tool approvals", "approvals", n)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
