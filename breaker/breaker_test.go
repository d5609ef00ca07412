package breaker

import (
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func call(t *testing.T, b *Breaker, o Outcome) {
	t.Helper()
	done, _, ok := b.Allow()
	if !ok {
		t.Fatalf("call refused in state %s", b.State())
	}
	done(o)
}

func TestBreakerFollowsSeed003(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := New(0, 0, c.now) // the defaults: 3 failures, 30 s
	// A success resets the count: two failures, a success, two failures stay closed.
	for _, o := range []Outcome{Failure, Failure, Success, Failure, Failure, Ignore} {
		call(t, b, o)
	}
	if b.State() != Closed {
		t.Fatalf("state %s after non-consecutive failures", b.State())
	}
	call(t, b, Failure) // the third in a row
	if b.State() != Open {
		t.Fatalf("state %s after 3 consecutive failures", b.State())
	}
	c.add(10 * time.Second)
	if _, wait, ok := b.Allow(); ok || wait != 20*time.Second {
		t.Fatalf("open breaker: ok=%v wait=%v, want refused with 20s left", ok, wait)
	}
	c.add(20 * time.Second)
	if b.State() != HalfOpen {
		t.Fatalf("state %s after the cooldown", b.State())
	}
	trial, _, ok := b.Allow()
	if !ok {
		t.Fatal("half-open breaker refused the trial")
	}
	if _, _, ok := b.Allow(); ok {
		t.Fatal("half-open breaker let a second call through during the trial")
	}
	trial(Failure)
	if b.State() != Open {
		t.Fatalf("state %s after a failed trial", b.State())
	}
	if _, wait, ok := b.Allow(); ok || wait != 30*time.Second {
		t.Fatalf("reopened breaker: ok=%v wait=%v, want a fresh 30s cooldown", ok, wait)
	}
	c.add(30 * time.Second)
	trial, _, _ = b.Allow()
	trial(Ignore) // a cancelled trial decides nothing and frees the slot
	if b.State() != HalfOpen {
		t.Fatalf("state %s after an ignored trial", b.State())
	}
	call(t, b, Success)
	if b.State() != Closed {
		t.Fatalf("state %s after a good trial", b.State())
	}
}

func TestBreakerIgnoresReportsFromAnOlderState(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(1, time.Second, c.now)
	late, _, _ := b.Allow() // begins while closed
	call(t, b, Failure)     // opens
	late(Success)           // must not close it
	if b.State() != Open {
		t.Fatalf("state %s: a late report changed an open breaker", b.State())
	}
	late(Failure) // done is idempotent
}

func TestBreakerConcurrentUse(t *testing.T) {
	b := New(3, time.Millisecond, nil)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if done, _, ok := b.Allow(); ok {
					done(Outcome((i + j) % 3))
				}
				_ = b.State()
			}
		}(i)
	}
	wg.Wait()
}

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{1, 0, 50 * time.Millisecond}, {1, 1, 100 * time.Millisecond}, {2, 1, 200 * time.Millisecond},
		{3, 0.5, 300 * time.Millisecond}, {4, 1, 800 * time.Millisecond}, {5, 1, time.Second}, {10, 0, 500 * time.Millisecond},
	} {
		if got := Backoff(100*time.Millisecond, time.Second, tt.n, tt.jitter); got != tt.want {
			t.Errorf("Backoff(n=%d, jitter=%v) = %v, want %v", tt.n, tt.jitter, got, tt.want)
		}
	}
}
