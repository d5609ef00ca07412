package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/relay"
	"github.com/parleyhq/parley/runs"
)

// cluster links this instance to the others sharing the database through Redis: their runs'
// events reach this instance's clients live, and control actions reach the instance running a run.
type cluster struct {
	relay  *relay.Relay
	cancel context.CancelFunc
	done   chan struct{}
}

// newCluster returns nil without Redis (one instance). lag receives the relay lag of each event
// read from the other instances.
func newCluster(rdb *redis.Client, instance string, log *slog.Logger, lag func(time.Duration)) *cluster {
	if rdb == nil {
		return nil
	}
	return &cluster{relay: relay.New(rdb, instance, relay.Options{Log: log, Lag: lag})}
}

// wire gives the run manager's options the relay and the way to send control actions.
func (c *cluster) wire(o *runs.Options) {
	if c == nil {
		return
	}
	o.Relay = c.relay
	o.SendControl = func(ctx context.Context, instance, sessionID, runID, action string) (string, error) {
		rep, err := c.relay.Send(ctx, instance, relay.Control{Session: sessionID, Run: runID, Action: action})
		switch {
		case errors.Is(err, relay.ErrNoInstance):
			return "", parley.Errorf(parley.ECUnavailable, "the instance running this run does not answer; another instance takes the run over when its lease ends")
		case errors.Is(err, relay.ErrTimeout):
			return "", parley.Errorf(parley.ECUnavailable, "the instance running this run did not answer in time")
		case err != nil:
			return "", err
		case !rep.OK:
			return "", parley.Errorf(parley.ErrorCode(rep.Code), "%s", rep.Message)
		}
		return rep.Message, nil // an accepted action's reply carries the run's state
	}
}

// start answers other instances' control actions with mgr's runs, until stop.
func (c *cluster) start(mgr *runs.Manager) {
	if c == nil {
		return
	}
	c.relay.Handle(func(ctx context.Context, ctl relay.Control) relay.Reply {
		state, err := mgr.ControlLocal(ctl.Session, ctl.Run, ctl.Action)
		if err != nil {
			return relay.Reply{Code: string(parley.CodeOf(err)), Message: parley.MessageOf(err)}
		}
		return relay.Reply{OK: true, Message: state}
	})
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		c.relay.Run(ctx)
	}()
}

// stop ends the relay and waits for it.
func (c *cluster) stop() {
	if c == nil || c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
}
