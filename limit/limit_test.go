package limit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/redistest"
)

var ctx = context.Background()

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
		err  bool
	}{
		{"60/m", Rate{60, time.Minute, 60}, false},
		{"10/s", Rate{10, time.Second, 10}, false},
		{"1000/h,burst=50", Rate{1000, time.Hour, 50}, false},
		{"5/day", Rate{5, 24 * time.Hour, 5}, false},
		{"3/10m", Rate{3, 10 * time.Minute, 3}, false},
		{"off", Rate{}, false},
		{"0", Rate{}, false},
		{"60", Rate{}, true},
		{"-1/m", Rate{}, true},
		{"x/m", Rate{}, true},
		{"5/fortnight", Rate{}, true},
		{"5/m,burst=0", Rate{}, true},
		{"5/m,bust=3", Rate{}, true},
		{"5/1ns", Rate{}, true},
	} {
		got, err := ParseRate(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil && !got.Off() {
			back, err := ParseRate(got.String())
			if err != nil || back != got {
				t.Errorf("ParseRate(%q.String() = %q) = %+v, %v", tc.in, got.String(), back, err)
			}
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestMemoryGCRA(t *testing.T) {
	c := &clock{time.Unix(1_700_000_000, 0)}
	m := NewMemory()
	m.Now = c.now
	r := Rate{Count: 60, Per: time.Minute, Burst: 3}
	// A burst of 3 goes through; the 4th waits one interval (1s).
	for i := range 3 {
		if d, _ := m.Allow(ctx, "k", r); !d.Allowed {
			t.Fatalf("request %d of the burst refused: %+v", i, d)
		}
	}
	d, _ := m.Allow(ctx, "k", r)
	if d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("4th request: %+v, want refused, retry after 1s", d)
	}
	// A refused request costs nothing: after the wait it goes through.
	c.t = c.t.Add(999 * time.Millisecond)
	if d, _ := m.Allow(ctx, "k", r); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("1ms early: %+v", d)
	}
	c.t = c.t.Add(time.Millisecond)
	if d, _ := m.Allow(ctx, "k", r); !d.Allowed {
		t.Fatalf("after the wait: %+v", d)
	}
	// Another key has its own bucket.
	if d, _ := m.Allow(ctx, "other", r); !d.Allowed {
		t.Fatal("another key was limited")
	}
	// After a quiet minute the whole burst is back.
	c.t = c.t.Add(time.Minute)
	for i := range 3 {
		if d, _ := m.Allow(ctx, "k", r); !d.Allowed {
			t.Fatalf("burst after idle, request %d refused", i)
		}
	}
	// Off allows anything and stores nothing.
	n := m.Len()
	for range 100 {
		if d, _ := m.Allow(ctx, "free", Rate{}); !d.Allowed {
			t.Fatal("Rate{} refused a request")
		}
	}
	if m.Len() != n {
		t.Fatal("an off rate stored a key")
	}
}

func TestMemoryIsBounded(t *testing.T) {
	c := &clock{time.Unix(1_700_000_000, 0)}
	m := NewMemory()
	m.Now, m.MaxKeys = c.now, 100
	r := Rate{Count: 1, Per: time.Hour, Burst: 1}
	for i := range 1000 {
		m.Allow(ctx, fmt.Sprint("k", i), r)
		if m.Len() > m.MaxKeys {
			t.Fatalf("%d keys held, bound %d", m.Len(), m.MaxKeys)
		}
	}
	// Keys whose bucket refilled go first, and a fresh key is never refused for lack of room.
	c.t = c.t.Add(2 * time.Hour)
	if d, _ := m.Allow(ctx, "new", r); !d.Allowed || m.Len() != 1 {
		t.Fatalf("after the buckets refilled: %+v, %d keys", d, m.Len())
	}
}

// TestRedisSharedAcrossInstances runs two limiters on two connections, as two Parley instances
// would, against the machine's Redis: they share one budget.
func TestRedisSharedAcrossInstances(t *testing.T) {
	c1, prefix := redistest.Client(t)
	c2, _ := redistest.Client(t)
	a := &Redis{Client: c1, Prefix: prefix}
	b := &Redis{Client: c2, Prefix: prefix}
	r := Rate{Count: 10, Per: time.Hour, Burst: 4}
	allowed := 0
	for i := range 8 {
		l := a
		if i%2 == 1 {
			l = b
		}
		d, err := l.Allow(ctx, "user:alice", r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else if d.RetryAfter <= 0 || d.RetryAfter > r.interval() {
			t.Fatalf("refused with retry after %v, want (0, %v]", d.RetryAfter, r.interval())
		}
	}
	if allowed != 4 {
		t.Fatalf("%d of 8 allowed across two instances, want the burst of 4", allowed)
	}
	if d, err := b.Allow(ctx, "user:bob", r); err != nil || !d.Allowed {
		t.Fatalf("another key: %+v, %v", d, err)
	}
	ttl := c1.PTTL(ctx, prefix+"user:alice").Val()
	if ttl <= 0 || ttl > 4*r.interval()+time.Second {
		t.Fatalf("key ttl %v: it must expire once the bucket is full again", ttl)
	}
}

// TestRedisConcurrent: many requests at once from both instances never pass more than the burst.
func TestRedisConcurrent(t *testing.T) {
	c1, prefix := redistest.Client(t)
	c2, _ := redistest.Client(t)
	ls := []*Redis{{Client: c1, Prefix: prefix}, {Client: c2, Prefix: prefix}}
	r := Rate{Count: 1, Per: time.Hour, Burst: 7}
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := ls[i%2].Allow(ctx, "k", r)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if allowed != 7 {
		t.Fatalf("%d of 40 concurrent requests allowed, want 7", allowed)
	}
}

func BenchmarkMemoryAllow(b *testing.B) {
	m := NewMemory()
	r := Rate{Count: 1_000_000, Per: time.Second, Burst: 1_000_000}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprint("u:", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Allow(ctx, keys[i%len(keys)], r)
		i++
	}
}

func BenchmarkRedisAllow(b *testing.B) {
	c, prefix := redistest.Client(b)
	l := &Redis{Client: c, Prefix: prefix}
	r := Rate{Count: 1_000_000, Per: time.Second, Burst: 1_000_000}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Allow(ctx, "u:bench", r); err != nil {
			b.Fatal(err)
		}
	}
}
