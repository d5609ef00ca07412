package httpapi

import (
	"context"
	"testing"
	"time"
)

// Reserving a request body's share of the budget and giving it back allocates nothing (on the
// code before, the release was a closure: one allocation a request).
func TestBodyBudgetAllocatesNothing(t *testing.T) {
	b := newBodyBudget(1 << 20)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		r, err := b.acquire(ctx, 4096, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.release(r)
	}); n != 0 {
		t.Fatalf("%v allocations a request body, want 0", n)
	}
}
