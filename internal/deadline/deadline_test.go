package deadline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// wait fails the test unless ch is closed within a generous bound (the machine may be loaded).
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not closed after 10 s", what)
	}
}

type key struct{}

var slots Slots

func TestDetachedKeepsValuesNotCancellation(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	c := slots.Detached(parent, time.Hour)
	cancel(errors.New("the request ended"))
	if got := c.Value(key{}); got != "v" {
		t.Errorf("Value = %v, want v", got)
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err after the parent's cancel = %v, want nil", err)
	}
	select {
	case <-c.Done():
		t.Fatal("Done closed by the parent's cancel")
	default:
	}
	if err := context.Cause(c); err != nil {
		t.Errorf("Cause = %v, want nil", err)
	}
}

func TestDetachedDeadlineIsNoEarlierAndAtMostASlotLater(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 3 * time.Millisecond, time.Second, 10 * time.Second, 24 * time.Hour} {
		before := time.Now()
		c := slots.Detached(nil, d)
		after := time.Now()
		at, ok := c.Deadline()
		if !ok {
			t.Fatalf("d=%v: no deadline", d)
		}
		slack := max(d/64, time.Duration(1)<<minShift)
		if at.Before(before.Add(d)) || at.After(after.Add(d+slack)) {
			t.Errorf("d=%v: deadline %v after the call, want between %v and %v", d, at.Sub(before), d, after.Sub(before)+d+slack)
		}
	}
}

func TestDetachedEndsWithDeadlineExceeded(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := slots.Detached(parent, 2*time.Millisecond)
	cancel(errors.New("not this one"))
	wait(t, c.Done(), "Done")
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err = %v, want context.DeadlineExceeded", err)
	}
	if err := context.Cause(c); err != context.DeadlineExceeded {
		t.Errorf("Cause = %v, want context.DeadlineExceeded", err)
	}
	at, _ := c.Deadline()
	if time.Now().Before(at) {
		t.Errorf("ended before its deadline")
	}
}

// Deadlines asked for at about the same moment share one channel (one timer): what a context
// of its own each cannot do.
func TestDeadlinesShareASlot(t *testing.T) {
	chans := map[<-chan struct{}]bool{}
	for range 1000 {
		chans[slots.Detached(context.Background(), 10*time.Second).Done()] = true
	}
	// 1000 calls take far less than the slot's 134 ms on any machine that runs the tests; a
	// boundary may fall between two of them.
	if len(chans) > 3 {
		t.Errorf("1000 deadlines 10 s away used %d channels, want at most 3", len(chans))
	}
}

func TestDetachedAllocatesOnlyItself(t *testing.T) {
	parent := context.WithValue(context.Background(), key{}, "v")
	slots.Detached(parent, 10*time.Second) // the slot
	n := testing.AllocsPerRun(1000, func() { _ = slots.Detached(parent, 10*time.Second) })
	// the context and the parent's values without its cancellation; a new slot now and then
	if n > 2.1 {
		t.Errorf("Detached: %.2f allocations, want at most 2 (context.WithTimeout makes 4 or more)", n)
	}
}

func TestAfterFuncAndDerivedContexts(t *testing.T) {
	c := slots.Detached(context.Background(), 2*time.Millisecond)
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	var stopped atomic.Bool
	stop := context.AfterFunc(c, func() {
		if stopped.Load() {
			t.Error("a stopped AfterFunc ran")
		}
	})
	if !stop() {
		t.Error("stop before the end = false, want true")
	}
	stopped.Store(true)
	if stop() {
		t.Error("a second stop = true, want false")
	}
	child, cancel := context.WithCancel(c)
	defer cancel()
	wait(t, ran, "AfterFunc")
	wait(t, child.Done(), "a derived context")
	if err := child.Err(); err != context.DeadlineExceeded {
		t.Errorf("derived Err = %v, want context.DeadlineExceeded", err)
	}
	// Once ended: AfterFunc runs f at once (in a goroutine), stop reports false.
	late := make(chan struct{})
	stop = context.AfterFunc(c, func() { close(late) })
	wait(t, late, "AfterFunc after the end")
	if stop() {
		t.Error("stop after the end = true, want false")
	}
}

// A slot is forgotten once it fires: the live slots are bounded by the widths in use.
func TestFiredSlotsAreForgotten(t *testing.T) {
	c := slots.Detached(nil, 2*time.Millisecond)
	wait(t, c.Done(), "Done")
	var own Slots
	c = own.Detached(nil, 2*time.Millisecond)
	if n := own.Live(); n != 1 {
		t.Errorf("%d live slots, want 1", n)
	}
	wait(t, c.Done(), "Done")
	if n := own.Live(); n != 0 {
		t.Errorf("%d live slots after the deadline, want 0", n)
	}
}
