package runs

import (
	"context"
	"testing"

	parley "github.com/parleyhq/parley"
)

// leaves records the leaves set, failing when err is set.
type leaves struct {
	set []string
	err error
}

func (l *leaves) SetLeaf(_ context.Context, sessionID, messageID string) error {
	if l.err != nil {
		return l.err
	}
	l.set = append(l.set, sessionID+"/"+messageID)
	return nil
}

// With a store that cannot begin a run in one write, a run's leaf is set by Spec.Leaves after
// the run is begun; a leaf that cannot be set begins no run; without Leaves, Begin refuses it.
func TestBeginSetsTheLeafWithoutARunBeginner(t *testing.T) {
	m := NewManager(Options{})
	defer m.Shutdown(context.Background())
	ctx := context.Background()
	if _, err := m.Begin(ctx, Spec{Session: "s", Leaf: "q"}); parley.CodeOf(err) != parley.ECInternal {
		t.Fatalf("a leaf with nothing to set it: %v, want refused", err)
	}
	bad := &leaves{err: parley.Errorf(parley.ECNotFound, "no such message")}
	if _, err := m.Begin(ctx, Spec{Session: "s", Leaf: "q", Leaves: bad}); parley.CodeOf(err) != parley.ECNotFound {
		t.Fatalf("a leaf that cannot be set: %v, want not found", err)
	}
	if _, ok := m.Active("s"); ok {
		t.Fatal("a run is active after its leaf failed")
	}
	l := &leaves{}
	r, err := m.Begin(ctx, Spec{Session: "s", Leaf: "q", Leaves: l})
	if err != nil {
		t.Fatalf("the session is not free after a failed leaf: %v", err)
	}
	defer r.Release()
	if len(l.set) != 1 || l.set[0] != "s/q" {
		t.Fatalf("leaves set: %v, want [s/q]", l.set)
	}
}
