package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/limit"
	"github.com/redis/go-redis/v9"
)

// guard is the wiring of authentication and rate limits.
type guard struct {
	auth                *auth.Authenticator // nil with --auth off
	limiter             limit.Limiter
	userRate, guestRate limit.Rate
	toolUserRate        limit.Rate    // tool calls per user
	toolRate            limit.Rate    // calls per tool
	redis               *redis.Client // nil without --redis-url
}

func newGuard(ctx context.Context, c *config, store parley.Store, log *slog.Logger) (*guard, error) {
	g := &guard{}
	var err error
	if g.userRate, err = limit.ParseRate(c.RateLimit); err != nil {
		return nil, err
	}
	if g.guestRate, err = limit.ParseRate(c.GuestRateLimit); err != nil {
		return nil, err
	}
	if g.toolUserRate, err = limit.ParseRate(c.ToolQuotaUser); err != nil {
		return nil, err
	}
	if g.toolRate, err = limit.ParseRate(c.ToolQuotaTool); err != nil {
		return nil, err
	}
	if c.RedisURL != "" {
		opts, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("redis-url: %w", err)
		}
		g.redis = redis.NewClient(opts)
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := g.redis.Ping(pingCtx).Err(); err != nil {
			g.redis.Close()
			return nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
		}
		g.limiter = &limit.Redis{Client: g.redis}
		log.Info("rate limits in redis", "addr", opts.Addr)
	} else {
		g.limiter = limit.NewMemory()
	}
	if c.Auth == "keys" {
		g.auth = &auth.Authenticator{Store: store, Log: log, CacheTTL: c.AuthRecheck}
		log.Info("authentication: API keys", "guests", c.Guests)
	} else {
		log.Warn("authentication is off: every caller is the user \"local\" (use --auth keys on a shared machine)", "addr", c.Addr)
	}
	return g, nil
}

func (g *guard) close() {
	if g.redis != nil {
		g.redis.Close()
	}
}
