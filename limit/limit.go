// Package limit is Parley's rate limiter: GCRA (the generic cell rate algorithm, a token bucket kept
// as one timestamp per key) in memory for one instance, or in Redis so that a limit holds across
// instances. Both keep the same arithmetic, so a limit means the same thing either way.
package limit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Rate is "Count requests per Per", with bursts of up to Burst requests at once.
type Rate struct {
	Count int
	Per   time.Duration
	Burst int
}

// Off reports whether the rate limits nothing.
func (r Rate) Off() bool { return r.Count <= 0 }

// interval is the time one request uses up.
func (r Rate) interval() time.Duration { return r.Per / time.Duration(r.Count) }

// String formats r as ParseRate reads it.
func (r Rate) String() string {
	if r.Off() {
		return "off"
	}
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h", 24 * time.Hour: "d"}[r.Per]
	if unit == "" {
		unit = r.Per.String()
	}
	s := fmt.Sprintf("%d/%s", r.Count, unit)
	if r.Burst != r.Count {
		s += fmt.Sprintf(",burst=%d", r.Burst)
	}
	return s
}

// ParseRate reads "N/unit" (unit s, m, h or d, or a Go duration such as 10m), optionally followed
// by ",burst=B"; "off" or "0" is no limit. The burst defaults to N.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "off" || s == "0" || s == "" {
		return Rate{}, nil
	}
	spec, burst, hasBurst := strings.Cut(s, ",")
	n, unit, ok := strings.Cut(spec, "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want N/unit, such as 60/m", s)
	}
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || count < 1 || count > 1_000_000 {
		return Rate{}, fmt.Errorf("rate %q: the count must be a number from 1 to 1000000", s)
	}
	var per time.Duration
	switch u := strings.TrimSpace(unit); u {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	case "d", "day":
		per = 24 * time.Hour
	default:
		if per, err = time.ParseDuration(u); err != nil || per < time.Millisecond {
			return Rate{}, fmt.Errorf("rate %q: unknown unit %q (s, m, h, d or a duration)", s, u)
		}
	}
	r := Rate{Count: count, Per: per, Burst: count}
	if hasBurst {
		b, ok := strings.CutPrefix(strings.TrimSpace(burst), "burst=")
		v, err := strconv.Atoi(b)
		if !ok || err != nil || v < 1 || v > 1_000_000 {
			return Rate{}, fmt.Errorf("rate %q: after the comma, want burst=B with B from 1 to 1000000", s)
		}
		r.Burst = v
	}
	if r.interval() <= 0 {
		return Rate{}, fmt.Errorf("rate %q: too many per %s", s, per)
	}
	return r, nil
}

// Decision is a limiter's answer for one request.
type Decision struct {
	Allowed bool
	// RetryAfter is how long until a request would be allowed (0 when allowed).
	RetryAfter time.Duration
}

// Limiter decides whether a request under key may go ahead at rate r, and counts it if so.
type Limiter interface {
	Allow(ctx context.Context, key string, r Rate) (Decision, error)
}

// gcra is the algorithm on one key: tat is the theoretical arrival time of the next request.
// It returns the key's new tat and the decision.
func gcra(tat, now time.Time, r Rate) (time.Time, Decision) {
	if tat.Before(now) {
		tat = now
	}
	interval := r.interval()
	next := tat.Add(interval)
	allowAt := next.Add(-time.Duration(r.Burst) * interval)
	if allowAt.After(now) {
		return tat, Decision{RetryAfter: allowAt.Sub(now)}
	}
	return next, Decision{Allowed: true}
}

// Memory is a Limiter for one instance. It holds at most MaxKeys keys; when full, keys whose
// buckets are full again are dropped, and if none are, the oldest half.
type Memory struct {
	Now     func() time.Time
	MaxKeys int

	mu   sync.Mutex
	tats map[string]time.Time
}

// NewMemory returns an in-memory limiter.
func NewMemory() *Memory {
	return &Memory{Now: time.Now, MaxKeys: 100_000, tats: map[string]time.Time{}}
}

// Allow implements Limiter.
func (m *Memory) Allow(_ context.Context, key string, r Rate) (Decision, error) {
	if r.Off() {
		return Decision{Allowed: true}, nil
	}
	now := m.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	tat, known := m.tats[key]
	if !known && len(m.tats) >= m.MaxKeys {
		m.sweepLocked(now)
	}
	next, d := gcra(tat, now, r)
	m.tats[key] = next
	return d, nil
}

// sweepLocked drops keys whose bucket has refilled (their tat is past); failing that, half.
func (m *Memory) sweepLocked(now time.Time) {
	for k, t := range m.tats {
		if !t.After(now) {
			delete(m.tats, k)
		}
	}
	if len(m.tats) < m.MaxKeys {
		return
	}
	drop := len(m.tats) / 2
	for k := range m.tats {
		if drop == 0 {
			break
		}
		delete(m.tats, k)
		drop--
	}
}

// Len is the number of keys held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.tats)
}
