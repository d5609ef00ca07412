package limit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// gcraScript is gcra on Redis, atomically, on Redis's own clock so that instances whose clocks
// differ agree. The key holds the tat in microseconds and expires when its bucket is full again.
// KEYS[1]: the key; ARGV[1]: the interval in µs; ARGV[2]: the burst.
// It returns {allowed (0/1), retry after in µs}.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local nxt = tat + interval
local allow_at = nxt - burst * interval
if allow_at > now then
  return {0, allow_at - now}
end
redis.call('SET', KEYS[1], nxt, 'PX', math.ceil((nxt - now) / 1000) + 1)
return {1, 0}
`)

// Redis is a Limiter shared by every instance on one Redis.
type Redis struct {
	Client redis.UniversalClient
	Prefix string // of every key, default "parley:rl:"
}

// Allow implements Limiter.
func (l *Redis) Allow(ctx context.Context, key string, r Rate) (Decision, error) {
	if r.Off() {
		return Decision{Allowed: true}, nil
	}
	prefix := l.Prefix
	if prefix == "" {
		prefix = "parley:rl:"
	}
	res, err := gcraScript.Run(ctx, l.Client, []string{prefix + key}, r.interval().Microseconds(), r.Burst).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("rate limit: redis: %w", err)
	}
	if len(res) != 2 {
		return Decision{}, fmt.Errorf("rate limit: redis: unexpected reply %v", res)
	}
	return Decision{Allowed: res[0] == 1, RetryAfter: time.Duration(res[1]) * time.Microsecond}, nil
}
