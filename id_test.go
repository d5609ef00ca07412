package parley

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// NewID's ids are UUIDs version 7 as the uuid package reads them, in its text form, carrying the
// time they were made, and each sorts after the one before, also when many are made within one
// millisecond and from many goroutines at once.
func TestNewIDIsAnOrderedUUIDv7(t *testing.T) {
	before := time.Now().Add(-time.Millisecond)
	prev := ""
	for range 20000 {
		id := NewID()
		u, err := uuid.Parse(id)
		if err != nil || u.String() != id || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("NewID %q: parsed %v, %v, version %d, variant %v", id, u, err, u.Version(), u.Variant())
		}
		if id <= prev {
			t.Fatalf("%q does not sort after %q", id, prev)
		}
		prev = id
	}
	u := uuid.MustParse(prev)
	if sec, nsec := u.Time().UnixTime(); time.Unix(sec, nsec).Before(before) || time.Unix(sec, nsec).After(time.Now().Add(time.Second)) {
		t.Errorf("the last id's time %v is not about now", time.Unix(sec, nsec))
	}

	var wg sync.WaitGroup
	lists := make([][]string, 4)
	for g := range lists {
		wg.Go(func() {
			for range 5000 {
				lists[g] = append(lists[g], NewID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, l := range lists {
		for i, id := range l {
			if seen[id] || i > 0 && id <= l[i-1] {
				t.Fatalf("id %q repeated or out of order", id)
			}
			seen[id] = true
		}
	}
	// The random part is random: two ids made in a row differ in it.
	a, b := uuid.MustParse(NewID()), uuid.MustParse(NewID())
	if string(a[8:]) == string(b[8:]) {
		t.Errorf("two ids share their random bits: %v %v", a, b)
	}
	if n := testing.AllocsPerRun(100, func() { _ = NewID() }); n != 1 && !raceOn {
		t.Errorf("NewID: %v allocations; want 1 (its string)", n)
	}
}
