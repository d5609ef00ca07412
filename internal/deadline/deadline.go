// Package deadline gives a wait a bound without a timer of its own.
//
// A context.WithTimeout made for one store write costs a context, a runtime timer set and
// stopped again, a callback and, once waited on, a channel: several allocations and two changes
// to the timer heap for a bound that almost never fires. Here a deadline that may end a little
// late shares one timer and one channel with every other deadline falling in the same slot of
// time. A slot's width is the largest power of two nanoseconds no more than 1/64 of how far
// away its deadline was when asked for (at least 2^20 ns, about 1 ms): a deadline 10 s away
// ends no earlier than asked, and at most 0.134 s (about 1/75) later. Slots live until they
// fire, so fewer than 128 of them are live for each width (a server asking for 10 s bounds at
// any rate holds about 75, each a timer, a channel and the slot).
//
// A deadline may end late by that much: use it for bounds that only keep a wait from lasting
// for ever (a store write's), never for a time a client sees.
package deadline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// minShift is the log2 of the narrowest slot, in nanoseconds (about 1 ms).
const minShift = 20

// Slots hands out shared deadlines. Its zero value is ready; it must not be copied once used.
// Each owner (a runs.Manager) has its own, so that deadlines made in one testing/synctest
// bubble, whose channels and timers belong to it, are never shared with another.
type Slots struct {
	once sync.Once
	// epoch is the time slots are counted from, the first use's: it carries the monotonic
	// clock, so a change of the wall clock moves no deadline.
	epoch time.Time

	mu   sync.Mutex
	live map[slotKey]*slot
	// latest holds, for each width, the slot last handed out: deadlines asked for at about the
	// same moment find it without the lock.
	latest [64]atomic.Pointer[slot]
}

type slotKey struct {
	shift uint8
	n     int64 // the slot ends at epoch + n<<shift
}

// slot is one shared deadline: its channel is closed when it passes.
type slot struct {
	key   slotKey
	at    time.Time
	done  chan struct{}
	slots *Slots

	mu    sync.Mutex
	fired bool
	funcs map[*afterFunc]struct{} // registered by AfterFunc, run when the slot fires
}

type afterFunc struct{ f func() }

// slotFor returns the live slot that ends at the first slot boundary no earlier than now+d.
func (ss *Slots) slotFor(now time.Time, d time.Duration) *slot {
	ss.once.Do(func() { ss.epoch = now })
	shift := uint8(minShift)
	for d/64 >= time.Duration(1)<<(shift+1) && shift < 62 {
		shift++
	}
	w := int64(1) << shift
	end := int64(now.Sub(ss.epoch) + d)
	k := slotKey{shift: shift, n: (end + w - 1) >> shift} // rounded up: never earlier than asked
	if s := ss.latest[shift].Load(); s != nil && s.key == k {
		return s
	}
	ss.mu.Lock()
	s := ss.live[k]
	if s == nil {
		s = &slot{key: k, at: ss.epoch.Add(time.Duration(k.n << shift)), done: make(chan struct{}), slots: ss}
		if ss.live == nil {
			ss.live = make(map[slotKey]*slot)
		}
		ss.live[k] = s
		time.AfterFunc(s.at.Sub(now), s.fire)
	}
	ss.mu.Unlock()
	ss.latest[shift].Store(s)
	return s
}

func (s *slot) fire() {
	s.slots.mu.Lock()
	delete(s.slots.live, s.key)
	s.slots.mu.Unlock()
	s.mu.Lock()
	s.fired = true
	close(s.done)
	funcs := s.funcs
	s.funcs = nil
	s.mu.Unlock()
	for a := range funcs {
		go a.f()
	}
}

// Live returns how many slots are waiting to fire.
func (ss *Slots) Live() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.live)
}

// Detached returns a context with parent's values but neither its cancellation nor its deadline
// (as context.WithoutCancel), that ends with context.DeadlineExceeded no earlier than d from now
// and at most d/64 (or 1 ms) later. It has no cancel function: it holds nothing but its slot,
// which ends on its own. parent may be nil (no values).
func (ss *Slots) Detached(parent context.Context, d time.Duration) context.Context {
	values := context.Background()
	if parent != nil && parent != values {
		values = context.WithoutCancel(parent)
	}
	return &ctx{Context: values, s: ss.slotFor(time.Now(), d)}
}

// ctx is a context that ends with its slot.
type ctx struct {
	context.Context // its values; never cancelled, no deadline
	s               *slot
}

func (c *ctx) Deadline() (time.Time, bool) { return c.s.at, true }
func (c *ctx) Done() <-chan struct{}       { return c.s.done }

func (c *ctx) Err() error {
	select {
	case <-c.s.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *ctx) String() string { return "deadline.Detached(" + c.s.at.String() + ")" }

// AfterFunc arranges for f to run in a goroutine of its own once c has ended, as context.AfterFunc
// does (which calls it): the contexts made from c, context.AfterFunc(c, …) and the store drivers
// that watch c share its slot's timer instead of starting a goroutine each to wait on it.
func (c *ctx) AfterFunc(f func()) (stop func() bool) {
	s := c.s
	a := &afterFunc{f: f}
	s.mu.Lock()
	if s.fired {
		s.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	if s.funcs == nil {
		s.funcs = make(map[*afterFunc]struct{})
	}
	s.funcs[a] = struct{}{}
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.funcs[a]; !ok {
			return false // run already, or stopped
		}
		delete(s.funcs, a)
		return true
	}
}
