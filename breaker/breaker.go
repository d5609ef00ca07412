// Package breaker is a circuit breaker as seed 003 §5 draws it: closed until a number of
// consecutive failures, then open (every call refused) for a cooldown, then half-open, where one
// trial call decides: success closes it, failure opens it again for another cooldown.
package breaker

import (
	"sync"
	"time"
)

// State is a breaker's state.
type State string

// The three states.
const (
	Closed   State = "closed"
	Open     State = "open"
	HalfOpen State = "half_open"
)

// Outcome is how a call that the breaker let through ended.
type Outcome int

// The outcomes. Ignore is for a call that says nothing of the endpoint's health, such as one the
// caller cancelled or one refused for bad input.
const (
	Success Outcome = iota
	Failure
	Ignore
)

// Defaults of seed 003 §5.
const (
	DefaultFailures = 3
	DefaultCooldown = 30 * time.Second
)

// Breaker is safe for concurrent use. The zero value is not usable; call New.
type Breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex
	state    State
	failures int       // consecutive, while closed
	openedAt time.Time // when it last opened
	trial    bool      // half-open: the trial call is in flight
	gen      uint64    // bumped at every state change, so a late report of an older call is ignored
}

// New returns a closed breaker that opens after failures consecutive failures and stays open for
// cooldown. Values below 1 take the defaults. now may be nil (time.Now).
func New(failures int, cooldown time.Duration, now func() time.Time) *Breaker {
	if failures < 1 {
		failures = DefaultFailures
	}
	if cooldown <= 0 {
		cooldown = DefaultCooldown
	}
	if now == nil {
		now = time.Now
	}
	return &Breaker{threshold: failures, cooldown: cooldown, now: now, state: Closed}
}

// Allow asks to make a call. If the breaker refuses, ok is false and wait tells how long until it
// lets a trial call through. Otherwise the caller must call done exactly once with the outcome.
func (b *Breaker) Allow() (done func(Outcome), wait time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Open:
		if left := b.cooldown - b.now().Sub(b.openedAt); left > 0 {
			return nil, left, false
		}
		b.set(HalfOpen)
		fallthrough
	case HalfOpen:
		if b.trial {
			return nil, b.cooldown, false
		}
		b.trial = true
	}
	gen := b.gen
	var once sync.Once
	return func(o Outcome) { once.Do(func() { b.report(gen, o) }) }, 0, true
}

func (b *Breaker) report(gen uint64, o Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen != b.gen {
		return // the state changed since the call began; it decides nothing now
	}
	switch b.state {
	case Closed:
		switch o {
		case Success:
			b.failures = 0
		case Failure:
			b.failures++
			if b.failures >= b.threshold {
				b.set(Open)
			}
		}
	case HalfOpen:
		b.trial = false
		switch o {
		case Success:
			b.set(Closed)
		case Failure:
			b.set(Open)
		}
	}
}

// set changes the state; the caller holds mu.
func (b *Breaker) set(s State) {
	b.state, b.failures, b.trial = s, 0, false
	if s == Open {
		b.openedAt = b.now()
	}
	b.gen++
}

// State reports the state, as the next Allow would see it.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && b.now().Sub(b.openedAt) >= b.cooldown {
		return HalfOpen
	}
	return b.state
}

// Backoff is the wait before the n-th retry in a row (n >= 1) that goes with a breaker: base
// doubled per retry, at most max, of which half is fixed and half scaled by jitter (in [0, 1]).
func Backoff(base, max time.Duration, n int, jitter float64) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(jitter*float64(d/2))
}
