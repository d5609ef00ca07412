package stackdepth

import "testing"

// noteBelow notes the stack n frames of at least 256 bytes under its caller's.
//
//go:noinline
func noteBelow(g *Gauge, n int) int {
	var pad [256]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		g.Note(Here())
		return int(pad[0])
	}
	return noteBelow(g, n-1) + int(pad[n%len(pad)])
}

func TestGaugeKeepsTheDeepestNoteUnderItsTop(t *testing.T) {
	var g Gauge
	if d := g.Depth(); d != 0 {
		t.Fatalf("a gauge with nothing noted reads %d, want 0", d)
	}
	done := make(chan [3]int)
	go func() {
		Deepen(16) // the stack is not moved while measured
		g.Top(Here())
		noteBelow(&g, 2)
		shallow := g.Depth()
		noteBelow(&g, 8)
		deep := g.Depth()
		noteBelow(&g, 1) // shallower: the deepest stays
		done <- [3]int{shallow, deep, g.Depth()}
	}()
	r := <-done
	if r[0] < 2*256 || r[1] < 8*256 || r[1] <= r[0] || r[2] != r[1] {
		t.Fatalf("depths %d (2 frames of 256 bytes), %d (8 frames), then %d after a shallower note; want at least 512, at least 2048 and the deepest kept", r[0], r[1], r[2])
	}
	if r[1] > 64<<10 {
		t.Fatalf("8 frames of 256 bytes read as %d bytes", r[1])
	}
}

func TestGaugeIgnoresOtherStacks(t *testing.T) {
	var g Gauge
	g.Top(Here())
	g.Note(Here() + 64)    // above the top: not under it
	g.Note(Here() - 2<<20) // more than 1 MiB under it: another goroutine's stack
	if d := g.Depth(); d != 0 {
		t.Fatalf("notes off the measured stack read %d, want 0", d)
	}
}

// recorder is a testing.TB that keeps what Within reports instead of ending the test.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Logf(string, ...any)               {}
func (r *recorder) Fatalf(format string, args ...any) { r.failed = append(r.failed, format) }

func TestWithinFailsOverBudgetOrUnmeasured(t *testing.T) {
	for _, c := range []struct {
		used, budget int
		race, fails  bool
	}{
		{used: 300, budget: 500},
		{used: 500, budget: 500},
		{used: 501, budget: 500, fails: true},
		{used: 501, budget: 500, race: true}, // the race detector's frames: only reported
		{used: 0, budget: 500, fails: true},
		{used: 0, budget: 500, race: true, fails: true},
	} {
		r := &recorder{}
		Within(r, "x", c.used, c.budget, c.race)
		if failed := len(r.failed) > 0; failed != c.fails {
			t.Errorf("Within(used %d, budget %d, race %v) failed: %v, want %v", c.used, c.budget, c.race, failed, c.fails)
		}
	}
}
